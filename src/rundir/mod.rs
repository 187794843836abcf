//! The agent run dir (`cni_agent_run_dir` in the plugin configuration, `CNI_AGENT_RUN_DIR` for the
//! installer and the repair agent; default `/var/run/istio-cni`): the one contract between the installer,
//! which writes it, and the plugin and repair agent, which read it. Every file name in it is spelled here.
//!
//! | file | written by | read by |
//! | --- | --- | --- |
//! | `istio-cni-kubeconfig` | installer (`install::config::kubeconfig`) | plugin: pod lookup, STATUS |
//! | `log.sock` | installer binds it (`install::node::relay`) | plugin sends its log records (`logging`) |
//! | `istio-cni.log` | plugin appends its info lines, rotates it at 10 MiB (`logging::rolling`); never removed | the operator |
//! | `iptables-backend` | installer; the plugin on its first ADD when absent | plugin, repair agent |
//! | `pod-cache.sock` | installer binds it (`podcache::server`, unless `POD_CACHE_ENABLED=false`) | plugin asks it for the pod (`podcache::client`) |
//! | `agents.lock` | every running installer holds a lock in it ([`lease`]) | the installers: which one owns the node's installation |
//! | `audit-decisions` | the audit (installer's or repair agent's; `audit::persist`), whole and atomically, at most once a second when its pods change; never removed (entries of gone pods are dropped at the next start's first list) | the audit when it starts: each running pod's decision as first seen, kept across a restart |
//!
//! A record for another backend (nftables) belongs here too, as one more name beside `iptables-backend`.
//!
//! **Whose file it is.** Two agents can share a run dir for a while (a `maxSurge` roll, an uninstall
//! overlapping a reinstall): the newer one binds its sockets and writes its records over the older one's.
//! Every process records the identity (device and inode) of each file it binds or writes here
//! ([`claim`]); a running agent's cleanup removes a file only while it is still the one it claimed
//! ([`remove_own`]), so an older agent stopping never takes away what a newer one put there. Which agent
//! owns the node's installation, and whether another one still runs when one stops, is [`lease`]'s.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

pub mod lease;
pub mod owner;

/// The run dir when none is configured.
pub const DEFAULT: &str = "/var/run/istio-cni";

/// One run dir.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunDir(PathBuf);

impl RunDir {
    /// The plugin's kubeconfig.
    pub const KUBECONFIG: &'static str = "istio-cni-kubeconfig";
    /// The installer's log relay socket (unix datagram).
    pub const LOG_SOCKET: &'static str = "log.sock";
    /// The plugin's rolling log file (`logging::rolling`); kept at uninstall, as upstream keeps it.
    pub const PLUGIN_LOG: &'static str = "istio-cni.log";
    /// The recorded iptables backend (`nft`, `legacy` or `plain`, one line).
    pub const IPTABLES_BACKEND: &'static str = "iptables-backend";
    /// Present: the plugin runs the node's iptables binaries instead of writing the kernel's tables
    /// (IPTABLES_NODE_BINARIES).
    pub const IPTABLES_NODE_BINARIES: &'static str = "iptables-node-binaries";
    /// The node's pod cache (unix stream socket, root only).
    pub const POD_CACHE_SOCKET: &'static str = "pod-cache.sock";
    /// The installers' lease: which one owns the node's installation ([`lease`]).
    pub const LEASE: &'static str = "agents.lock";
    /// The audit's kept decisions: each running pod as it first saw it, reduced (`audit::kept`).
    pub const AUDIT_DECISIONS: &'static str = "audit-decisions";
    /// What uninstall removes besides the kubeconfig: the sockets and the backend record (a later install
    /// records it afresh).
    pub const RECORDS: [&'static str; 4] = [
        Self::LOG_SOCKET,
        Self::IPTABLES_BACKEND,
        Self::IPTABLES_NODE_BINARIES,
        Self::POD_CACHE_SOCKET,
    ];

    /// The run dir at `dir`; trailing slashes are dropped, so file paths print with one separator.
    pub fn new(dir: impl AsRef<Path>) -> RunDir {
        let s = dir.as_ref().as_os_str().to_string_lossy();
        let trimmed = s.trim_end_matches('/');
        if trimmed.len() == s.len() {
            RunDir(dir.as_ref().to_path_buf())
        } else if trimmed.is_empty() {
            RunDir(PathBuf::from("/"))
        } else {
            RunDir(PathBuf::from(trimmed))
        }
    }
    pub fn path(&self) -> &Path {
        &self.0
    }
    pub fn kubeconfig(&self) -> PathBuf {
        self.0.join(Self::KUBECONFIG)
    }
    pub fn log_socket(&self) -> PathBuf {
        self.0.join(Self::LOG_SOCKET)
    }
    pub fn plugin_log(&self) -> PathBuf {
        self.0.join(Self::PLUGIN_LOG)
    }
    pub fn iptables_backend(&self) -> PathBuf {
        self.0.join(Self::IPTABLES_BACKEND)
    }
    pub fn iptables_node_binaries(&self) -> PathBuf {
        self.0.join(Self::IPTABLES_NODE_BINARIES)
    }
    pub fn pod_cache_socket(&self) -> PathBuf {
        self.0.join(Self::POD_CACHE_SOCKET)
    }
    pub fn lease(&self) -> PathBuf {
        self.0.join(Self::LEASE)
    }
    pub fn audit_decisions(&self) -> PathBuf {
        self.0.join(Self::AUDIT_DECISIONS)
    }
}

