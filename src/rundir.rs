//! The agent run dir (`cni_agent_run_dir` in the plugin configuration, `CNI_AGENT_RUN_DIR` for the
//! installer and the repair agent; default `/var/run/istio-cni`): the one contract between the installer,
//! which writes it, and the plugin and repair agent, which read it. Every file name in it is spelled here.
//!
//! | file | written by | read by |
//! | --- | --- | --- |
//! | `istio-cni-kubeconfig` | installer (`install::kubeconfig`) | plugin: pod lookup, STATUS |
//! | `log.sock` | installer binds it (`install::relay`) | plugin sends its log records (`logging`) |
//! | `iptables-backend` | installer; the plugin on its first ADD when absent | plugin, repair agent |
//! | `pod-cache.sock` | installer binds it (`podcache::server`, unless `POD_CACHE_ENABLED=false`) | plugin asks it for the pod (`podcache::client`) |
//!
//! A record for another backend (nftables) belongs here too, as one more name beside `iptables-backend`.

use std::path::{Path, PathBuf};

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
    /// The recorded iptables backend (`nft`, `legacy` or `plain`, one line).
    pub const IPTABLES_BACKEND: &'static str = "iptables-backend";
    /// The node's pod cache (unix stream socket, root only).
    pub const POD_CACHE_SOCKET: &'static str = "pod-cache.sock";
    /// What uninstall removes besides the kubeconfig: the sockets and the backend record (a later install
    /// records it afresh).
    pub const RECORDS: [&'static str; 3] = [
        Self::LOG_SOCKET,
        Self::IPTABLES_BACKEND,
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
    pub fn iptables_backend(&self) -> PathBuf {
        self.0.join(Self::IPTABLES_BACKEND)
    }
    pub fn pod_cache_socket(&self) -> PathBuf {
        self.0.join(Self::POD_CACHE_SOCKET)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(
            RunDir::RECORDS,
            ["log.sock", "iptables-backend", "pod-cache.sock"]
        );
    }
}
