//! The agent's side: the lookup protocol over the shared [`Cache`], served on [`crate::serve`]'s poll
//! loop (one thread for every connection, so no client, silent, slow, sending garbage or never reading
//! its reply, holds up another, `/readyz`, the log relay or the watch), with [`LIMITS`].
//!
//! A request of at most [`proto::MAX_REQUEST`] bytes; a pod not seen yet waited for at most
//! [`UNSEEN_WAIT`] (the connection waits in the poll set, no thread per waiting client). Hit replies are
//! shared with the store, never copied per connection, so memory is the store plus about
//! [`proto::MAX_REQUEST`] per connection. Peers other than root (or this process's own user) are refused;
//! the socket is mode 0600, its file kept up ([`crate::serve::socket_file`]: bound again when removed or
//! left by a dead agent; its mtime the heartbeat).

pub use super::cache::Cache;
use super::proto::{self, Request, WAIT_LINE};
use super::store::Lookup;
use super::{metrics, Answer};
use crate::error::{IoContext, Result};
use crate::serve::socket_file::{self, SocketFile};
use crate::serve::{Limits, Protocol, Server, Step};
use nix::sys::socket::SockType;
use std::os::fd::BorrowedFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// How long a lookup of a pod the cache has not seen (or has seen with another UID) waits for the
/// watch event, while the watch is live. The pod's ADDED event reaches the agent when the pod is bound,
/// about when it reaches the kubelet, so by the time the runtime calls the plugin it is almost always
/// there; this covers the rest (measured: the event lands within a few ms of the API write).
pub const UNSEEN_WAIT: Duration = Duration::from_millis(200);
/// How often the server touches its socket file (its mtime: the plugin's sign that this agent is alive,
/// [`super::client::Bounds`]), when it looks that the file is still its own.
pub const HEARTBEAT: Duration = socket_file::RECHECK;
/// The request line within 1 s of accept (the plugin sends it at once), the reply taken within 1 s; 512
/// connections, 32 accepted per turn of the loop (a client connecting in a tight loop cannot keep the
/// server accepting instead of answering).
pub const LIMITS: Limits = Limits {
    name: "pod cache",
    max_conns: 512,
    accept_batch: 32,
    read: Duration::from_secs(1),
    write: Duration::from_secs(1),
};

/// Binds `path` (mode 0600, [`socket_file::bind`]) and serves `cache` on it from a background thread.
/// Returns once the socket exists.
pub fn serve(cache: Cache, path: PathBuf) -> Result<()> {
    let (listener, id) = socket_file::bind(&path, SockType::Stream)?;
    metrics::started();
    let file = SocketFile::new(path, LIMITS.name, SockType::Stream, id);
    let lookups = Box::new(Lookups(cache));
    Server::new(listener, Some(file), LIMITS, lookups)
        .spawn("pod-cache".into())
        .io_context(|| "spawn the pod cache server".into())
}

/// The lookup protocol ([`proto`]): one request line, one reply line, or `wait` and the reply once the
/// pod's event arrives or [`UNSEEN_WAIT`] is over.
struct Lookups(Cache);

/// The final reply for `l` (`Wait` only when the wait is over: `unknown`), counted.
fn finish(l: Lookup) -> Arc<[u8]> {
    let (answer, line): (Answer, Arc<[u8]>) = match l {
        Lookup::Hit(line) => (Answer::Hit, line),
        Lookup::Answer(a) => (a, Arc::from(proto::answer_line(a, None))),
        Lookup::Wait => (
            Answer::Unknown,
            Arc::from(proto::answer_line(Answer::Unknown, None)),
        ),
    };
    metrics::lookup(answer);
    line
}

fn bad_request(why: &str) -> Step {
    metrics::lookup(Answer::BadRequest);
    Step::Reply(Arc::from(proto::answer_line(Answer::BadRequest, Some(why))))
}

/// The request in the bytes read so far: its line (up to the newline), decoded.
fn request_of(bytes: &[u8]) -> Option<std::result::Result<Request, String>> {
    let end = bytes.iter().position(|b| *b == b'\n')?;
    Some(proto::decode_request(&bytes[..end]))
}

impl Protocol for Lookups {
    fn request(&self, bytes: &[u8], eof: bool) -> Step {
        match request_of(bytes) {
            Some(Err(why)) => bad_request(&why),
            Some(Ok(req)) => match self.0.lookup(&req, true) {
                Lookup::Wait => Step::Defer(Arc::from(WAIT_LINE), UNSEEN_WAIT),
                l => Step::Reply(finish(l)),
            },
            None if eof => bad_request("request line not ended by a newline"),
            None if bytes.len() > proto::MAX_REQUEST => bad_request("request line too long"),
            None => Step::More,
        }
    }

    fn resume(&self, bytes: &[u8], last: bool) -> Option<Arc<[u8]>> {
        let req = request_of(bytes)?.ok()?;
        match self.0.lookup(&req, !last) {
            Lookup::Wait if !last => None,
            l => Some(finish(l)),
        }
    }

    fn wake(&self) -> Option<BorrowedFd<'_>> {
        Some(self.0.wake_fd())
    }

    /// Whether a peer may ask: root, or the user this agent runs as.
    fn admit(&self, conn: BorrowedFd<'_>) -> bool {
        use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
        match getsockopt(&conn, PeerCredentials) {
            Ok(c) => crate::fsutil::root_or_us(c.uid()),
            Err(_) => false,
        }
    }
}

#[cfg(test)]
#[path = "server_tests.rs"]
mod tests;