/// A file's identity: device and inode (as `lstat` reports them: a socket or a link is itself).
pub type FileId = (u64, u64);

/// The identity of what is at `path` now, if anything.
pub fn identity(path: &Path) -> Option<FileId> {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(path)
        .ok()
        .map(|m| (m.dev(), m.ino()))
}

/// The run-dir files this process bound or wrote, with the identity each had then.
static CLAIMS: Mutex<Vec<(PathBuf, FileId)>> = Mutex::new(Vec::new());

fn claims() -> std::sync::MutexGuard<'static, Vec<(PathBuf, FileId)>> {
    // A panic elsewhere while holding it leaves a plain list, still consistent.
    CLAIMS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Records that the file `id` now at `path` is this process's (it just bound or wrote it there), replacing
/// an earlier claim on that path.
pub fn claim_id(path: &Path, id: FileId) {
    let mut c = claims();
    c.retain(|(p, _)| p != path);
    c.push((path.to_path_buf(), id));
}

/// [`claim_id`] for whatever is at `path` now (nothing is claimed when it is gone).
pub fn claim(path: &Path) {
    if let Some(id) = identity(path) {
        claim_id(path, id);
    }
}

/// What this process claimed at `path`, if anything.
pub fn claimed(path: &Path) -> Option<FileId> {
    claims().iter().find(|(p, _)| p == path).map(|(_, id)| *id)
}

/// What [`remove_own`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Removal {
    Removed,
    Absent,
    /// Another process's file (a newer agent's, or one this process never wrote): left in place.
    Left,
}

impl std::fmt::Display for Removal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Removal::Removed => "removed",
            Removal::Absent => "absent",
            Removal::Left => "left in place: another process put it there (a newer agent)",
        })
    }
}

/// Removes `path` when it is still the file this process claimed. Between the check and the unlink
/// another process could replace it; both are system calls in a row, and a newer agent's sockets
/// survive a lost race (they are bound again when missing).
pub fn remove_own(path: &Path) -> crate::error::Result<Removal> {
    match identity(path) {
        None => Ok(Removal::Absent),
        Some(id) if claimed(path) == Some(id) => Ok(if crate::fsutil::remove_if_exists(path)? {
            Removal::Removed
        } else {
            Removal::Absent
        }),
        Some(_) => Ok(Removal::Left),
    }
}

/// Cleanup of one run-dir file, as a log note: a running agent's removes it only while it is its own
/// ([`remove_own`]); `all` (`--uninstall`, which put nothing there) removes it whoever put it there.
pub fn remove_record(path: &Path, all: bool) -> crate::error::Result<String> {
    let r = if all {
        match crate::fsutil::remove_if_exists(path)? {
            true => Removal::Removed,
            false => Removal::Absent,
        }
    } else {
        remove_own(path)?
    };
    Ok(format!("{}: {r}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_claimed_file_is_removed() {
        let dir = crate::fsutil::test_dir("rundir-claims");
        let p = dir.join("record");
        std::fs::write(&p, "ours").unwrap();
        assert_eq!(remove_own(&p).unwrap(), Removal::Left, "never claimed");
        claim(&p);
        // Another process replaces it (a new inode under the same name).
        let other = dir.join("other");
        std::fs::write(&other, "theirs").unwrap();
        std::fs::rename(&other, &p).unwrap();
        assert_eq!(remove_own(&p).unwrap(), Removal::Left);
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "theirs");
        claim(&p);
        assert_eq!(remove_own(&p).unwrap(), Removal::Removed);
        assert_eq!(remove_own(&p).unwrap(), Removal::Absent);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn files_are_named_once_and_print_with_one_separator() {
        let r = RunDir::new("/tmp/x//");
        assert_eq!(r.path(), Path::new("/tmp/x"));
        assert_eq!(
            r.kubeconfig().display().to_string(),
            "/tmp/x/istio-cni-kubeconfig"
        );
        assert_eq!(r.log_socket(), Path::new("/tmp/x/log.sock"));
        assert_eq!(r.iptables_backend(), Path::new("/tmp/x/iptables-backend"));
        assert_eq!(
            RunDir::new("/").kubeconfig(),
            Path::new("/istio-cni-kubeconfig")
        );
        assert_eq!(
            RunDir::new(DEFAULT).kubeconfig(),
            Path::new("/var/run/istio-cni/istio-cni-kubeconfig")
        );
        assert_eq!(r.pod_cache_socket(), Path::new("/tmp/x/pod-cache.sock"));
        assert_eq!(r.audit_decisions(), Path::new("/tmp/x/audit-decisions"));
        assert_eq!(
            RunDir::RECORDS,
            [
                "log.sock",
                "iptables-backend",
                "iptables-node-binaries",
                "pod-cache.sock"
            ]
        );
    }
}
