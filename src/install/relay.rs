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
//! The socket file is watched every [`RECHECK`], as the pod cache's is: bound again when it has been
//! missing at two checks in a row (someone removed it: an older agent's cleanup, by hand), left alone when
//! another live process bound it (a newer agent), and bound again when nobody listens on it any more (that
//! agent is gone: SIGKILLed, crashed, or stopped leaving its files for the next one).

use crate::error::{IoContext, Result};
use crate::rundir::{self, FileId};
use std::io::ErrorKind;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Largest datagram we read; longer ones are truncated by the kernel.
pub const MAX_LINE: usize = 64 * 1024;
/// How often the relay checks that its socket file is still there.
pub const RECHECK: Duration = Duration::from_secs(2);
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
    let watched = path.clone();
    let backlog = Arc::new(Backlog::default());
    let out = backlog.clone();
    let spawn = |name: &str, f: Box<dyn FnOnce() + Send>| {
        std::thread::Builder::new()
            .name(name.into())
            .spawn(f)
            .io_context(|| format!("spawn the {name} thread"))
    };
    spawn("log-relay-out", Box::new(move || out.log()))?;
    spawn(
        "log-relay",
        Box::new(move || relay(sock, SocketFile::new(watched, id), &backlog)),
    )?;
    Ok(path)
}

/// Binds `path`: under a temporary name, restricted to 0600 (any local plugin process may send; the
/// socket lives in a root-only dir), then renamed over `path`, so it never exists with a wider mode and
/// a stale socket is replaced in one step. The socket is claimed as this process's ([`rundir::claim_id`]).
pub fn bind(path: &Path) -> Result<(UnixDatagram, FileId)> {
    let tmp = crate::fsutil::temp_path_for(path);
    let _ = std::fs::remove_file(&tmp);
    let sock = UnixDatagram::bind(&tmp).io_context(|| format!("bind {}", tmp.display()))?;
    let placed =
        std::fs::set_permissions(&tmp, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .and_then(|()| {
                rundir::identity(&tmp).ok_or_else(|| std::io::Error::from(ErrorKind::NotFound))
            })
            .and_then(|id| std::fs::rename(&tmp, path).map(|()| id));
    let id = match placed {
        Ok(id) => id,
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            return Err(crate::Error::io(format!("install {}", path.display()), e));
        }
    };
    rundir::claim_id(path, id);
    // recv wakes up at least this often, so the file is checked on a quiet node too.
    sock.set_read_timeout(Some(RECHECK))
        .io_context(|| format!("read timeout on {}", path.display()))?;
    Ok((sock, id))
}

/// What a look at the socket file asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Look {
    /// Nothing to do.
    Keep,
    /// Missing at two checks in a row: bind it again.
    Bind,
    /// Another process bound it (logged once).
    Replaced,
}

/// The socket file this relay bound. Two checks before binding again, because this process's own cleanup
/// removes it just before exiting.
struct SocketFile {
    path: PathBuf,
    ours: FileId,
    missing: bool,
    replaced: bool,
}

impl SocketFile {
    fn new(path: PathBuf, ours: FileId) -> SocketFile {
        SocketFile {
            path,
            ours,
            missing: false,
            replaced: false,
        }
    }

    /// Pure: what to do, given what is at the path now and (asked only for another's) whether a process
    /// listens on it.
    fn look(&mut self, now: Option<FileId>, listened: impl FnOnce() -> bool) -> Look {
        match now {
            None if !self.missing => {
                self.missing = true;
                Look::Keep
            }
            None => Look::Bind,
            Some(id) => {
                self.missing = false;
                if id != self.ours && !listened() {
                    return Look::Bind;
                }
                if id != self.ours && !self.replaced {
                    self.replaced = true;
                    return Look::Replaced;
                }
                Look::Keep
            }
        }
    }
}

fn relay(mut sock: UnixDatagram, mut file: SocketFile, lines: &Backlog) {
    let mut buf = vec![0u8; MAX_LINE];
    let mut next_check = Instant::now() + RECHECK;
    loop {
        if Instant::now() >= next_check {
            next_check = Instant::now() + RECHECK;
            let path = file.path.clone();
            // Only a refused connection says nobody listens (not, say, running out of descriptors).
            let listened = move || {
                UnixDatagram::unbound()
                    .and_then(|s| s.connect(&path))
                    .map_or_else(|e| e.kind() != ErrorKind::ConnectionRefused, |()| true)
            };
            let now = rundir::identity(&file.path);
            match file.look(now, listened) {
                Look::Keep => {}
                Look::Replaced => log::warn!(
                    "log relay: {} now belongs to another process; plugin logs go there",
                    file.path.display()
                ),
                Look::Bind => match bind(&file.path) {
                    Ok((s, id)) => {
                        let why = match now {
                            None => "was removed",
                            Some(_) => "was left by an agent that is gone",
                        };
                        log::warn!("log relay: {} {why}; bound it again", file.path.display());
                        sock = s;
                        file = SocketFile::new(file.path, id);
                    }
                    Err(e) => log::warn!("log relay: {e}"),
                },
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
    fn bound_again_after_two_looks_at_a_missing_file_and_over_another_only_when_nobody_listens() {
        let ours = (1, 10);
        let asked = || -> bool { panic!("our own socket: nobody to ask") };
        let mut f = SocketFile::new(PathBuf::from("/run/x/log.sock"), ours);
        assert_eq!(f.look(Some(ours), asked), Look::Keep);
        assert_eq!(
            f.look(None, asked),
            Look::Keep,
            "our own cleanup, about to exit"
        );
        assert_eq!(
            f.look(Some(ours), asked),
            Look::Keep,
            "back: the count starts over"
        );
        assert_eq!(f.look(None, asked), Look::Keep);
        assert_eq!(f.look(None, asked), Look::Bind);
        let mut f = SocketFile::new(PathBuf::from("/run/x/log.sock"), ours);
        assert_eq!(f.look(Some((1, 11)), || true), Look::Replaced);
        assert_eq!(f.look(Some((1, 11)), || true), Look::Keep, "said once");
        // That agent is gone (its file is left, nobody listens): bound again.
        assert_eq!(f.look(Some((1, 11)), || false), Look::Bind);
    }

    #[test]
    fn a_removed_socket_is_bound_again_and_relays() {
        let dir = std::env::temp_dir().join(format!("relay-bind-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
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
