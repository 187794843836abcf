//! One bounded connection server: the poll(2) loop under the health/metrics listener ([`crate::httpd`],
//! TCP) and the pod-cache socket ([`crate::podcache::server`], unix stream). One thread per listener
//! multiplexes every connection, so no client (idle, sending its request a byte at a time, never reading
//! its answer) can hold up another. A [`Protocol`] says only what the bytes mean; the rest is here, with
//! the numbers as [`Limits`] per protocol:
//!
//! - the listen backlog is the kernel's maximum ([`listen`]: `net.core.somaxconn`, 4096 by default, not
//!   musl's `SOMAXCONN` of 128), so a burst does not drop a probe's SYN or a plugin's connect;
//! - a new connection is read at once, and a request that came with it (a kubelet probe's, a plugin's) is
//!   answered and closed right there, before anything could push it out;
//! - at most [`Limits::accept_batch`] connections are taken per wake-up, so those accepted in the previous
//!   round are read before newer ones can push them out;
//! - a request must be complete within [`Limits::read`] of accept, an answer written within
//!   [`Limits::write`] of being ready; a deferred answer ([`Step::Defer`]) is due at its own time;
//! - accept failing for another reason than "none left" (EMFILE and friends) backs off 50 ms instead of
//!   spinning on a listener that stays readable;
//! - a unix socket's file is kept up ([`socket_file`]): bound again when it is gone or left by a dead
//!   process, its mtime touched every [`socket_file::RECHECK`] (the pod cache's heartbeat).
//!
//! **Eviction.** A new connection is never refused: beyond [`Limits::max_conns`], the one closed is the
//! connection accepted longest ago among those still reading their request; only when every one is being
//! answered (a reply queued or an answer deferred), the one accepted longest ago of those. Why this rule:
//! a real client (the kubelet, the plugin, Prometheus) sends its request with its connect, so its
//! connection is either answered at accept and never enters the table, or is the newest one reading;
//! the oldest reader is the client that had the most time and still has not asked (idle or dribbling), so
//! a flood of those only ever pushes out its own. Connections being answered asked properly: they go only
//! when nothing else can, and then the oldest, which had the longest to take its answer. The table, and
//! so descriptors and memory, stays bounded; an answer being written is never dropped while an idle
//! connection could go instead.

pub mod limits;
pub mod socket_file;
pub use limits::raise_open_files_limit;

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout};
use nix::sys::socket::{self as s, MsgFlags, SockFlag};
use socket_file::SocketFile;
use std::collections::VecDeque;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What a protocol makes of a connection's request so far.
pub enum Step {
    /// Not complete: read on.
    More,
    /// The answer: written, then the connection is closed.
    Reply(Arc<[u8]>),
    /// Not answerable yet: the first bytes (may be empty) are written now and the connection waits, at
    /// most this long, for [`Protocol::resume`] to give the answer.
    Defer(Arc<[u8]>, Duration),
}

/// A request/answer protocol over a byte stream: everything but the connection handling.
pub trait Protocol: Send {
    /// The request read so far (every byte since accept; `eof`: the peer sends no more). A complete one
    /// is answered, a bad one too (the answer says why); `More` at `eof` closes the connection.
    fn request(&self, bytes: &[u8], eof: bool) -> Step;
    /// A deferred request asked again (the same bytes): at each wake-up of [`Protocol::wake`], where
    /// `None` waits on, and at its time (`last`), where `None` closes the connection.
    fn resume(&self, _bytes: &[u8], _last: bool) -> Option<Arc<[u8]>> {
        None
    }
    /// A non-blocking socket, readable when deferred answers may be ready; the server reads it empty.
    fn wake(&self) -> Option<BorrowedFd<'_>> {
        None
    }
    /// Whether a newly accepted connection is served at all (its peer's credentials, say).
    fn admit(&self, _conn: BorrowedFd<'_>) -> bool {
        true
    }
}

/// A server's numbers (see the module docs).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// For the log: `HTTP server`, `pod cache`.
    pub name: &'static str,
    /// Connections open at once.
    pub max_conns: usize,
    /// Connections accepted per wake-up.
    pub accept_batch: usize,
    /// A request must be complete within this time of accept.
    pub read: Duration,
    /// An answer must be written within this time of being ready.
    pub write: Duration,
}

/// listen(2) with the largest backlog the kernel allows (-1: `net.core.somaxconn`).
pub fn listen(fd: &OwnedFd) -> nix::Result<()> {
    s::listen(fd, s::Backlog::MAXALLOWABLE)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Reading,
    Deferred,
    Writing,
}

