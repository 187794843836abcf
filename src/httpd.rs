//! The listener and connection loop behind the health and metrics servers: one thread per listener
//! multiplexing every connection with poll(2), so no client (idle, or sending its head a byte at a
//! time) can hold up another. Each connection has a deadline counted from accept for its request head
//! ([`HEAD_DEADLINE`]) and one for writing the answer ([`WRITE_DEADLINE`]). Listens dual-stack (`[::]`,
//! `IPV6_V6ONLY` off) and falls back to `0.0.0.0` where the node has no IPv6. Shared by the installer's
//! servers and the standalone repair agent's metrics, so it sits below both roles.
//!
//! Under a connection flood a kubelet probe (one connect, `GET /readyz`) must still be answered:
//! - the listen backlog is the kernel's maximum (`net.core.somaxconn`, 4096 by default), not musl's
//!   `SOMAXCONN` of 128, so a burst does not drop the probe's SYN;
//! - a new connection is read at once, and a request that came with it (a probe's does) is answered and
//!   closed right there, before it could be pushed out;
//! - at most [`ACCEPT_BATCH`] connections are taken per wake-up, so those accepted in the previous round
//!   are read before newer ones can push them out;
//! - beyond [`MAX_CONNS`] open connections, the oldest one whose request is still incomplete (idle or
//!   dribbling) is closed; a new connection is never refused, an answer being written never dropped.
use crate::error::{IoContext, Result};
use std::io::{self, Read, Write};
use std::net::{Ipv6Addr, SocketAddr, SocketAddrV6, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout};

/// Largest request head; more gets 431.
pub const MAX_HEAD: usize = 8 * 1024;
/// The whole request head must arrive within this time of accept.
pub const HEAD_DEADLINE: Duration = Duration::from_secs(2);
/// The answer must be written within this time of the head completing.
pub const WRITE_DEADLINE: Duration = Duration::from_secs(2);
/// Connections open at once per listener; a new one beyond this closes the oldest incomplete one.
pub const MAX_CONNS: usize = 256;
/// Connections accepted per wake-up of the loop (see the module docs).
pub const ACCEPT_BATCH: usize = MAX_CONNS / 2;

/// Is this failure "the node has no IPv6" (so IPv4 alone is right), rather than a real problem?
pub fn ipv6_unavailable(e: Errno) -> bool {
    matches!(
        e,
        Errno::EAFNOSUPPORT | Errno::EPROTONOSUPPORT | Errno::EADDRNOTAVAIL | Errno::ENOPROTOOPT
    )
}

/// `[::]:port` accepting IPv4 too (IPv4-mapped), whatever `net.ipv6.bindv6only` says.
pub fn bind_dual_stack(port: u16) -> nix::Result<TcpListener> {
    use nix::sys::socket::{self as s, sockopt, AddressFamily, SockFlag, SockType};
    let fd = s::socket(
        AddressFamily::Inet6,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC,
        None,
    )?;
    s::setsockopt(&fd, sockopt::ReuseAddr, &true)?;
    s::setsockopt(&fd, sockopt::Ipv6V6Only, &false)?;
    let addr = s::SockaddrIn6::from(SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, port, 0, 0));
    {
        use std::os::fd::AsRawFd;
        s::bind(fd.as_raw_fd(), &addr)?;
    }
    listen_max(fd)
}

/// listen(2) with the largest backlog the kernel allows (-1: `net.core.somaxconn`), not musl's `SOMAXCONN`
/// (128), which a connection flood fills in milliseconds.
fn listen_max(fd: std::os::fd::OwnedFd) -> nix::Result<TcpListener> {
    nix::sys::socket::listen(&fd, nix::sys::socket::Backlog::MAXALLOWABLE)?;
    Ok(TcpListener::from(fd))
}

/// `0.0.0.0:port`, for a node without IPv6 (with the backlog of [`listen_max`]).
fn bind_ipv4(port: u16) -> nix::Result<TcpListener> {
    use nix::sys::socket::{self as s, sockopt, AddressFamily, SockFlag, SockType};
    let fd = s::socket(
        AddressFamily::Inet,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC,
        None,
    )?;
    s::setsockopt(&fd, sockopt::ReuseAddr, &true)?;
    let addr = s::SockaddrIn::from(std::net::SocketAddrV4::new(
        std::net::Ipv4Addr::UNSPECIFIED,
        port,
    ));
    {
        use std::os::fd::AsRawFd;
        s::bind(fd.as_raw_fd(), &addr)?;
    }
    listen_max(fd)
}

/// Dual-stack via `dual`, or `0.0.0.0:port` when `dual` fails because there is no IPv6. Any other
/// failure (the port is taken, ...) is returned.
pub fn bind_with(
    port: u16,
    dual: impl FnOnce(u16) -> nix::Result<TcpListener>,
) -> io::Result<TcpListener> {
    match dual(port) {
        Ok(l) => Ok(l),
        Err(e) if ipv6_unavailable(e) => {
            log::info!("no IPv6 on this node ({e}); listening on 0.0.0.0:{port} (IPv4 only)");
            bind_ipv4(port).map_err(io::Error::from)
        }
        Err(e) => Err(io::Error::from(e)),
    }
}

