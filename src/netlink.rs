//! The rtnetlink requests redirection needs, without exec'ing `ip`: list the namespace's addresses (which
//! decide IPv6, as upstream's `getLocalIP`), add an address to `lo` (`::6/128` for inbound passthrough), add
//! the TPROXY policy rule `fwmark 1337 lookup 133`, and add the route `local default dev lo table 133`. Call
//! from a thread inside the pod's namespace ([`crate::netns`]). Every add is idempotent: "already exists"
//! counts as success. [`program_pod_routing`] is the routing step both rule backends run after their rules.

use crate::error::{Error, Result};
use nix::sys::socket::{
    recv, send, socket, AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockProtocol, SockType,
};
use std::net::IpAddr;
use std::os::fd::{AsRawFd, OwnedFd};

/// The message header every netlink family shares (`linux/netlink.h`): flags, control types, nesting.
pub const NLM_F_REQUEST: u16 = 0x1;
pub const NLM_F_MULTI: u16 = 0x2;
pub const NLM_F_ACK: u16 = 0x4;
pub const NLM_F_EXCL: u16 = 0x200;
pub const NLM_F_DUMP: u16 = 0x300;
pub const NLM_F_CREATE: u16 = 0x400;
pub const NLM_F_APPEND: u16 = 0x800;
pub const NLMSG_ERROR: u16 = 2;
pub const NLMSG_DONE: u16 = 3;
pub const NLA_F_NESTED: u16 = 0x8000;
const RTM_GETADDR: u16 = 22;
const RTM_NEWADDR: u16 = 20;
const RTM_NEWROUTE: u16 = 24;
const RTM_NEWRULE: u16 = 32;
const IFA_ADDRESS: u16 = 1;
const IFA_LOCAL: u16 = 2;
const FRA_FWMARK: u16 = 10;
const FRA_TABLE: u16 = 15;
const FRA_PRIORITY: u16 = 6;
/// The preference a fresh namespace gives the first added rule (`ip rule add` without `pref`); set explicitly
/// so a second add is recognised as a duplicate (EEXIST) instead of stacking another rule.
const TPROXY_RULE_PREF: u32 = 32765;
const RTA_OIF: u16 = 4;
const RTA_TABLE: u16 = 15;
const FR_ACT_TO_TBL: u8 = 1;
const RTPROT_BOOT: u8 = 3;
const RT_SCOPE_HOST: u8 = 254;
const RTN_LOCAL: u8 = 2;
const AF_INET: u8 = 2;
const AF_INET6: u8 = 10;

fn family(v6: bool) -> u8 {
    if v6 {
        AF_INET6
    } else {
        AF_INET
    }
}

/// A netlink request: header, fixed body, attributes (pure; unit-tested).
fn message(kind: u16, body: &[u8], attrs: &[(u16, Vec<u8>)]) -> Vec<u8> {
    message_with(
        kind,
        NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL,
        body,
        attrs,
    )
}

fn message_with(kind: u16, flags: u16, body: &[u8], attrs: &[(u16, Vec<u8>)]) -> Vec<u8> {
    let mut m = vec![0u8; 16];
    m.extend_from_slice(body);
    for (t, payload) in attrs {
        let len = 4 + payload.len();
        m.extend_from_slice(&(len as u16).to_ne_bytes());
        m.extend_from_slice(&t.to_ne_bytes());
        m.extend_from_slice(payload);
        while m.len() % 4 != 0 {
            m.push(0);
        }
    }
    let total = m.len() as u32;
    m[0..4].copy_from_slice(&total.to_ne_bytes());
    m[4..6].copy_from_slice(&kind.to_ne_bytes());
    m[6..8].copy_from_slice(&flags.to_ne_bytes());
    m[8..12].copy_from_slice(&1u32.to_ne_bytes()); // seq
    m
}

fn addr_bytes(ip: IpAddr) -> Vec<u8> {
    match ip {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    }
}

fn lo_index() -> Result<u32> {
    nix::net::if_::if_nametoindex("lo")
        .map_err(|e| Error::io("find interface lo", std::io::Error::from(e)))
}

