//! The node's iptables programs, for IPTABLES_NODE_BINARIES only ([`super::io`]): the plugin runs on the
//! node and finds them on its `PATH`. The node's agents never run them.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Where to look when `PATH` is unset.
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/sbin:/sbin:/usr/local/bin:/usr/bin:/bin";

/// The environment variables a node tool inherits from us (an allow-list): whatever else the runtime
/// that started the plugin has in its environment (`LD_PRELOAD`, `XTABLES_LIBDIR`, the CNI variables,
/// ...) never reaches a root process. Besides it the tool gets only `XTABLES_LOCKFILE` ([`super::exec`]).
const INHERITED_ENV: [&str; 1] = ["PATH"];

/// A located program.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tool {
    pub path: PathBuf,
}

/// Finds `prog` on `PATH`.
pub fn find(prog: &str) -> Option<Tool> {
    let path = std::env::var("PATH").unwrap_or_else(|_| DEFAULT_PATH.into());
    find_in(&path, prog)
}

/// Finds `prog` in the `:`-separated directories of `path`, as root runs it: only absolute directories
/// (a relative entry would name a program under whatever directory the runtime started us in), and only a
/// regular file owned by root (or us) that no group or other user may write.
fn find_in(path: &str, prog: &str) -> Option<Tool> {
    use std::os::unix::fs::MetadataExt;
    let trusted = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| {
            m.is_file()
                && crate::fsutil::root_or_us(m.uid())
                && crate::fsutil::owner_writes_only(m.mode())
        })
    };
    path.split(':')
        .filter(|d| d.starts_with('/'))
        .map(|d| Path::new(d).join(prog))
        .find(|p| trusted(p))
        .map(|path| Tool { path })
}

impl Tool {
    /// A command for the tool with only the environment in `INHERITED_ENV`.
    pub fn command(&self) -> Command {
        let mut c = Command::new(&self.path);
        c.env_clear();
        for k in INHERITED_ENV {
            if let Some(v) = std::env::var_os(k) {
                c.env(k, v);
            }
        }
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_tools_on_path_and_hands_them_only_path() {
        let t = find("sh").expect("sh on PATH");
        assert!(t.path.ends_with("sh"), "{t:?}");
        assert!(find("no-such-iptables-tool").is_none());
        let c = t.command();
        let envs: Vec<_> = c.get_envs().map(|(k, _)| k.to_os_string()).collect();
        assert!(envs.iter().all(|k| k == "PATH"), "{envs:?}");
    }

    #[test]
    fn only_absolute_directories_and_files_nobody_else_may_write() {
        use std::os::unix::fs::PermissionsExt;
        let dir = crate::fsutil::test_dir("iptables-tool-find");
        let tool = dir.join("fake-restore");
        std::fs::write(&tool, "#!/bin/sh\n").unwrap();
        let set = |mode| std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(mode));
        let abs = dir.to_str().unwrap();
        set(0o755).unwrap();
        assert_eq!(
            find_in(abs, "fake-restore").map(|t| t.path),
            Some(tool.clone())
        );
        // Group- or world-writable: anyone could have put their program there.
        for mode in [0o775, 0o757] {
            set(mode).unwrap();
            assert_eq!(find_in(abs, "fake-restore"), None, "{mode:o}");
        }
        set(0o755).unwrap();
        // A relative entry names nothing, even one that leads to that same directory from here.
        let up = std::env::current_dir().unwrap().components().count() - 1;
        let rel = format!("{}{}", "../".repeat(up), abs.trim_start_matches('/'));
        assert!(Path::new(&rel).join("fake-restore").is_file(), "{rel}");
        assert_eq!(find_in(&format!(".:{rel}::"), "fake-restore"), None);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