/// A route's answer for a request path: status code, content type, body.
pub type Reply = (u16, &'static str, String);

fn reason(code: u16) -> &'static str {
    match code {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        431 => "Request Header Fields Too Large",
        503 => "Service Unavailable",
        _ => "Error",
    }
}

/// The whole response for a request head (`eof`: the client closed its side before the blank line):
/// `route` answers the path (query stripped) of a complete `GET`/`HEAD` head; anything else is 405, 400
/// or 431. `HEAD` gets the head only. `Connection: close`.
pub fn answer(buf: &[u8], eof: bool, route: &impl Fn(&str) -> Reply) -> Vec<u8> {
    let complete = head_complete_or(buf, eof);
    let line = buf.split(|b| *b == b'\n').next().unwrap_or(b"");
    let text = |code: u16| (code, "text/plain", format!("{}\n", reason(code)));
    let ((code, ctype, body), method) = match (complete, request_line(line)) {
        _ if buf.len() >= MAX_HEAD => (text(431), "GET"),
        (true, Some((m @ ("GET" | "HEAD"), p))) => (route(p.split('?').next().unwrap_or(p)), m),
        (true, Some(_)) => (text(405), "GET"),
        _ => (text(400), "GET"),
    };
    let mut resp = format!(
        "HTTP/1.1 {code} {}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        reason(code),
        body.len()
    );
    if method != "HEAD" {
        resp.push_str(&body);
    }
    resp.into_bytes()
}

/// The method and target of a request line `method SP target SP HTTP/d.d` (RFC 9112 §3; a trailing CR is
/// the line's end): exactly one SP between the three parts and no other whitespace (not TAB, VT, FF or
/// NBSP), a token for the method, visible ASCII for the target. `None` for anything else (a 400).
fn request_line(line: &[u8]) -> Option<(&str, &str)> {
    let line = std::str::from_utf8(line.strip_suffix(b"\r").unwrap_or(line)).ok()?;
    let mut parts = line.split(' ');
    let (method, target, version) = (parts.next()?, parts.next()?, parts.next()?);
    let tchar = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
    let version_ok = matches!(
        version.strip_prefix("HTTP/").map(str::as_bytes),
        Some([major, b'.', minor]) if major.is_ascii_digit() && minor.is_ascii_digit()
    );
    let ok = parts.next().is_none()
        && version_ok
        && !method.is_empty()
        && method.bytes().all(tchar)
        && !target.is_empty()
        && target.bytes().all(|b| b.is_ascii_graphic());
    ok.then_some((method, target))
}

/// Binds `[::]:port` dual-stack (or `0.0.0.0:port` where the node has no IPv6; 0 = any free port) and
/// serves `route` ([`answer`]) from a background thread named `what`. Returns the bound address.
pub fn serve(
    port: u16,
    what: &str,
    route: impl Fn(&str) -> Reply + Send + 'static,
) -> Result<SocketAddr> {
    let listener =
        bind_with(port, bind_dual_stack).io_context(|| format!("listen on :{port} for {what}"))?;
    let addr = listener
        .local_addr()
        .io_context(|| format!("local address of :{port}"))?;
    std::thread::Builder::new()
        .name(format!("http-{what}").to_lowercase())
        .spawn(move || run(listener, |head, eof| answer(head, eof, &route)))
        .io_context(|| format!("spawn the {what} HTTP server thread"))?;
    Ok(addr)
}

struct Conn {
    sock: TcpStream,
    /// When it was accepted (the oldest incomplete one goes first when there are too many).
    since: Instant,
    /// Until when it may read (before the head is complete), then until when it may write.
    deadline: Instant,
    head: Vec<u8>,
    /// The answer and how much of it was written; `None` while reading.
    out: Option<(Vec<u8>, usize)>,
}

/// Is the head complete (blank line seen)?
fn head_complete(buf: &[u8]) -> bool {
    buf.windows(4).any(|w| w == b"\r\n\r\n") || buf.windows(2).any(|w| w == b"\n\n")
}

/// Whether a head can be answered: complete, or ended by the client after at least one line.
pub fn head_complete_or(buf: &[u8], eof: bool) -> bool {
    head_complete(buf) || (eof && buf.contains(&b'\n'))
}

enum Step {
    Keep,
    Close,
}

