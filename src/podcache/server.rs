//! The agent's side: the socket server over the shared [`Cache`], one thread multiplexing every connection with poll(2), so no client (silent, slow,
//! sending garbage or never reading its reply) holds up another, `/readyz`, the log relay or the watch.
//!
//! Bounds: at most [`MAX_CONNS`] connections (a new one beyond that closes the oldest); a request of at
//! most [`proto::MAX_REQUEST`] bytes due within [`REQUEST_DEADLINE`] of accept; the reply written within
//! [`WRITE_DEADLINE`]; a pod not seen yet waited for at most [`UNSEEN_WAIT`] (the connection waits in the
//! poll set, no thread per waiting client). Hit replies are shared with the store, never copied per
//! connection, so memory is the store plus about [`proto::MAX_REQUEST`] per connection. Peers other than
//! root (or this process's own user) are refused; the socket is mode 0600.

pub use super::cache::Cache;
use super::proto::{self, Request, WAIT_LINE};
use super::store::Lookup;
use super::{metrics, Answer};
use crate::error::{IoContext, Result};
use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout};
use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a lookup of a pod the cache has not seen (or has seen with another UID) waits for the
/// watch event, while the watch is live. The pod's ADDED event reaches the agent when the pod is bound,
/// about when it reaches the kubelet, so by the time the runtime calls the plugin it is almost always
/// there; this covers the rest (measured: the event lands within a few ms of the API write).
pub const UNSEEN_WAIT: Duration = Duration::from_millis(200);
/// The request line must arrive within this time of accept (the plugin sends it at once).
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(1);
/// A reply must be taken within this time.
pub const WRITE_DEADLINE: Duration = Duration::from_secs(1);
/// Connections open at once; a new one beyond this closes the oldest.
pub const MAX_CONNS: usize = 512;
/// How often the server touches its socket file (its mtime: the plugin's sign that this agent is alive,
/// [`super::client::Bounds`]).
pub const HEARTBEAT: Duration = Duration::from_secs(2);
/// How often the server checks that its socket file is still there (and binds it again if not); the
/// heartbeat goes with it.
const RECHECK: Duration = HEARTBEAT;
/// Connections accepted per turn of the loop: a client connecting in a tight loop cannot keep the server
/// accepting instead of answering the connections it has.
const ACCEPT_BATCH: usize = 32;

