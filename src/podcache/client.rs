//! The plugin's side: one lookup over the agent's socket, bounded at every step. An absent or dead
//! agent costs ADD one failed `connect` (a missing socket file, or one nobody listens on: microseconds);
//! a connected agent gets [`Bounds::of`] its socket file's heartbeat: a long, still bounded wait when the
//! agent showed a sign of life within [`HEARTBEAT_FRESH`] (a loaded node delays its answer, it does not
//! lose it), a short one otherwise (a stopped or hung agent is told apart fast). Never blocks: the socket
//! is non-blocking and every read waits in poll(2) with what is left of its bound. A hit is checked to be
//! the pod asked for ([`is_the_pod_asked_for`]) before it is used.

use super::proto::{self, Reply, Request};
use super::server::{HEARTBEAT, UNSEEN_WAIT};
use super::Miss;
use crate::json::Object;
use crate::kube::PodView;
use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout};
use nix::sys::socket::{self, AddressFamily, SockFlag, SockType, UnixAddr};
use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

/// An agent whose socket file was touched this recently is alive: its server thread touches the file
/// every [`HEARTBEAT`] (2 s) and answers in tens of microseconds when it gets the CPU. 2.5 heartbeats: a
/// heartbeat or two late on a loaded node still counts.
pub const HEARTBEAT_FRESH: Duration = Duration::from_millis(HEARTBEAT.as_millis() as u64 * 5 / 2);
/// The first reply line (the answer, or `wait`) from an alive agent: on a 2-vCPU node at load 20 and
/// more, with a storm of plugins and builds competing for the CPU, the agent's thread waits its turn
/// for 100–250 ms (BENCHMARKS.md, pod cache under load); this is several times that, and still far
/// below what a pod start costs.
pub const FIRST_REPLY: Duration = Duration::from_millis(1000);
/// The first reply from an agent with no recent sign of life (a stopped or hung process keeps its
/// socket's backlog accepting): a live one answers well within it on an idle node.
pub const FIRST_REPLY_UNPROVEN: Duration = Duration::from_millis(50);

/// How long a lookup waits for the agent's lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// For the first line (the answer, or `wait`).
    pub first: Duration,
    /// For the answer after `wait`: the agent answers when the pod's event arrives, or at [`UNSEEN_WAIT`].
    pub last: Duration,
}