/// Reads what is there; when the head is complete (or too big, or the peer finished sending), the answer
/// from `answer(head, eof)` is queued.
fn on_readable(c: &mut Conn, answer: &impl Fn(&[u8], bool) -> Vec<u8>) -> Step {
    let mut chunk = [0u8; 1024];
    loop {
        match c.sock.read(&mut chunk) {
            Ok(0) => {
                if c.head.is_empty() {
                    return Step::Close;
                }
                c.out = Some((answer(&c.head, true), 0));
                break;
            }
            Ok(n) => {
                c.head.extend_from_slice(&chunk[..n]);
                if head_complete(&c.head) || c.head.len() >= MAX_HEAD {
                    c.out = Some((answer(&c.head, false), 0));
                    break;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Step::Keep,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return Step::Close,
        }
    }
    c.head = Vec::new();
    c.deadline = Instant::now() + WRITE_DEADLINE;
    on_writable(c)
}

fn on_writable(c: &mut Conn) -> Step {
    let Some((buf, done)) = c.out.as_mut() else {
        return Step::Keep;
    };
    while *done < buf.len() {
        match c.sock.write(&buf[*done..]) {
            Ok(0) => return Step::Close,
            Ok(n) => *done += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Step::Keep,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return Step::Close,
        }
    }
    let _ = c.sock.shutdown(std::net::Shutdown::Write);
    Step::Close
}

/// Serves `listener` forever: `answer(head, eof)` gives the full response for a request head (`eof`:
/// the client closed its side before a blank line).
pub fn run(listener: TcpListener, answer: impl Fn(&[u8], bool) -> Vec<u8>) {
    if let Err(e) = listener.set_nonblocking(true) {
        log::error!("HTTP server: cannot make the listener non-blocking: {e}");
        return;
    }
    let mut conns: Vec<Conn> = Vec::new();
    loop {
        let now = Instant::now();
        // Expired connections go first: a head not complete in time, an answer not taken in time.
        conns.retain(|c| c.deadline > now);
        let wait = conns
            .iter()
            .map(|c| c.deadline.saturating_duration_since(now))
            .min()
            // Round up, so the wake-up is at or after the deadline.
            .map(|d| {
                PollTimeout::try_from(d + Duration::from_millis(1)).unwrap_or(PollTimeout::MAX)
            })
            .unwrap_or(PollTimeout::NONE);
        let ready: Vec<PollFlags> = {
            let mut fds = Vec::with_capacity(conns.len() + 1);
            fds.push(PollFd::new(listener.as_fd(), PollFlags::POLLIN));
            for c in &conns {
                let ev = if c.out.is_some() {
                    PollFlags::POLLOUT
                } else {
                    PollFlags::POLLIN
                };
                fds.push(PollFd::new(c.sock.as_fd(), ev));
            }
            match nix::poll::poll(&mut fds, wait) {
                Ok(_) => {}
                Err(Errno::EINTR) => continue,
                Err(e) => {
                    log::warn!("HTTP server: poll: {e}");
                    std::thread::sleep(Duration::from_millis(50));
                    continue;
                }
            }
            fds.iter()
                .map(|f| f.revents().unwrap_or(PollFlags::empty()))
                .collect()
        };
        // Connections first (their indices match `ready`), then new ones.
        let mut i = conns.len();
        while i > 0 {
            i -= 1;
            let r = ready[i + 1];
            if r.is_empty() {
                continue;
            }
            let c = &mut conns[i];
            let step = if c.out.is_some() {
                on_writable(c)
            } else {
                on_readable(c, &answer)
            };
            if matches!(step, Step::Close) {
                conns.swap_remove(i);
            }
        }
        if !ready[0].is_empty() {
            accept_batch(&listener, &mut conns, &answer);
        }
    }
}

/// Accepts up to [`ACCEPT_BATCH`] connections, answering at once those whose request is already there.
fn accept_batch(
    listener: &TcpListener,
    conns: &mut Vec<Conn>,
    answer: &impl Fn(&[u8], bool) -> Vec<u8>,
) {
    for _ in 0..ACCEPT_BATCH {
        match listener.accept() {
            Ok((sock, _)) => {
                if sock.set_nonblocking(true).is_err() {
                    continue;
                }
                let now = Instant::now();
                let mut c = Conn {
                    sock,
                    since: now,
                    deadline: now + HEAD_DEADLINE,
                    head: Vec::new(),
                    out: None,
                };
                if matches!(on_readable(&mut c, answer), Step::Close) {
                    continue;
                }
                if conns.len() >= MAX_CONNS {
                    evict_oldest(conns);
                }
                conns.push(c);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                // EMFILE and friends: back off briefly instead of spinning on a listener that stays
                // readable.
                log::warn!("HTTP server: accept: {e}");
                std::thread::sleep(Duration::from_millis(50));
                return;
            }
        }
    }
}

/// Closes the connection accepted longest ago whose request is incomplete (it had the most time to send
/// it); only when every one is being answered, the oldest of those.
fn evict_oldest(conns: &mut Vec<Conn>) {
    let oldest = |writing: bool| {
        (0..conns.len())
            .filter(|&i| conns[i].out.is_some() == writing)
            .min_by_key(|&i| conns[i].since)
    };
    if let Some(i) = oldest(false).or_else(|| oldest(true)) {
        conns.swap_remove(i);
    }
}

#[cfg(test)]
#[path = "httpd_tests.rs"]
mod tests;