fn open(what: &str) -> Result<OwnedFd> {
    let io = |e: nix::Error| Error::io(format!("netlink: {what}"), std::io::Error::from(e));
    let fd: OwnedFd = socket(
        AddressFamily::Netlink,
        SockType::Raw,
        SockFlag::SOCK_CLOEXEC,
        SockProtocol::NetlinkRoute,
    )
    .map_err(io)?;
    nix::sys::socket::bind(fd.as_raw_fd(), &NetlinkAddr::new(0, 0)).map_err(io)?;
    Ok(fd)
}

/// Sends one request and waits for its acknowledgement; EEXIST is success.
fn request(what: &str, msg: &[u8]) -> Result<()> {
    let io = |e: nix::Error| Error::io(format!("netlink: {what}"), std::io::Error::from(e));
    let fd = open(what)?;
    send(fd.as_raw_fd(), msg, MsgFlags::empty()).map_err(io)?;
    let mut buf = [0u8; 1024];
    let n = recv(fd.as_raw_fd(), &mut buf, MsgFlags::empty()).map_err(io)?;
    match ack_errno(&buf[..n]) {
        Some(0) => Ok(()),
        Some(e) if e == nix::errno::Errno::EEXIST as i32 => Ok(()),
        Some(e) => Err(io(nix::errno::Errno::from_raw(e))),
        None => Err(Error::other(format!(
            "netlink: {what}: no acknowledgement from the kernel"
        ))),
    }
}

/// The errno of the first NLMSG_ERROR in a reply (0 = ack).
fn ack_errno(reply: &[u8]) -> Option<i32> {
    if reply.len() < 20 {
        return None;
    }
    let kind = u16::from_ne_bytes([reply[4], reply[5]]);
    if kind != NLMSG_ERROR {
        return None;
    }
    let code = i32::from_ne_bytes([reply[16], reply[17], reply[18], reply[19]]);
    Some(-code)
}

fn add_address_msg(ip: IpAddr, prefix: u8, ifindex: u32) -> Vec<u8> {
    let mut body = vec![family(ip.is_ipv6()), prefix, 0, 0];
    body.extend_from_slice(&ifindex.to_ne_bytes());
    message(
        RTM_NEWADDR,
        &body,
        &[(IFA_LOCAL, addr_bytes(ip)), (IFA_ADDRESS, addr_bytes(ip))],
    )
}

/// `struct fib_rule_hdr` and `struct rtmsg` share one layout: family, three prefix/tos bytes, table, three
/// bytes that differ (`tail`), 32 bits of flags.
fn route_body(v6: bool, table: u32, tail: [u8; 3]) -> Vec<u8> {
    let mut body = vec![family(v6), 0, 0, 0, table.min(255) as u8];
    body.extend_from_slice(&tail);
    body.extend_from_slice(&[0; 4]);
    body
}

fn rule_msg(v6: bool, mark: u32, table: u32) -> Vec<u8> {
    message(
        RTM_NEWRULE,
        &route_body(v6, table, [0, 0, FR_ACT_TO_TBL]),
        &[
            (FRA_PRIORITY, TPROXY_RULE_PREF.to_ne_bytes().to_vec()),
            (FRA_FWMARK, mark.to_ne_bytes().to_vec()),
            (FRA_TABLE, table.to_ne_bytes().to_vec()),
        ],
    )
}

fn local_route_msg(v6: bool, table: u32, ifindex: u32) -> Vec<u8> {
    message(
        RTM_NEWROUTE,
        &route_body(v6, table, [RTPROT_BOOT, RT_SCOPE_HOST, RTN_LOCAL]),
        &[
            (RTA_TABLE, table.to_ne_bytes().to_vec()),
            (RTA_OIF, ifindex.to_ne_bytes().to_vec()),
        ],
    )
}

