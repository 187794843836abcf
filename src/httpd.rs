//! The health and metrics servers' HTTP (the request head, routing, the answer) and their TCP listener:
//! dual-stack (`[::]`, `IPV6_V6ONLY` off), `0.0.0.0` where the node has no IPv6. The connections are
//! [`crate::serve`]'s, with [`LIMITS`]; under a connection flood a kubelet probe (one connect, `GET
//! /readyz`) is still answered: the backlog is the kernel's maximum, a request that came with its
//! connection is answered at once, a batch at most is accepted per wake-up, an idle or dribbling
//! connection goes first beyond the limit, a new one is never refused. Shared by the installer's servers
//! and the standalone repair agent's metrics, so it sits below both roles.
use crate::error::{IoContext, Result};
use crate::serve::{self, Limits, Protocol, Step};
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener};
use std::time::Duration;

use nix::errno::Errno;

/// Largest request head; more gets 431.
pub const MAX_HEAD: usize = 8 * 1024;
/// The whole head within 2 s of accept, the answer written within 2 s; 256 connections per listener, half
/// of them accepted per wake-up.
pub const LIMITS: Limits = Limits {
    name: "HTTP server",
    max_conns: 256,
    accept_batch: 128,
    read: Duration::from_secs(2),
    write: Duration::from_secs(2),
};

/// Is this failure "the node has no IPv6" (so IPv4 alone is right), rather than a real problem?
pub fn ipv6_unavailable(e: Errno) -> bool {
    matches!(
        e,
        Errno::EAFNOSUPPORT | Errno::EPROTONOSUPPORT | Errno::EADDRNOTAVAIL | Errno::ENOPROTOOPT
    )
}

/// `[::]:port` accepting IPv4 too (IPv4-mapped), whatever `net.ipv6.bindv6only` says.
pub fn bind_dual_stack(port: u16) -> nix::Result<TcpListener> {
    bind_any(port, true)
}

/// `[::]:port` (`v6`) or `0.0.0.0:port` (a node without IPv6), with the kernel's largest backlog
/// ([`serve::listen`], not musl's `SOMAXCONN` of 128, which a connection flood fills in milliseconds).
fn bind_any(port: u16, v6: bool) -> nix::Result<TcpListener> {
    use nix::sys::socket::{self as s, sockopt, AddressFamily as F, SockFlag, SockType};
    let (family, ip) = match v6 {
        true => (F::Inet6, IpAddr::from(Ipv6Addr::UNSPECIFIED)),
        false => (F::Inet, IpAddr::from(Ipv4Addr::UNSPECIFIED)),
    };
    let fd = s::socket(family, SockType::Stream, SockFlag::SOCK_CLOEXEC, None)?;
    s::setsockopt(&fd, sockopt::ReuseAddr, &true)?;
    if v6 {
        s::setsockopt(&fd, sockopt::Ipv6V6Only, &false)?;
    }
    let addr = s::SockaddrStorage::from(SocketAddr::new(ip, port));
    s::bind(std::os::fd::AsRawFd::as_raw_fd(&fd), &addr)?;
    serve::listen(&fd)?;
    Ok(TcpListener::from(fd))
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
            bind_any(port, false).map_err(io::Error::from)
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
pub fn answer(buf: &[u8], eof: bool, route: &dyn Fn(&str) -> Reply) -> Vec<u8> {
    let complete = head_complete(buf) || (eof && buf.contains(&b'\n'));
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
    let http = Box::new(Http(Box::new(route)));
    listener
        .set_nonblocking(true)
        .and_then(|()| {
            let server = serve::Server::new(listener.into(), None, LIMITS, http);
            server.spawn(format!("http-{what}").to_lowercase())
        })
        .io_context(|| format!("spawn the {what} HTTP server thread"))?;
    Ok(addr)
}

/// HTTP/1.1 with `Connection: close`: one request head, one answer from the route.
struct Http(Box<dyn Fn(&str) -> Reply + Send>);

impl Protocol for Http {
    fn request(&self, head: &[u8], eof: bool) -> Step {
        if head_complete(head) || head.len() >= MAX_HEAD || eof {
            Step::Reply(answer(head, eof, &*self.0).into())
        } else {
            Step::More
        }
    }
}

/// Is the head complete (blank line seen)?
fn head_complete(buf: &[u8]) -> bool {
    buf.windows(4).any(|w| w == b"\r\n\r\n") || buf.windows(2).any(|w| w == b"\n\n")
}

#[cfg(test)]
#[path = "httpd_tests.rs"]
mod tests;
