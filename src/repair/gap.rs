//! Which of a repaired pod's connections were opened while its rules were missing and bypass the proxy
//! (pure): its conntrack entries ([`crate::nftables::conntrack`]) matched with its TCP sockets
//! (`/proc/net/tcp{,6}` read inside its namespace, [`sockets`]), each judged by [`fate`] against the pod's
//! redirect configuration. Conntrack alone cannot tell the proxy's own connections (uid 1337, never
//! redirected) from an application's: the socket's owner can. What cannot be judged exactly is
//! [`Fate::Unsure`], left open and counted, never ended.

use crate::nftables::conntrack::{Entry, IPPROTO_TCP};
use crate::redirect::annotations::InterceptionMode;
use crate::redirect::capture::{INBOUND_CAPTURE_PORT, INBOUND_TUNNEL_PORT, PROXY_PORT};
use crate::redirect::values::{unmap, IpRanges, Ports};
use crate::redirect::Redirect;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// The proxy's DNS port, where captured DNS goes (`ISTIO_OUTPUT_DNS`, [`crate::redirect::rules`]).
const PROXY_DNS_PORT: u16 = 15053;

/// A TCP socket of the namespace with a peer: its addresses and its owner's uid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sock {
    pub local: SocketAddr,
    pub remote: SocketAddr,
    pub uid: u32,
}

/// What to do with a connection after the pod's rules are back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// Through the proxy, the proxy's own, inside the pod, not captured by the rules, or not TCP.
    Keep,
    /// An application's connection the rules now redirect, opened while they were missing: it bypasses
    /// the proxy for as long as it lives.
    End,
    /// An application's connection whose capture cannot be judged from what is known here (the pod has
    /// excluded interfaces, or TPROXY inbound): left open, counted.
    Unsure,
}

fn hex_v4(s: &str) -> Option<IpAddr> {
    let v = u32::from_str_radix(s, 16).ok()?;
    Some(IpAddr::V4(Ipv4Addr::from(v.to_ne_bytes())))
}

fn hex_v6(s: &str) -> Option<IpAddr> {
    let mut b = [0u8; 16];
    for (i, chunk) in b.chunks_mut(4).enumerate() {
        let w = u32::from_str_radix(s.get(i * 8..i * 8 + 8)?, 16).ok()?;
        chunk.copy_from_slice(&w.to_ne_bytes());
    }
    Some(IpAddr::V6(Ipv6Addr::from(b)))
}

fn endpoint(s: &str) -> Option<SocketAddr> {
    let (a, p) = s.split_once(':')?;
    let ip = match a.len() {
        8 => hex_v4(a)?,
        32 => hex_v6(a)?,
        _ => return None,
    };
    Some(SocketAddr::new(ip, u16::from_str_radix(p, 16).ok()?))
}

/// The connected sockets of a `/proc/net/tcp` or `tcp6` text (listening ones and lines that do not parse
/// left out: the kernel's layout is `sl local rem st tx:rx tr:when retrnsmt uid ...`).
pub fn sockets(text: &str) -> Vec<Sock> {
    text.lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let (local, remote) = (endpoint(f.get(1)?)?, endpoint(f.get(2)?)?);
            // 0A: LISTEN.
            if *f.get(3)? == "0A" || remote.port() == 0 {
                return None;
            }
            Some(Sock {
                local: SocketAddr::new(unmap(local.ip()), local.port()),
                remote: SocketAddr::new(unmap(remote.ip()), remote.port()),
                uid: f.get(7)?.parse().ok()?,
            })
        })
        .collect()
}

fn in_ports(p: &Ports, port: u16) -> bool {
    match p {
        Ports::All => true,
        Ports::List(l) => l.contains(&port),
    }
}

/// Whether the rules as they are now send an application's outbound connection to `dst` to the proxy.
fn outbound_captured(r: &Redirect, dst: SocketAddr) -> bool {
    let ip = unmap(dst.ip());
    if r.exclude_outbound_ports.contains(&dst.port()) {
        return false;
    }
    if r.include_outbound_ports.contains(&dst.port()) {
        return true;
    }
    if r.exclude_ip_ranges.iter().any(|c| c.net().contains(&ip)) {
        return false;
    }
    match &r.include_ip_ranges {
        IpRanges::All => true,
        IpRanges::List(l) => l.iter().any(|c| c.net().contains(&ip)),
    }
}

/// Whether the rules as they are now send an inbound connection to local port `port` to the proxy
/// (`None`: cannot tell).
fn inbound_captured(r: &Redirect, port: u16) -> Option<bool> {
    if r.mode == InterceptionMode::Tproxy {
        return None;
    }
    Some(!r.exclude_inbound_ports.contains(&port) && in_ports(&r.include_inbound_ports, port))
}

/// The fate of one conntrack entry of the pod's namespace, with the namespace's sockets `socks`, its own
/// addresses `local` and the pod's redirect configuration `r` (its proxy's uid).
pub fn fate(e: &Entry, socks: &[Sock], local: &[IpAddr], r: &Redirect) -> Fate {
    let proxy = [
        PROXY_PORT,
        INBOUND_CAPTURE_PORT,
        INBOUND_TUNNEL_PORT,
        PROXY_DNS_PORT,
    ];
    let (src, dst) = (e.orig.src, e.orig.dst);
    let norm = |a: SocketAddr| SocketAddr::new(unmap(a.ip()), a.port());
    let (src, dst) = (norm(src), norm(dst));
    // Not TCP (not captured, but for DNS whose next datagram is captured anyway); NATed to the proxy
    // (the reply comes from its port) or made to it: through the proxy.
    if e.orig.proto != IPPROTO_TCP
        || proxy.contains(&e.reply.src.port())
        || proxy.contains(&dst.port())
        || src.ip().is_loopback()
        || dst.ip().is_loopback()
    {
        return Fate::Keep;
    }
    // Inside the pod (to one of its own addresses, over lo): never redirected for an application.
    if local.contains(&src.ip()) && local.contains(&dst.ip()) {
        return Fate::Keep;
    }
    let out = socks.iter().find(|s| s.local == src && s.remote == dst);
    let inb = socks.iter().find(|s| s.local == dst && s.remote == src);
    let sock = match (out, inb) {
        // Both ends in the pod: as above. Neither: nothing of the pod's to end.
        (Some(_), Some(_)) | (None, None) => return Fate::Keep,
        (Some(s), None) | (None, Some(s)) => s,
    };
    if sock.uid == r.uid {
        return Fate::Keep;
    }
    if !r.exclude_interfaces.is_empty() {
        return Fate::Unsure;
    }
    let captured = match out {
        Some(_) => Some(outbound_captured(r, dst)),
        None => inbound_captured(r, dst.port()),
    };
    match captured {
        Some(true) => Fate::End,
        Some(false) => Fate::Keep,
        None => Fate::Unsure,
    }
}

#[cfg(test)]
#[path = "gap_tests.rs"]
mod tests;