/// The addresses of one `RTM_NEWADDR` dump chunk as `(interface index, address)`, in message order (pure).
/// Like Go's `net.InterfaceAddrs`, the address is `IFA_LOCAL` when present (point-to-point), else
/// `IFA_ADDRESS`. Returns whether the dump is complete (`NLMSG_DONE` seen) and the errno of an error reply.
fn parse_addresses(buf: &[u8], out: &mut Vec<(u32, IpAddr)>) -> std::result::Result<bool, i32> {
    let mut off = 0;
    while off + 16 <= buf.len() {
        let len = u32::from_ne_bytes([buf[off], buf[off + 1], buf[off + 2], buf[off + 3]]) as usize;
        let kind = u16::from_ne_bytes([buf[off + 4], buf[off + 5]]);
        if len < 16 || off + len > buf.len() {
            break;
        }
        let msg = &buf[off..off + len];
        match kind {
            NLMSG_DONE => return Ok(true),
            NLMSG_ERROR => match ack_errno(msg) {
                Some(0) | None => {}
                Some(e) => return Err(e),
            },
            RTM_NEWADDR if msg.len() >= 24 => {
                let fam = msg[16];
                let index = u32::from_ne_bytes([msg[20], msg[21], msg[22], msg[23]]);
                let (mut local, mut address) = (None, None);
                let mut a = 24;
                while a + 4 <= msg.len() {
                    let alen = u16::from_ne_bytes([msg[a], msg[a + 1]]) as usize;
                    let atype = u16::from_ne_bytes([msg[a + 2], msg[a + 3]]);
                    if alen < 4 || a + alen > msg.len() {
                        break;
                    }
                    let v = &msg[a + 4..a + alen];
                    let ip = match (fam, v.len()) {
                        (AF_INET, 4) => Some(IpAddr::from([v[0], v[1], v[2], v[3]])),
                        (AF_INET6, 16) => {
                            let mut o = [0u8; 16];
                            o.copy_from_slice(v);
                            Some(IpAddr::from(o))
                        }
                        _ => None,
                    };
                    match atype {
                        IFA_LOCAL => local = local.or(ip),
                        IFA_ADDRESS => address = address.or(ip),
                        _ => {}
                    }
                    a += (alen + 3) & !3;
                }
                if let Some(ip) = local.or(address) {
                    out.push((index, ip));
                }
            }
            _ => {}
        }
        off += (len + 3) & !3;
    }
    Ok(false)
}

/// Every address in this namespace as `(interface index, address)`, in the kernel's dump order (IPv4 before
/// IPv6; `ip addr`). See [`crate::redirect::kernel_address_order`] for the order upstream sees.
pub fn addresses() -> Result<Vec<(u32, IpAddr)>> {
    let what = "list the namespace's addresses";
    let io = |e: nix::Error| Error::io(format!("netlink: {what}"), std::io::Error::from(e));
    let fd = open(what)?;
    // struct ifaddrmsg with family AF_UNSPEC: every family.
    let msg = message_with(RTM_GETADDR, NLM_F_REQUEST | NLM_F_DUMP, &[0u8; 8], &[]);
    send(fd.as_raw_fd(), &msg, MsgFlags::empty()).map_err(io)?;
    let mut out = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = recv(fd.as_raw_fd(), &mut buf, MsgFlags::empty()).map_err(io)?;
        if n == 0 {
            return Err(Error::other(format!(
                "netlink: {what}: the kernel closed the dump early"
            )));
        }
        match parse_addresses(&buf[..n], &mut out) {
            Ok(true) => return Ok(out),
            Ok(false) => {}
            Err(e) => return Err(io(nix::errno::Errno::from_raw(e))),
        }
    }
}

/// `ip addr add <ip>/<prefix> dev lo`.
pub fn add_loopback_address(ip: IpAddr, prefix: u8) -> Result<()> {
    request(
        &format!("add {ip}/{prefix} to lo"),
        &add_address_msg(ip, prefix, lo_index()?),
    )
}

/// `ip rule add fwmark <mark> lookup <table>` and `ip route add local default dev lo table <table>`.
pub fn add_tproxy_routing(v6: bool, mark: u32, table: u32) -> Result<()> {
    let fam = if v6 { "-6" } else { "-4" };
    request(
        &format!("ip {fam} rule add fwmark {mark} lookup {table}"),
        &rule_msg(v6, mark, table),
    )?;
    request(
        &format!("ip {fam} route add local default dev lo table {table}"),
        &local_route_msg(v6, table, lo_index()?),
    )
}

