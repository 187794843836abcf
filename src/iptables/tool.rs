//! Where the iptables programs are and how to start them.
//!
//! The plugin runs on the node and finds them on `PATH`. The installer and the repair agent run in a
//! FROM-scratch image with no iptables of its own; with `ISTIO_CNI_HOST_ROOT` set (the manifests set it to
//! `/host/proc/1/root`, the node's root through the read-only host `/proc` mount) they run the node's own
//! binaries: looked up under that root, and started chrooted into it (needs CAP_SYS_CHROOT).

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Run the node's iptables from inside a container by chrooting into this directory.
pub const HOST_ROOT_ENV: &str = "ISTIO_CNI_HOST_ROOT";
/// Where to look for the tools under the host root.
const HOST_PATH: &str = "/usr/local/sbin:/usr/sbin:/sbin:/usr/local/bin:/usr/bin:/bin";

/// A located program: its path as the child sees it, and the root to chroot into, if any.
#[derive(Debug, Clone)]
pub struct Tool {
    pub path: PathBuf,
    pub root: Option<PathBuf>,
}

fn host_root() -> Option<PathBuf> {
    std::env::var_os(HOST_ROOT_ENV)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// Finds `prog` on `PATH`, or under the host root when [`HOST_ROOT_ENV`] is set.
pub fn find(prog: &str) -> Option<Tool> {
    match host_root() {
        Some(root) => HOST_PATH.split(':').find_map(|d| {
            let inside = Path::new(d).join(prog);
            let outside = root.join(inside.strip_prefix("/").unwrap_or(&inside));
            outside.is_file().then(|| Tool {
                path: inside,
                root: Some(root.clone()),
            })
        }),
        None => {
            let path = std::env::var("PATH").unwrap_or_else(|_| HOST_PATH.into());
            path.split(':').filter(|d| !d.is_empty()).find_map(|d| {
                let p = Path::new(d).join(prog);
                p.is_file().then_some(Tool {
                    path: p,
                    root: None,
                })
            })
        }
    }
}

/// NSS sources that answer locally and quickly; anything else (ldap, sss, nis, winbind, ...) may need the
/// network, and then every iptables child gets the isolation described in [`Tool::command`].
const LOCAL_NSS_SOURCES: [&str; 4] = ["files", "compat", "systemd", "db"];

/// Whether the `passwd` or `group` lines of an nsswitch.conf name a source that is not local (pure).
pub fn nss_may_block(nsswitch: &str) -> bool {
    nsswitch.lines().any(|line| {
        let line = line.split('#').next().unwrap_or("");
        match line.split_once(':') {
            Some((db, sources)) if matches!(db.trim(), "passwd" | "group") => sources
                .split_whitespace()
                .filter(|w| !w.starts_with('['))
                .any(|w| !LOCAL_NSS_SOURCES.contains(&w)),
            _ => false,
        }
    })
}

/// [`nss_may_block`] for the nsswitch.conf the tools will see (under the host root when there is one).
/// Read once per process and root: a dual-stack ADD starts two iptables children.
fn isolate_nss(root: Option<&Path>) -> bool {
    static SEEN: std::sync::Mutex<Option<(Option<PathBuf>, bool)>> = std::sync::Mutex::new(None);
    let mut seen = SEEN.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((r, isolate)) = seen.as_ref() {
        if r.as_deref() == root {
            return *isolate;
        }
    }
    let path = match root {
        Some(r) => r.join("etc/nsswitch.conf"),
        None => PathBuf::from("/etc/nsswitch.conf"),
    };
    let isolate = std::fs::read_to_string(&path)
        .map(|t| nss_may_block(&t))
        .unwrap_or(false);
    if isolate {
        log::debug!(
            "{} names a remote passwd/group source: iptables get files-only NSS",
            path.display()
        );
    }
    *seen = Some((root.map(Path::to_path_buf), isolate));
    isolate
}

impl Tool {
    /// A command for the tool, chrooted into the host root when there is one. iptables resolves every
    /// `--uid-owner 1337` through NSS (getpwnam) before trying it as a number; on a node whose
    /// nsswitch.conf sends passwd/group lookups to LDAP, sssd or similar, that can stall ADD. Only there
    /// (like upstream, which does it always) the child gets a private mount namespace with /dev/null over
    /// /etc/nsswitch.conf, i.e. plain files lookups. Elsewhere we skip it: copying a busy node's mount table
    /// into a new namespace costs every pod start. The isolation is best effort.
    pub fn command(&self) -> Command {
        let mut c = Command::new(&self.path);
        let root: Option<CString> = self
            .root
            .as_ref()
            .and_then(|r| CString::new(r.as_os_str().as_bytes()).ok());
        let isolate = isolate_nss(self.root.as_deref());
        if root.is_none() && !isolate {
            return c;
        }
        // SAFETY: the closure runs in the forked child before exec and only makes raw syscalls (unshare,
        // mount, chroot, chdir) on C strings prepared before the fork; nix passes the short literal paths
        // through a stack buffer. It allocates nothing and takes no locks, so it is async-signal-safe.
        unsafe {
            c.pre_exec(move || {
                use nix::mount::{mount, MsFlags};
                let private = isolate
                    && nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS).is_ok()
                    && mount(
                        None::<&str>,
                        "/",
                        None::<&str>,
                        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
                        None::<&str>,
                    )
                    .is_ok();
                if let Some(root) = &root {
                    nix::unistd::chroot(root.as_c_str())?;
                    nix::unistd::chdir("/")?;
                }
                if private {
                    let _ = mount(
                        Some("/dev/null"),
                        "/etc/nsswitch.conf",
                        None::<&str>,
                        MsFlags::MS_BIND,
                        None::<&str>,
                    );
                }
                Ok(())
            });
        }
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_remote_nss_sources_need_isolation() {
        assert!(!nss_may_block(
            "passwd: files systemd\ngroup: files systemd\nhosts: files dns\n"
        ));
        assert!(!nss_may_block(
            "passwd: compat [NOTFOUND=return] files\n# group: ldap\n"
        ));
        assert!(nss_may_block("passwd: files sss\ngroup: files sss\n"));
        assert!(nss_may_block("group:  files ldap\n"));
        assert!(!nss_may_block("hosts: files ldap\n"));
    }

    #[test]
    fn finds_tools_on_path_or_under_a_root() {
        // `sh` exists on every test machine, under / as well.
        let t = find("sh").expect("sh on PATH");
        assert!(t.root.is_none() && t.path.is_absolute());
        assert!(find("no-such-tool-here").is_none());
    }
}
