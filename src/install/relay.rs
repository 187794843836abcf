//! Plugin log relay: a unix datagram socket at `<CNI_AGENT_RUN_DIR>/log.sock`. Each datagram is one plugin
//! log record (`{"level":..,"msg":..}`, or a plain UTF-8 line); we log it under the `cni-plugin` scope
//! ([`crate::logging::relayed`]: its level filter, text `istio-cni: msg` or a JSON line), so `kubectl
//! logs` on the DaemonSet pod shows every plugin decision. The plugin's ADD records
//! ([`crate::plugin::record`]) arrive on the same socket and feed [`super::plugin_metrics`] instead.

use crate::error::{IoContext, Result};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};

/// Largest datagram we read; longer ones are truncated by the kernel.
pub const MAX_LINE: usize = 64 * 1024;

/// Binds the socket (replacing a stale one) and relays on a background thread. Returns the socket path.
pub fn start(run_dir: &Path) -> Result<PathBuf> {
    let path = crate::rundir::RunDir::new(run_dir).log_socket();
    crate::fsutil::remove_if_exists(&path)?;
    let sock = UnixDatagram::bind(&path).io_context(|| format!("bind {}", path.display()))?;
    // Any local plugin process may send; the socket lives in a root-only dir.
    let _ = std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600));
    std::thread::Builder::new()
        .name("log-relay".into())
        .spawn(move || {
            let mut buf = vec![0u8; MAX_LINE];
            loop {
                match sock.recv(&mut buf) {
                    // A plugin's ADD record feeds /metrics; anything else is a log line.
                    Ok(n) if super::plugin_metrics::take(&buf[..n]) => {}
                    Ok(n) => crate::logging::relayed(&buf[..n]),
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        log::warn!("log relay stopped: {e}");
                        return;
                    }
                }
            }
        })
        .io_context(|| "spawn log relay thread".to_string())?;
    Ok(path)
}