/// The routing a redirected pod needs after its rules, the same for both rule backends: `::6/128` on `lo`
/// when `six` (IPv6 inbound passthrough), then for TPROXY `(mark, table)` the policy rule and local route
/// for IPv4, and for IPv6 too when `tproxy_v6`.
pub fn program_pod_routing(six: bool, tproxy: Option<(u32, u32)>, tproxy_v6: bool) -> Result<()> {
    if six {
        add_loopback_address(
            IpAddr::V6(std::net::Ipv6Addr::new(0, 0, 0, 0, 0, 0, 0, 6)),
            128,
        )?;
    }
    if let Some((mark, table)) = tproxy {
        add_tproxy_routing(false, mark, table)?;
        if tproxy_v6 {
            add_tproxy_routing(true, mark, table)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn address_message_layout() {
        let m = add_address_msg("::6".parse().unwrap(), 128, 1);
        // header 16 + ifaddrmsg 8 + two attrs of 4+16
        assert_eq!(m.len(), 16 + 8 + 20 + 20);
        assert_eq!(
            u32::from_ne_bytes([m[0], m[1], m[2], m[3]]) as usize,
            m.len()
        );
        assert_eq!(m[16], AF_INET6);
        assert_eq!(m[17], 128);
        assert_eq!(
            &m[m.len() - 16..],
            &"::6".parse::<std::net::Ipv6Addr>().unwrap().octets()
        );
    }

    #[test]
    fn rule_and_route_messages() {
        let r = rule_msg(false, 1337, 133);
        assert_eq!(r[16], AF_INET);
        assert_eq!(r[20], 133);
        assert_eq!(r[23], FR_ACT_TO_TBL);
        assert_eq!(r.len() % 4, 0);
        let rt = local_route_msg(true, 133, 1);
        assert_eq!(
            (rt[16], rt[22], rt[23]),
            (AF_INET6, RT_SCOPE_HOST, RTN_LOCAL)
        );
    }

    fn newaddr(fam: u8, index: u32, attrs: &[(u16, Vec<u8>)]) -> Vec<u8> {
        let mut body = vec![fam, 24, 0, 0];
        body.extend_from_slice(&index.to_ne_bytes());
        let mut m = message_with(RTM_NEWADDR, 2, &body, attrs);
        m[4..6].copy_from_slice(&RTM_NEWADDR.to_ne_bytes());
        m
    }

    #[test]
    fn address_dump_parsing() {
        let v4: IpAddr = "10.0.0.2".parse().unwrap();
        let peer: IpAddr = "10.0.0.1".parse().unwrap();
        let v6: IpAddr = "fd00::2".parse().unwrap();
        let mut buf = newaddr(AF_INET, 2, &[(IFA_ADDRESS, addr_bytes(v4))]);
        // Point-to-point: IFA_ADDRESS is the peer, IFA_LOCAL ours.
        buf.extend(newaddr(
            AF_INET,
            3,
            &[(IFA_ADDRESS, addr_bytes(peer)), (IFA_LOCAL, addr_bytes(v4))],
        ));
        buf.extend(newaddr(AF_INET6, 2, &[(IFA_ADDRESS, addr_bytes(v6))]));
        let mut out = Vec::new();
        assert_eq!(parse_addresses(&buf, &mut out), Ok(false));
        assert_eq!(out, vec![(2, v4), (3, v4), (2, v6)]);
        let mut done = vec![0u8; 20];
        done[0..4].copy_from_slice(&20u32.to_ne_bytes());
        done[4..6].copy_from_slice(&NLMSG_DONE.to_ne_bytes());
        assert_eq!(parse_addresses(&done, &mut out), Ok(true));
        // Truncated input is not read past its end.
        let mut out = Vec::new();
        assert_eq!(parse_addresses(&buf[..30], &mut out), Ok(false));
        assert!(out.is_empty());
    }

    #[test]
    fn acks() {
        let mut ok = vec![0u8; 36];
        ok[4..6].copy_from_slice(&NLMSG_ERROR.to_ne_bytes());
        assert_eq!(ack_errno(&ok), Some(0));
        ok[16..20].copy_from_slice(&(-17i32).to_ne_bytes());
        assert_eq!(ack_errno(&ok), Some(17));
        assert_eq!(ack_errno(&[0u8; 4]), None);
    }
}