struct Conn {
    fd: OwnedFd,
    /// When it was accepted (eviction order).
    since: Instant,
    /// Reading: the request's deadline; deferred: the time of its answer; writing: the write deadline.
    due: Instant,
    /// The request (kept while deferred, for [`Protocol::resume`]).
    buf: Vec<u8>,
    out: VecDeque<Arc<[u8]>>,
    /// Bytes of `out[0]` written.
    pos: usize,
    state: State,
}

impl Conn {
    fn reply(&mut self, out: Arc<[u8]>, write: Duration) {
        self.queue(out);
        self.buf = Vec::new();
        self.state = State::Writing;
        self.due = Instant::now() + write;
    }

    fn queue(&mut self, out: Arc<[u8]>) {
        if !out.is_empty() {
            self.out.push_back(out);
        }
    }

    /// Asks a deferred request again; whether it got its answer.
    fn resume(&mut self, proto: &dyn Protocol, last: bool, write: Duration) -> bool {
        let answer = proto.resume(&self.buf, last);
        answer.map(|out| self.reply(out, write)).is_some()
    }

    /// Reads what is there; a complete request's answer is queued and written. False: close it.
    fn on_readable(&mut self, proto: &dyn Protocol, limits: &Limits) -> bool {
        let mut chunk = [0u8; 1024];
        let step = loop {
            let eof = match s::recv(self.fd.as_raw_fd(), &mut chunk, MsgFlags::empty()) {
                Ok(0) if self.buf.is_empty() => return false,
                Ok(n) => {
                    self.buf.extend_from_slice(&chunk[..n]);
                    n == 0
                }
                Err(Errno::EAGAIN) => return true,
                Err(Errno::EINTR) => continue,
                Err(_) => return false,
            };
            match proto.request(&self.buf, eof) {
                Step::More if eof => return false,
                Step::More => {}
                step => break step,
            }
        };
        match step {
            Step::Reply(out) => self.reply(out, limits.write),
            Step::Defer(first, wait) => {
                self.queue(first);
                self.state = State::Deferred;
                self.due = Instant::now() + wait;
            }
            Step::More => {}
        }
        self.on_writable()
    }

    /// Writes what is queued; an answer written in full closes the connection. False: close it.
    fn on_writable(&mut self) -> bool {
        while let Some(out) = self.out.front() {
            match s::send(
                self.fd.as_raw_fd(),
                &out[self.pos..],
                MsgFlags::MSG_NOSIGNAL,
            ) {
                Ok(0) => return false,
                Ok(n) => {
                    self.pos += n;
                    if self.pos == out.len() {
                        self.out.pop_front();
                        self.pos = 0;
                    }
                }
                Err(Errno::EAGAIN) => return true,
                Err(Errno::EINTR) => {}
                Err(_) => return false,
            }
        }
        if self.state == State::Writing {
            let _ = s::shutdown(self.fd.as_raw_fd(), s::Shutdown::Write);
            return false;
        }
        true
    }

    fn events(&self) -> PollFlags {
        match self.state {
            _ if !self.out.is_empty() => PollFlags::POLLOUT,
            State::Reading => PollFlags::POLLIN,
            _ => PollFlags::empty(),
        }
    }
}

/// One listener's server: its connections and their rules.
pub struct Server {
    listener: OwnedFd,
    file: Option<SocketFile>,
    limits: Limits,
    proto: Box<dyn Protocol>,
    conns: Vec<Conn>,
    next_check: Instant,
}

impl Server {
    /// A server for `listener` (listening, non-blocking); `file`: its unix socket file, kept up.
    pub fn new(
        listener: OwnedFd,
        file: Option<SocketFile>,
        limits: Limits,
        proto: Box<dyn Protocol>,
    ) -> Server {
        Server {
            listener,
            file,
            limits,
            proto,
            conns: Vec::new(),
            next_check: Instant::now() + socket_file::RECHECK,
        }
    }

    /// Serves from a thread named `thread`, forever (the process's open files limit raised first,
    /// [`raise_open_files_limit`]).
    pub fn spawn(mut self, thread: String) -> std::io::Result<()> {
        raise_open_files_limit();
        let run = move || loop {
            self.turn();
        };
        std::thread::Builder::new()
            .name(thread)
            .spawn(run)
            .map(drop)
    }