/// Binds `path` (mode 0600): bound under a temporary name, restricted, then renamed over `path`, so the
/// socket never exists with a wider mode and a stale socket is replaced in one step.
pub fn bind(path: &Path) -> Result<UnixListener> {
    let tmp = crate::fsutil::temp_path_for(path);
    let _ = std::fs::remove_file(&tmp);
    let l = UnixListener::bind(&tmp).io_context(|| format!("bind {}", tmp.display()))?;
    let id = crate::rundir::identity(&tmp);
    let restrict =
        std::fs::set_permissions(&tmp, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .and_then(|()| std::fs::rename(&tmp, path));
    if let Err(e) = restrict {
        let _ = std::fs::remove_file(&tmp);
        return Err(crate::Error::io(format!("install {}", path.display()), e));
    }
    // Cleanup removes it only while it is still this socket (an older agent's never takes a newer one's).
    if let Some(id) = id {
        crate::rundir::claim_id(path, id);
    }
    l.set_nonblocking(true)
        .io_context(|| format!("non-blocking {}", path.display()))?;
    Ok(l)
}

/// Binds `path` and serves `cache` on it from a background thread. Returns once the socket exists.
pub fn serve(cache: Cache, path: PathBuf) -> Result<()> {
    let listener = bind(&path)?;
    metrics::started();
    std::thread::Builder::new()
        .name("pod-cache".into())
        .spawn(move || run(listener, cache, path))
        .io_context(|| "spawn the pod cache server".into())?;
    Ok(())
}

enum Phase {
    /// Reading the request line.
    Reading,
    /// Waiting for the pod's watch event until then (the `wait` line is queued or sent).
    Waiting(Request, Instant),
    /// The final reply is queued; close once it is written.
    Writing,
}

struct Conn {
    sock: UnixStream,
    accepted: Instant,
    /// Reading: the request deadline; Writing: the write deadline.
    deadline: Instant,
    buf: Vec<u8>,
    out: VecDeque<Arc<[u8]>>,
    /// Bytes of `out[0]` written.
    pos: usize,
    phase: Phase,
}

enum Step {
    Keep,
    Close,
}

impl Conn {
    fn queue(&mut self, line: Arc<[u8]>) {
        self.out.push_back(line);
    }

    /// Queues the final reply for `l` (which is not `Wait`) and counts it.
    fn finish(&mut self, l: Lookup) {
        let (answer, line): (Answer, Arc<[u8]>) = match l {
            Lookup::Hit(line) => (Answer::Hit, line),
            Lookup::Answer(a) => (a, Arc::from(proto::answer_line(a, None))),
            // Not reached: a final lookup never waits.
            Lookup::Wait => (
                Answer::Unknown,
                Arc::from(proto::answer_line(Answer::Unknown, None)),
            ),
        };
        metrics::lookup(answer);
        self.queue(line);
        self.phase = Phase::Writing;
        self.deadline = Instant::now() + WRITE_DEADLINE;
    }

    fn bad_request(&mut self, why: &str) {
        metrics::lookup(Answer::BadRequest);
        self.queue(Arc::from(proto::answer_line(Answer::BadRequest, Some(why))));
        self.phase = Phase::Writing;
        self.deadline = Instant::now() + WRITE_DEADLINE;
    }

    fn on_request(&mut self, line: &[u8], cache: &Cache) {
        match proto::decode_request(line) {
            Err(why) => self.bad_request(&why),
            Ok(req) => match cache.lookup(&req, true) {
                Lookup::Wait => {
                    self.queue(Arc::from(WAIT_LINE));
                    self.phase = Phase::Waiting(req, Instant::now() + UNSEEN_WAIT);
                }
                l => self.finish(l),
            },
        }
    }

    fn on_readable(&mut self, cache: &Cache) -> Step {
        let mut chunk = [0u8; 512];
        loop {
            match self.sock.read(&mut chunk) {
                Ok(0) => {
                    if self.buf.is_empty() {
                        return Step::Close;
                    }
                    self.buf.clear();
                    self.bad_request("request line not ended by a newline");
                    return self.on_writable();
                }
                Ok(n) => {
                    self.buf.extend_from_slice(&chunk[..n]);
                    if let Some(end) = self.buf.iter().position(|b| *b == b'\n') {
                        let line = std::mem::take(&mut self.buf);
                        self.on_request(&line[..end], cache);
                        return self.on_writable();
                    }
                    if self.buf.len() > proto::MAX_REQUEST {
                        self.buf = Vec::new();
                        self.bad_request("request line too long");
                        return self.on_writable();
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Step::Keep,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Step::Close,
            }
        }
    }

    fn on_writable(&mut self) -> Step {
        while let Some(line) = self.out.front() {
            match self.sock.write(&line[self.pos..]) {
                Ok(0) => return Step::Close,
                Ok(n) => {
                    self.pos += n;
                    if self.pos == line.len() {
                        self.out.pop_front();
                        self.pos = 0;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Step::Keep,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Step::Close,
            }
        }
        if matches!(self.phase, Phase::Writing) {
            let _ = self.sock.shutdown(std::net::Shutdown::Write);
            return Step::Close;
        }
        Step::Keep
    }

    /// When the poll loop must look at this connection again without an event.
    fn due(&self) -> Instant {
        match &self.phase {
            Phase::Waiting(_, until) => *until,
            _ => self.deadline,
        }
    }

    fn events(&self) -> PollFlags {
        match self.phase {
            _ if !self.out.is_empty() => PollFlags::POLLOUT,
            Phase::Reading => PollFlags::POLLIN,
            _ => PollFlags::empty(),
        }
    }
}

/// The socket file's identity, to notice it being removed or replaced.
fn identity(path: &Path) -> Option<(u64, u64)> {
    std::fs::symlink_metadata(path)
        .ok()
        .map(|m| (m.dev(), m.ino()))
}

/// Whether a peer may ask: root, or the user this agent runs as.
fn allowed_peer(s: &UnixStream) -> bool {
    use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
    match getsockopt(s, PeerCredentials) {
        Ok(c) => c.uid() == 0 || c.uid() == nix::unistd::geteuid().as_raw(),
        Err(_) => false,
    }
}

/// The socket file this agent bound, watched every [`RECHECK`]: bound again when it has been missing at two
/// checks in a row (someone removed it: a terminating older agent's cleanup, by hand), and left alone when
/// another process bound it (a newer agent). Two checks, because this process's own cleanup removes it just
/// before exiting.
struct SocketFile {
    path: PathBuf,
    ours: Option<(u64, u64)>,
    missing: bool,
    replaced_logged: bool,
}

impl SocketFile {
    fn new(path: PathBuf) -> SocketFile {
        SocketFile {
            ours: identity(&path),
            path,
            missing: false,
            replaced_logged: false,
        }
    }

    /// Sets the file's times to now: this agent's server thread is alive. Only on the file this agent
    /// bound (another agent's file carries that agent's heartbeat).
    fn heartbeat(&self) {
        use nix::sys::stat::{utimensat, UtimensatFlags};
        use nix::sys::time::TimeSpec;
        let now = TimeSpec::UTIME_NOW;
        if let Err(e) = utimensat(
            None,
            &self.path,
            &now,
            &now,
            UtimensatFlags::NoFollowSymlink,
        ) {
            log::debug!("pod cache: heartbeat on {}: {e}", self.path.display());
        }
    }

    /// A new listener when the file had to be bound again.
    fn check(&mut self) -> Option<UnixListener> {
        match identity(&self.path) {
            None if !self.missing => self.missing = true,
            None => match bind(&self.path) {
                Ok(l) => {
                    log::warn!(
                        "pod cache: {} was removed; bound it again",
                        self.path.display()
                    );
                    self.ours = identity(&self.path);
                    self.missing = false;
                    return Some(l);
                }
                Err(e) => log::warn!("pod cache: {e}"),
            },
            Some(id) if Some(id) == self.ours => {
                self.missing = false;
                self.heartbeat();
            }
            Some(_) => {
                self.missing = false;
                if !self.replaced_logged {
                    self.replaced_logged = true;
                    log::warn!(
                        "pod cache: {} now belongs to another process; this agent no longer gets lookups",
                        self.path.display()
                    );
                }
            }
        }
        None
    }
}

fn run(mut listener: UnixListener, cache: Cache, path: PathBuf) {
    let mut file = SocketFile::new(path);
    let mut next_check = Instant::now() + RECHECK;
    let mut conns: Vec<Conn> = Vec::new();
    loop {
        let now = Instant::now();
        if now >= next_check {
            next_check = now + RECHECK;
            if let Some(l) = file.check() {
                listener = l;
            }
        }
        // Lookups whose wait is over get their final answer; connections past their deadline go.
        conns.retain_mut(|c| match &c.phase {
            Phase::Waiting(req, until) if *until <= now => {
                let l = cache.lookup(req, false);
                c.finish(l);
                true
            }
            Phase::Waiting(..) => true,
            _ => c.deadline > now,
        });
        let wait = conns
            .iter()
            .map(|c| c.due())
            .chain([next_check])
            .min()
            .map(|d| d.saturating_duration_since(now) + Duration::from_millis(1))
            .map(|d| PollTimeout::try_from(d).unwrap_or(PollTimeout::MAX))
            .unwrap_or(PollTimeout::NONE);
        let ready: Vec<PollFlags> = {
            let mut fds = Vec::with_capacity(conns.len() + 2);
            fds.push(PollFd::new(listener.as_fd(), PollFlags::POLLIN));
            fds.push(PollFd::new(cache.wake_fd(), PollFlags::POLLIN));
            for c in &conns {
                fds.push(PollFd::new(c.sock.as_fd(), c.events()));
            }
            match nix::poll::poll(&mut fds, wait) {
                Ok(_) => {}
                Err(Errno::EINTR) => continue,
                Err(e) => {
                    log::warn!("pod cache: poll: {e}");
                    std::thread::sleep(Duration::from_millis(50));
                    continue;
                }
            }
            fds.iter()
                .map(|f| f.revents().unwrap_or(PollFlags::empty()))
                .collect()
        };
        let woken = !ready[1].is_empty();
        if woken {
            cache.drain_wake();
        }
        let mut i = conns.len();
        while i > 0 {
            i -= 1;
            let r = ready[i + 2];
            let c = &mut conns[i];
            if woken {
                if let Phase::Waiting(req, _) = &c.phase {
                    match cache.lookup(req, true) {
                        Lookup::Wait => {}
                        l => c.finish(l),
                    }
                }
            }
            // Nothing happened to it, and no answer was queued just now.
            if r.is_empty() && (!woken || c.out.is_empty()) {
                continue;
            }
            let reading = matches!(c.phase, Phase::Reading);
            let step = if r.intersects(PollFlags::POLLERR | PollFlags::POLLNVAL) {
                Step::Close
            } else if reading && r.intersects(PollFlags::POLLIN | PollFlags::POLLHUP) {
                c.on_readable(&cache)
            } else if r.contains(PollFlags::POLLHUP) && c.out.is_empty() {
                // A waiting client that went away.
                Step::Close
            } else {
                c.on_writable()
            };
            if matches!(step, Step::Close) {
                conns.swap_remove(i);
            }
        }
        if !ready[0].is_empty() {
            accept_all(&listener, &mut conns);
        }
    }
}

fn accept_all(listener: &UnixListener, conns: &mut Vec<Conn>) {
    for _ in 0..ACCEPT_BATCH {
        match listener.accept() {
            Ok((sock, _)) => {
                if sock.set_nonblocking(true).is_err() || !allowed_peer(&sock) {
                    continue;
                }
                if conns.len() >= MAX_CONNS {
                    // The oldest has had the most time; a plugin asks and reads within milliseconds.
                    if let Some(oldest) = (0..conns.len()).min_by_key(|&i| conns[i].accepted) {
                        conns.swap_remove(oldest);
                    }
                }
                let now = Instant::now();
                conns.push(Conn {
                    sock,
                    accepted: now,
                    deadline: now + REQUEST_DEADLINE,
                    buf: Vec::new(),
                    out: VecDeque::new(),
                    pos: 0,
                    phase: Phase::Reading,
                });
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                // EMFILE and friends: back off briefly instead of spinning on a listener that stays
                // readable.
                log::warn!("pod cache: accept: {e}");
                std::thread::sleep(Duration::from_millis(50));
                return;
            }
        }
    }
}

#[cfg(test)]
#[path = "server_tests.rs"]
mod tests;
