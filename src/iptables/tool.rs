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
    path.split(':')
        .filter(|d| !d.is_empty())
        .map(|d| Path::new(d).join(prog))
        .find(|p| p.is_file())
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
}
