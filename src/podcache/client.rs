//! The plugin's side: one lookup over the agent's socket, bounded at every step so that an absent, dead,
//! busy or hung agent costs ADD at most [`FIRST_REPLY`] (a refused or missing socket: one failed
//! `connect`, microseconds) before the API lookup. Never blocks: the socket is non-blocking and every
//! read waits in poll(2) with what is left of its bound. A hit is checked to be the pod asked for
//! ([`is_the_pod_asked_for`]) before it is used.

use super::proto::{self, Reply, Request};
use super::server::UNSEEN_WAIT;
use super::Miss;
use crate::json::{self, Object};
use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout};
use nix::sys::socket::{self, AddressFamily, SockFlag, SockType, UnixAddr};
use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

/// The agent's first line (the answer, or `wait`) must come within this time of the request. The agent
/// answers in tens of microseconds; the bound only tells a live agent from a stopped or hung one, and
/// is wide enough for an agent thread that the scheduler let wait behind a burst of pod starts.
pub const FIRST_REPLY: Duration = Duration::from_millis(50);
/// After `wait`: the agent answers when the pod's event arrives, or at [`UNSEEN_WAIT`].
pub const FINAL_REPLY: Duration = Duration::from_millis(UNSEEN_WAIT.as_millis() as u64 + 100);

fn connect(path: &Path) -> Result<UnixStream, Miss> {
    let fd = socket::socket(
        AddressFamily::Unix,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
        None,
    )
    .map_err(|_| Miss::SocketError)?;
    let addr = UnixAddr::new(path).map_err(|_| Miss::SocketError)?;
    {
        use std::os::fd::AsRawFd;
        match socket::connect(fd.as_raw_fd(), &addr) {
            Ok(()) => {}
            Err(Errno::ENOENT) => return Err(Miss::NoSocket),
            Err(Errno::ECONNREFUSED) => return Err(Miss::Refused),
            Err(Errno::EAGAIN) => return Err(Miss::Busy),
            Err(_) => return Err(Miss::SocketError),
        }
    }
    Ok(UnixStream::from(fd))
}

/// Reads `\n`-ended lines from a non-blocking stream, each within a deadline.
struct Lines {
    sock: UnixStream,
    buf: Vec<u8>,
}

impl Lines {
    fn next(&mut self, deadline: Instant) -> Result<Vec<u8>, Miss> {
        loop {
            if let Some(end) = self.buf.iter().position(|b| *b == b'\n') {
                let rest = self.buf.split_off(end + 1);
                let mut line = std::mem::replace(&mut self.buf, rest);
                line.truncate(end);
                return Ok(line);
            }
            if self.buf.len() > proto::MAX_REPLY {
                return Err(Miss::BadReply);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Miss::Timeout);
            }
            let mut chunk = [0u8; 16 * 1024];
            match self.sock.read(&mut chunk) {
                Ok(0) => return Err(Miss::BadReply),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    // Rounded up, so the wake-up is at or after the deadline.
                    let wait = PollTimeout::try_from(left + Duration::from_millis(1))
                        .unwrap_or(PollTimeout::MAX);
                    let mut fds = [PollFd::new(self.sock.as_fd(), PollFlags::POLLIN)];
                    match nix::poll::poll(&mut fds, wait) {
                        Ok(_) | Err(Errno::EINTR) => {}
                        Err(_) => return Err(Miss::SocketError),
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return Err(Miss::BadReply),
            }
        }
    }
}

/// Whether `pod` is the pod `req` asked for: its namespace and name, and its UID when the request has one.
pub fn is_the_pod_asked_for(pod: &Object, req: &Request) -> bool {
    let meta = json::obj_of(pod, "metadata");
    let field = |k: &str| meta.and_then(|m| json::str_of(m, k)).unwrap_or("");
    field("namespace") == req.namespace
        && field("name") == req.name
        && (req.uid.is_empty() || field("uid") == req.uid)
}

/// Asks the agent listening on `socket` for the pod; the reduced pod object, or why not.
pub fn lookup(socket: &Path, req: &Request) -> Result<Object, Miss> {
    let mut sock = connect(socket)?;
    // A fresh socket's buffer takes the small request at once.
    match sock.write(proto::encode_request(req).as_bytes()) {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Err(Miss::Busy),
        Err(e) if e.raw_os_error() == Some(Errno::EPIPE as i32) => return Err(Miss::Refused),
        Err(_) => return Err(Miss::SocketError),
    }
    let mut lines = Lines {
        sock,
        buf: Vec::new(),
    };
    let decode = |l: Vec<u8>| proto::decode_reply(&l).map_err(|_| Miss::BadReply);
    let mut reply = decode(lines.next(Instant::now() + FIRST_REPLY)?)?;
    if matches!(reply, Reply::Wait) {
        reply = decode(lines.next(Instant::now() + FINAL_REPLY)?)?;
    }
    match reply {
        Reply::Hit(pod) if is_the_pod_asked_for(&pod, req) => Ok(pod),
        Reply::Hit(pod) => {
            let meta = json::obj_of(&pod, "metadata");
            let field = |k: &str| meta.and_then(|m| json::str_of(m, k)).unwrap_or("");
            log::warn!(
                "pod cache: asked for {}/{} (uid {:?}), the agent answered {}/{} (uid {:?}); reading the pod from the API server",
                req.namespace,
                req.name,
                req.uid,
                field("namespace"),
                field("name"),
                field("uid")
            );
            Err(Miss::BadReply)
        }
        Reply::Miss(a) => Err(Miss::Agent(a)),
        Reply::Wait => Err(Miss::BadReply),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;

    fn req(ns: &str, name: &str, uid: &str) -> Request {
        Request {
            namespace: ns.into(),
            name: name.into(),
            uid: uid.into(),
        }
    }

    fn pod(ns: &str, name: &str, uid: &str) -> String {
        format!(r#"{{"metadata":{{"namespace":"{ns}","name":"{name}","uid":"{uid}"}}}}"#)
    }

    /// A fake agent on a fresh socket that answers the next request with `line`.
    fn forging(line: Vec<u8>) -> (std::path::PathBuf, std::thread::JoinHandle<()>) {
        static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "podcache-client-{}-{}",
            std::process::id(),
            N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("pod-cache.sock");
        let l = UnixListener::bind(&path).unwrap();
        let h = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut b = [0u8; 1024];
            let _ = s.read(&mut b);
            s.write_all(&line).unwrap();
        });
        (path, h)
    }

    #[test]
    fn a_hit_for_another_pod_than_the_one_asked_for_is_a_miss() {
        let asked = req("shop", "web-0", "u-new");
        let by_name = req("shop", "web-0", "");
        for (what, answered, r, ok) in [
            ("the pod", pod("shop", "web-0", "u-new"), &asked, true),
            ("by name", pod("shop", "web-0", "u-old"), &by_name, true),
            ("another UID", pod("shop", "web-0", "u-old"), &asked, false),
            ("another name", pod("shop", "web-1", "u-new"), &asked, false),
            (
                "another namespace",
                pod("bank", "web-0", "u-new"),
                &asked,
                false,
            ),
            (
                "another name, by name",
                pod("shop", "web-1", "u-1"),
                &by_name,
                false,
            ),
            ("no metadata", "{}".to_string(), &by_name, false),
        ] {
            let (path, h) = forging(proto::hit_line(&answered));
            let got = lookup(&path, r);
            h.join().unwrap();
            match got {
                Ok(p) => assert!(ok, "{what}: used {p:?}"),
                Err(m) => assert!(!ok && m == Miss::BadReply, "{what}: {m:?}"),
            }
        }
    }
}