    /// One turn: deadlines, then one poll(2), then the connections it found ready, then new ones.
    pub fn turn(&mut self) {
        let now = Instant::now();
        if let Some(file) = self.file.as_mut().filter(|_| now >= self.next_check) {
            self.next_check = now + socket_file::RECHECK;
            if let Some(l) = file.tend(true) {
                self.listener = l;
            }
        }
        let (proto, write) = (&*self.proto, self.limits.write);
        // Deferred answers whose time has come are given; connections past their deadline go.
        self.conns.retain_mut(|c| {
            c.due > now || (c.state == State::Deferred && c.resume(proto, true, write))
        });
        let wait = (self.conns.iter().map(|c| c.due))
            .chain(self.file.as_ref().map(|_| self.next_check))
            .min()
            // Round up, so the wake-up is at or after the deadline.
            .map(|d| d.saturating_duration_since(now) + Duration::from_millis(1))
            .map_or(PollTimeout::NONE, |d| {
                PollTimeout::try_from(d).unwrap_or(PollTimeout::MAX)
            });
        let wake = self.proto.wake();
        let first = 1 + usize::from(wake.is_some());
        let ready: Vec<PollFlags> = {
            let mut fds = Vec::with_capacity(self.conns.len() + first);
            fds.push(PollFd::new(self.listener.as_fd(), PollFlags::POLLIN));
            fds.extend(wake.map(|w| PollFd::new(w, PollFlags::POLLIN)));
            for c in &self.conns {
                fds.push(PollFd::new(c.fd.as_fd(), c.events()));
            }
            match nix::poll::poll(&mut fds, wait) {
                Ok(_) => {}
                Err(Errno::EINTR) => return,
                Err(e) => {
                    log::warn!("{}: poll: {e}", self.limits.name);
                    std::thread::sleep(Duration::from_millis(50));
                    return;
                }
            }
            fds.iter()
                .map(|f| f.revents().unwrap_or(PollFlags::empty()))
                .collect()
        };
        let woken = first > 1 && !ready[1].is_empty();
        if let Some(w) = wake.filter(|_| woken) {
            let (fd, mut sink) = (w.as_raw_fd(), [0u8; 256]);
            while s::recv(fd, &mut sink, MsgFlags::MSG_DONTWAIT).is_ok_and(|n| n > 0) {}
        }
        // Connections first (their indices match `ready`), then new ones.
        for i in (0..self.conns.len()).rev() {
            let (r, c) = (ready[i + first], &mut self.conns[i]);
            let answered = woken && c.state == State::Deferred && c.resume(proto, false, write);
            if r.is_empty() && !answered {
                continue;
            }
            let keep = if r.intersects(PollFlags::POLLERR | PollFlags::POLLNVAL) {
                false
            } else if c.state == State::Reading
                && r.intersects(PollFlags::POLLIN | PollFlags::POLLHUP)
            {
                c.on_readable(proto, &self.limits)
            } else if r.contains(PollFlags::POLLHUP) && c.out.is_empty() {
                // A deferred client that went away.
                false
            } else {
                c.on_writable()
            };
            if !keep {
                self.conns.swap_remove(i);
            }
        }
        if !ready[0].is_empty() {
            self.accept_batch();
        }
    }

    /// Accepts up to [`Limits::accept_batch`] connections, answering at once those whose request is
    /// already there.
    fn accept_batch(&mut self) {
        let flags = SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC;
        for _ in 0..self.limits.accept_batch {
            match s::accept4(self.listener.as_raw_fd(), flags) {
                Ok(fd) => {
                    // SAFETY: accept4 just returned this descriptor: open, and owned by nothing else.
                    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
                    if !self.proto.admit(fd.as_fd()) {
                        continue;
                    }
                    let now = Instant::now();
                    let mut c = Conn {
                        fd,
                        since: now,
                        due: now + self.limits.read,
                        buf: Vec::new(),
                        out: VecDeque::new(),
                        pos: 0,
                        state: State::Reading,
                    };
                    if !c.on_readable(&*self.proto, &self.limits) {
                        continue;
                    }
                    if self.conns.len() >= self.limits.max_conns {
                        self.evict();
                    }
                    self.conns.push(c);
                }
                Err(Errno::EAGAIN) => return,
                Err(Errno::EINTR) => {}
                Err(e) => {
                    log::warn!("{}: accept: {e}", self.limits.name);
                    std::thread::sleep(Duration::from_millis(50));
                    return;
                }
            }
        }
    }

    /// Closes one connection for a new one (the rule is in the module docs).
    fn evict(&mut self) {
        let conns = &self.conns;
        let oldest = |reading: bool| {
            (0..conns.len())
                .filter(|&i| (conns[i].state == State::Reading) == reading)
                .min_by_key(|&i| conns[i].since)
        };
        if let Some(i) = oldest(true).or_else(|| oldest(false)) {
            self.conns.swap_remove(i);
        }
    }
}
