//! Plugin log relay: a unix datagram socket at `<CNI_AGENT_RUN_DIR>/log.sock`. Each datagram is one plugin
//! log record (`{"level":..,"msg":..}`, or a plain UTF-8 line); we log it under the `cni-plugin` scope
//! ([`crate::logging::relayed`]: its level filter, text `istio-cni: msg` or a JSON line), so `kubectl
//! logs` on the DaemonSet pod shows every plugin decision. The plugin's ADD records
//! ([`crate::addrecord`], each carrying its ADD's last line) arrive on the same socket and feed
//! [`super::plugin_metrics`]. The socket is drained by a thread that does nothing else (its queue holds
//! `net.unix.max_dgram_qlen` datagrams, 10 by default, and a plugin waits while it is full): records are
//! counted there, lines handed to a second thread that logs them (a write to stderr may block), at most
//! [`BACKLOG`] bytes of them waiting.
//!
//! The socket file is kept up as the pod cache's is ([`crate::serve::socket_file`]): bound again when it
//! is removed, or left behind by a newer agent that is gone; left alone while that agent runs.

use crate::error::{IoContext, Result};
use crate::rundir::{self, FileId};
use crate::serve::socket_file::{self, SocketFile, RECHECK};
use nix::sys::socket::SockType;
use std::io::ErrorKind;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

/// Largest datagram we read; longer ones are truncated by the kernel.
pub const MAX_LINE: usize = 64 * 1024;
/// Bytes of lines taken off the socket and not logged yet, at most; beyond, a line is dropped.
pub const BACKLOG: usize = 1 << 20;

/// Lines taken off the socket, not logged yet, and their bytes.
#[derive(Default)]
struct Backlog {
    lines: Mutex<(Vec<Box<[u8]>>, usize)>,
    added: Condvar,
}

impl Backlog {
    /// Adds `line` unless that would make the backlog more than [`BACKLOG`] bytes.
    fn add(&self, line: &[u8]) {
        let mut b = self.lines.lock().unwrap_or_else(|p| p.into_inner());
        if b.1 + line.len() <= BACKLOG {
            b.0.push(line.into());
            b.1 += line.len();
            self.added.notify_one();
        }
    }

    /// Logs the lines as they come, forever.
    fn log(&self) {
        let mut b = self.lines.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            let (lines, _) = std::mem::take(&mut *b);
            drop(b);
            for line in lines {
                crate::logging::relayed(&line);
            }
            b = self.lines.lock().unwrap_or_else(|p| p.into_inner());
            while b.0.is_empty() {
                b = self.added.wait(b).unwrap_or_else(|p| p.into_inner());
            }
        }
    }
}

/// Binds the socket (replacing a stale one) and relays on two background threads. Returns the socket path.
pub fn start(run_dir: &Path) -> Result<PathBuf> {
    let path = rundir::RunDir::new(run_dir).log_socket();
    let (sock, id) = bind(&path)?;
    let file = SocketFile::new(path.clone(), "log relay", SockType::Datagram, id);
    let backlog = Arc::new(Backlog::default());
    let out = backlog.clone();
    let spawn = |name: &str, f: Box<dyn FnOnce() + Send>| {
        std::thread::Builder::new()
            .name(name.into())
            .spawn(f)
            .io_context(|| format!("spawn the {name} thread"))
    };
    spawn("log-relay-out", Box::new(move || out.log()))?;
    spawn("log-relay", Box::new(move || relay(sock, file, &backlog)))?;
    Ok(path)
}

/// Binds `path` ([`socket_file::bind`]: 0600, replacing a stale socket in one step, claimed as this
/// process's); any local plugin process may send, the socket lives in a root-only dir.
pub fn bind(path: &Path) -> Result<(UnixDatagram, FileId)> {
    let (fd, id) = socket_file::bind(path, SockType::Datagram)?;
    let sock = UnixDatagram::from(fd);
    // recv wakes up at least this often, so the file is looked at on a quiet node too.
    sock.set_read_timeout(Some(RECHECK))
        .io_context(|| format!("read timeout on {}", path.display()))?;
    Ok((sock, id))
}

fn relay(mut sock: UnixDatagram, mut file: SocketFile, lines: &Backlog) {
    let mut buf = vec![0u8; MAX_LINE];
    let mut next_check = Instant::now() + RECHECK;
    loop {
        if Instant::now() >= next_check {
            next_check = Instant::now() + RECHECK;
            if let Some(fd) = file.tend(false) {
                sock = fd.into();
                if let Err(e) = sock.set_read_timeout(Some(RECHECK)) {
                    log::warn!("log relay: read timeout: {e}");
                }
            }
        }
        match sock.recv(&mut buf) {
            // A plugin's ADD record feeds /metrics; a log line (alone or in a record) is logged.
            Ok(n) if super::plugin_metrics::take(&buf[..n]) => {}
            Ok(n) => lines.add(&buf[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::Interrupted | ErrorKind::WouldBlock | ErrorKind::TimedOut
                ) => {}
            Err(e) => {
                log::warn!("log relay stopped: {e}");
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_removed_socket_is_bound_again_and_relays() {
        let dir = crate::fsutil::test_dir("relay-bind");
        let path = dir.join("log.sock");
        let (sock, id) = bind(&path).unwrap();
        assert_eq!(rundir::claimed(&path), Some(id));
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        std::fs::remove_file(&path).unwrap();
        let (again, id2) = bind(&path).unwrap();
        assert_ne!(id, id2);
        drop(sock);
        let c = UnixDatagram::unbound().unwrap();
        c.send_to(b"hello", &path).unwrap();
        let mut b = [0u8; 16];
        assert_eq!(again.recv(&mut b).unwrap(), 5);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
