//! The check itself (upstream `validation/validator.go`): listen on the capture ports on loopback, dial
//! 127.0.0.6 (or ::6) at the probe port once a second from loopback, and pass once a connection arrives
//! whose `SO_ORIGINAL_DST` port is the probe port, i.e. the kernel redirected it.

use super::options::Options;
use crate::error::{Error, Result};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::socket::{
    bind, connect, getsockopt, listen, setsockopt, socket, sockopt, AddressFamily, Backlog,
    SockFlag, SockType, SockaddrIn, SockaddrIn6,
};
use nix::sys::time::TimeVal;
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener};
use std::os::fd::{AsFd, OwnedFd};
use std::time::{Duration, Instant};

/// The outcome of a check that ran.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    Passed,
    /// Nothing redirected within the timeout; says what was tried.
    Timeout(String),
}

/// (listen address, probe destination) for the pod's family.
pub fn loopbacks(ipv6: bool) -> (IpAddr, IpAddr) {
    if ipv6 {
        (
            Ipv6Addr::LOCALHOST.into(),
            "::6".parse().unwrap_or(Ipv6Addr::LOCALHOST).into(),
        )
    } else {
        (
            Ipv4Addr::LOCALHOST.into(),
            Ipv4Addr::new(127, 0, 0, 6).into(),
        )
    }
}

/// Whether the pod's first usable address (not loopback, not link-local) is IPv6, as upstream's
/// `getLocalIP`. No such address: IPv4.
pub fn pod_is_ipv6() -> bool {
    let Ok(addrs) = nix::ifaddrs::getifaddrs() else {
        return false;
    };
    first_usable_is_ipv6(addrs.filter_map(|a| {
        let sa = a.address?;
        if let Some(v4) = sa.as_sockaddr_in() {
            return Some(IpAddr::from(v4.ip()));
        }
        sa.as_sockaddr_in6().map(|v6| IpAddr::from(v6.ip()))
    }))
}

/// The family decision over the addresses in the kernel's order. Upstream's check listens and dials in
/// the family of the first usable address, with or without `--dual-stack`: its `getLocalIP(dualStack)`
/// returns that first address either way (dual stack only changes the IPv6 flag used to shape rules),
/// and the validator looks at the address alone. So a dual-stack pod (IPv4 listed first) is checked
/// over IPv4, as upstream checks it.
pub fn first_usable_is_ipv6(addrs: impl IntoIterator<Item = IpAddr>) -> bool {
    // The plugin's own rule (upstream's one `getLocalIP`), without dual-stack; no usable address: IPv4.
    let addrs: Vec<IpAddr> = addrs.into_iter().collect();
    crate::redirect::capture::enable_ipv6(&addrs, false).unwrap_or(false)
}

fn family(ip: IpAddr) -> AddressFamily {
    if ip.is_ipv6() {
        AddressFamily::Inet6
    } else {
        AddressFamily::Inet
    }
}

fn tcp_socket(ip: IpAddr) -> nix::Result<OwnedFd> {
    socket(family(ip), SockType::Stream, SockFlag::SOCK_CLOEXEC, None)
}

fn bind_to(fd: &OwnedFd, sa: SocketAddr) -> nix::Result<()> {
    use std::os::fd::AsRawFd;
    match sa {
        SocketAddr::V4(a) => bind(fd.as_raw_fd(), &SockaddrIn::from(a)),
        SocketAddr::V6(a) => bind(fd.as_raw_fd(), &SockaddrIn6::from(a)),
    }
}

/// A listener with SO_REUSEADDR and SO_REUSEPORT, as upstream.
fn listen_on(sa: SocketAddr) -> nix::Result<TcpListener> {
    let fd = tcp_socket(sa.ip())?;
    setsockopt(&fd, sockopt::ReuseAddr, &true)?;
    setsockopt(&fd, sockopt::ReusePort, &true)?;
    bind_to(&fd, sa)?;
    listen(&fd, Backlog::new(16).unwrap_or(Backlog::MAXCONN))?;
    let l = TcpListener::from(fd);
    l.set_nonblocking(true)
        .map_err(|e| nix::errno::Errno::from_raw(e.raw_os_error().unwrap_or(0)))?;
    Ok(l)
}

/// One dial from `from:0` to `to`, bounded by `limit`. The socket is returned so the connection stays
/// open while the server side looks at it.
fn dial(from: IpAddr, to: SocketAddr, limit: Duration) -> nix::Result<OwnedFd> {
    use std::os::fd::AsRawFd;
    let fd = tcp_socket(to.ip())?;
    bind_to(&fd, SocketAddr::new(from, 0))?;
    let tv = TimeVal::new(
        limit.as_secs().min(i64::MAX as u64) as _,
        limit.subsec_micros() as _,
    );
    setsockopt(&fd, sockopt::SendTimeout, &tv)?;
    match to {
        SocketAddr::V4(a) => connect(fd.as_raw_fd(), &SockaddrIn::from(a))?,
        SocketAddr::V6(a) => connect(fd.as_raw_fd(), &SockaddrIn6::from(a))?,
    }
    Ok(fd)
}

