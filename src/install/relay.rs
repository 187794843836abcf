//! Plugin log relay: a unix datagram socket at `<CNI_AGENT_RUN_DIR>/log.sock`. Each datagram is one UTF-8
//! plugin log line (no newline); we print it to stderr prefixed `istio-cni: `, so `kubectl logs` on the
//! DaemonSet pod shows every plugin decision.

use crate::error::{IoContext, Result};
use std::io::Write;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};

/// The socket's file name in the run dir.
pub const SOCKET_NAME: &str = "log.sock";

/// Largest datagram we read; longer ones are truncated by the kernel.
const MAX_LINE: usize = 64 * 1024;

/// One relayed line as printed (lossy UTF-8, trailing newlines and control characters made harmless).
pub fn format_line(data: &[u8]) -> String {
    let text = String::from_utf8_lossy(data);
    let text = text.trim_end_matches(['\n', '\r']);
    let clean: String = text
        .chars()
        .map(|c| if c.is_control() && c != '\t' { ' ' } else { c })
        .collect();
    format!("istio-cni: {clean}\n")
}

/// Binds the socket (replacing a stale one) and relays on a background thread. Returns the socket path.
pub fn start(run_dir: &Path) -> Result<PathBuf> {
    let path = run_dir.join(SOCKET_NAME);
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
                    Ok(n) => {
                        let line = format_line(&buf[..n]);
                        let _ = std::io::stderr().lock().write_all(line.as_bytes());
                    }
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

#[cfg(test)]
mod tests {
    #[test]
    fn lines_are_prefixed_and_sanitised() {
        assert_eq!(super::format_line(b"ADD ok"), "istio-cni: ADD ok\n");
        assert_eq!(super::format_line(b"a\x1b[31mb\n"), "istio-cni: a [31mb\n");
        assert_eq!(super::format_line(b"\xff"), "istio-cni: \u{fffd}\n");
    }
}