impl Bounds {
    /// The bounds for an agent whose socket file was last modified at `heartbeat`, at `now`: long when
    /// that is within [`HEARTBEAT_FRESH`] (and not more than a second ahead: a clock stepped back makes
    /// no stale file fresh), short otherwise.
    pub fn of(heartbeat: Option<SystemTime>, now: SystemTime) -> Bounds {
        let alive = heartbeat.is_some_and(|t| match now.duration_since(t) {
            Ok(age) => age <= HEARTBEAT_FRESH,
            Err(ahead) => ahead.duration() <= Duration::from_secs(1),
        });
        let first = if alive {
            FIRST_REPLY
        } else {
            FIRST_REPLY_UNPROVEN
        };
        Bounds {
            first,
            last: UNSEEN_WAIT + first.max(Duration::from_millis(100)),
        }
    }
}

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
    // Whoever serves the socket decides pods: only root (the agent) or the user we run as. A socket made
    // by anyone else (a run dir others could write) is not asked; the pod comes from the API server.
    use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
    match getsockopt(&fd, PeerCredentials) {
        Ok(c) if crate::fsutil::root_or_us(c.uid()) => {}
        Ok(c) => {
            log::warn!(
                "pod cache: {} is served by uid {}, neither root nor us; reading the pod from the API server",
                path.display(),
                c.uid()
            );
            return Err(Miss::SocketError);
        }
        Err(_) => return Err(Miss::SocketError),
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
            // Read before looking at the clock: a reply that arrived while this process waited for the
            // CPU past its deadline is still taken.
            let mut chunk = [0u8; 16 * 1024];
            match self.sock.read(&mut chunk) {
                Ok(0) => return Err(Miss::BadReply),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Err(Miss::Timeout);
                    }
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

/// Whether `pod` is the pod `req` asked for: its namespace, name and UID (a static pod's mirror: the
/// kubelet's UID, [`crate::kube::pod::kubelet_uid`]). A request without a UID names no particular pod:
/// no hit is it.
pub fn is_the_pod_asked_for(pod: &Object, req: &Request) -> bool {
    let v = PodView::of(pod);
    let uid_matches = || v.uid == req.uid || crate::kube::pod::kubelet_uid(pod) == req.uid;
    v.namespace == req.namespace && v.name == req.name && !req.uid.is_empty() && uid_matches()
}

/// Asks the agent listening on `socket` for the pod; the reduced pod object, or why not.
pub fn lookup(socket: &Path, req: &Request) -> Result<Object, Miss> {
    let heartbeat = std::fs::symlink_metadata(socket)
        .and_then(|m| m.modified())
        .ok();
    let mut sock = connect(socket)?;
    let bounds = Bounds::of(heartbeat, SystemTime::now());
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
    let mut reply = decode(lines.next(Instant::now() + bounds.first)?)?;
    if matches!(reply, Reply::Wait) {
        reply = decode(lines.next(Instant::now() + bounds.last)?)?;
    }
    match reply {
        Reply::Hit(pod) if is_the_pod_asked_for(&pod, req) => Ok(pod),
        Reply::Hit(pod) => {
            let v = PodView::of(&pod);
            log::warn!(
                "pod cache: asked for {}/{} (uid {:?}), the agent answered {} (uid {:?}); reading the pod from the API server",
                req.namespace,
                req.name,
                req.uid,
                v.key(),
                v.uid
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
    use crate::podcache::proto::tests::req;
    use std::os::unix::net::UnixListener;

    fn pod(ns: &str, name: &str, uid: &str) -> String {
        format!(r#"{{"metadata":{{"namespace":"{ns}","name":"{name}","uid":"{uid}"}}}}"#)
    }

    /// A fake agent on a fresh socket that answers the next request with `line`.
    fn forging(line: Vec<u8>) -> (std::path::PathBuf, std::thread::JoinHandle<()>) {
        let dir = crate::fsutil::test_dir("podcache-client");
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
            ("by name", pod("shop", "web-0", "u-old"), &by_name, false),
            ("by name, no UID", pod("shop", "web-0", ""), &by_name, false),
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

    /// The agent reduces the pod ([`crate::redirect::reduce`]), the plugin decides it: both must keep the
    /// same keys, or a key the plugin reads and the agent's build dropped (a rolling update: a new plugin
    /// binary and the old agent still serving the socket) reads as absent, and absent is "no sidecar" or
    /// the default capture. A hit that does not name this build's reduction is a miss.
    #[test]
    fn a_hit_reduced_by_another_build_is_a_miss() {
        let asked = req("shop", "web-0", "u-1");
        let body = pod("shop", "web-0", "u-1");
        for line in [
            format!(r#"{{"v":1,"result":"hit","pod":{body}}}"#),
            format!(r#"{{"v":1,"result":"hit","reduced":"another","pod":{body}}}"#),
            format!(r#"{{"v":1,"result":"hit","reduced":7,"pod":{body}}}"#),
        ] {
            let (path, h) = forging(format!("{line}\n").into_bytes());
            let got = lookup(&path, &asked);
            h.join().unwrap();
            assert_eq!(got.err(), Some(Miss::BadReply), "{line}");
        }
        let (path, h) = forging(proto::hit_line(&body));
        let got = lookup(&path, &asked);
        h.join().unwrap();
        assert!(got.is_ok(), "{got:?}");
    }

    /// An agent that hangs mid-reply (part of a line then nothing; a line dribbled a byte at a time;
    /// `wait` then nothing) is a timeout: each line has one deadline however its bytes come, and no
    /// partial reply is ever read as a pod. The lookup runs on a thread of its own, so a client that
    /// never gave up would fail the test rather than hang it.
    #[test]
    fn an_agent_hanging_mid_reply_is_a_timeout() {
        let line = proto::hit_line(&pod("shop", "web-0", "u-1"));
        for (what, first, dribble) in [
            ("half a hit line", line[..line.len() / 2].to_vec(), false),
            ("a hit line dribbled", line[..line.len() / 2].to_vec(), true),
            ("wait, then nothing", proto::WAIT_LINE.to_vec(), false),
        ] {
            let dir = crate::fsutil::test_dir("podcache-client-hang");
            let path = dir.join("pod-cache.sock");
            let l = UnixListener::bind(&path).unwrap();
            let (gave_up, stop) = std::sync::mpsc::channel::<()>();
            let agent = std::thread::spawn(move || {
                let (mut s, _) = l.accept().unwrap();
                let mut b = [0u8; 1024];
                let _ = s.read(&mut b);
                s.write_all(&first).unwrap();
                while stop.recv_timeout(Duration::from_millis(10)).is_err() {
                    if dribble && s.write_all(b" ").is_err() {
                        break;
                    }
                }
            });
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || tx.send(lookup(&path, &req("shop", "web-0", "u-1"))));
            let got = rx
                .recv_timeout(Duration::from_secs(60))
                .unwrap_or_else(|_| panic!("{what}: the lookup never gave up"));
            // The dribbling agent may already have ended (its write failed once the lookup closed).
            let _ = gave_up.send(());
            agent.join().unwrap();
            assert_eq!(got.err(), Some(Miss::Timeout), "{what}");
        }
    }

    #[test]
    fn an_alive_agent_gets_the_long_bound_and_a_silent_one_the_short() {
        let now = SystemTime::now();
        let at = |secs: i64| {
            if secs >= 0 {
                now - Duration::from_secs(secs as u64)
            } else {
                now + Duration::from_secs((-secs) as u64)
            }
        };
        let long = Bounds {
            first: FIRST_REPLY,
            last: UNSEEN_WAIT + FIRST_REPLY,
        };
        let short = Bounds {
            first: FIRST_REPLY_UNPROVEN,
            last: UNSEEN_WAIT + Duration::from_millis(100),
        };
        assert_eq!(Bounds::of(Some(at(0)), now), long);
        assert_eq!(Bounds::of(Some(now - HEARTBEAT_FRESH), now), long);
        // A heartbeat or two missed: alive still; longer: stopped or hung.
        assert_eq!(Bounds::of(Some(at(4)), now), long);
        assert_eq!(Bounds::of(Some(at(6)), now), short);
        assert_eq!(Bounds::of(Some(at(3600)), now), short);
        assert_eq!(Bounds::of(None, now), short);
        // A file from the future (the clock stepped back): only a second's slack.
        assert_eq!(
            Bounds::of(Some(now + Duration::from_millis(500)), now),
            long
        );
        assert_eq!(Bounds::of(Some(at(-60)), now), short);
        assert!(long.first > short.first && long.last > short.last);
    }
}