/// The original destination port of a redirected connection, if any.
fn original_port(s: &std::net::TcpStream, ipv6: bool) -> Option<u16> {
    if ipv6 {
        getsockopt(s, sockopt::Ip6tOriginalDst)
            .ok()
            .map(|a| u16::from_be(a.sin6_port))
    } else {
        getsockopt(s, sockopt::OriginalDst)
            .ok()
            .map(|a| u16::from_be(a.sin_port))
    }
}

/// Listeners on both capture ports of `lo` (a port already taken is skipped with a warning), and the
/// addresses tried; an error when neither could be bound.
fn capture_listeners(lo: IpAddr, o: &Options) -> Result<(Vec<TcpListener>, Vec<String>)> {
    let mut listeners = Vec::new();
    let mut tried = Vec::new();
    for p in [o.envoy_port, o.inbound_capture_port] {
        let sa = SocketAddr::new(lo, p);
        tried.push(sa.to_string());
        match listen_on(sa) {
            Ok(l) => listeners.push(l),
            Err(e) => log::warn!("validation: cannot listen on {sa}: {e}; skipping it"),
        }
    }
    if listeners.is_empty() {
        return Err(Error::other(format!(
            "no listener available: {}",
            tried.join(", ")
        )));
    }
    Ok((listeners, tried))
}

/// Accepts what waits on the listeners, answering each with its original port: whether one came for
/// `probe_port` (redirected), else what the last one was, in `last_err`.
fn accepted_probe(
    listeners: &[TcpListener],
    ipv6: bool,
    probe_port: u16,
    last_err: &mut String,
) -> bool {
    for l in listeners {
        while let Ok((mut s, peer)) = l.accept() {
            let port = original_port(&s, ipv6);
            if let Some(p) = port {
                let _ = s.write_all(p.to_string().as_bytes());
            }
            log::debug!(
                "validation: accepted {peer} on {:?}, original port {port:?}",
                l.local_addr().ok()
            );
            if port == Some(probe_port) {
                return true;
            }
            *last_err = format!("connection from {peer} had original port {port:?}");
        }
    }
    false
}

/// Runs the check. Errors are setup failures (no listener could be bound, poll failed).
pub fn check(o: &Options, ipv6: bool) -> Result<Verdict> {
    let (lo, dst) = loopbacks(ipv6);
    let target = SocketAddr::new(dst, o.probe_port);
    let (listeners, tried) = capture_listeners(lo, o)?;
    let deadline = Instant::now() + o.probe_timeout;
    let mut last_err = String::from("no attempt");
    loop {
        let now = Instant::now();
        if now >= deadline {
            break;
        }
        let slot = (deadline - now).min(Duration::from_secs(1));
        let client = match dial(lo, target, slot) {
            Ok(fd) => {
                // Said unless a connection reaches a listener below: then the dial went elsewhere.
                last_err = format!(
                    "dial {target} connected, but not to this check's listeners: something else \
                     accepted it (a listener on that port, so not redirected, or one on a capture port \
                     this check could not bind)"
                );
                Some(fd)
            }
            Err(e) => {
                last_err = format!("dial {target}: {e}");
                log::debug!("validation: {last_err}");
                None
            }
        };
        let wait = deadline
            .saturating_duration_since(Instant::now())
            .min(Duration::from_secs(1));
        let mut fds: Vec<PollFd> = listeners
            .iter()
            .map(|l| PollFd::new(l.as_fd(), PollFlags::POLLIN))
            .collect();
        let ms = u16::try_from(wait.as_millis()).unwrap_or(u16::MAX);
        match poll(&mut fds, PollTimeout::from(ms)) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(Error::io("validation: poll the listeners", e.into())),
        }
        if accepted_probe(&listeners, ipv6, o.probe_port, &mut last_err) {
            return Ok(Verdict::Passed);
        }
        // Kept open until the server side has looked at it; a refused dial left the poll above to
        // pace the loop at about one attempt per second, like upstream.
        drop(client);
    }
    Ok(Verdict::Timeout(format!(
        "validation timeout: no connection to {target} was redirected to {} within {:?} (last: {last_err})",
        tried.join(" or "),
        o.probe_timeout
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ips(a: &[&str]) -> Vec<IpAddr> {
        a.iter().map(|s| s.parse().unwrap()).collect()
    }

    /// The family is the first usable address's: loopback and link-local skipped, a dual-stack pod
    /// (the kernel lists IPv4 first) checked over IPv4, as upstream with or without `--dual-stack`.
    #[test]
    fn the_first_usable_address_picks_the_family() {
        for (addrs, v6) in [
            (
                &["127.0.0.1", "::1", "fe80::1", "10.0.0.5", "fd00::5"][..],
                false,
            ),
            (&["127.0.0.1", "::1", "fe80::1", "fd00::5"], true),
            (&["::ffff:10.0.0.5", "fd00::5"], false),
            (&["::ffff:127.0.0.1", "169.254.1.1", "2001:db8::5"], true),
            (&["127.0.0.1", "::1"], false),
            (&[], false),
        ] {
            assert_eq!(first_usable_is_ipv6(ips(addrs)), v6, "{addrs:?}");
        }
    }
}
