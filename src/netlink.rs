//! The three rtnetlink requests redirection needs, without exec'ing `ip`: add an address to `lo` (`::6/128`
//! for inbound passthrough), add the TPROXY policy rule `fwmark 1337 lookup 133`, and add the route
//! `local default dev lo table 133`. Call from a thread inside the pod's namespace ([`crate::netns`]).
//! Every request is idempotent: "already exists" counts as success.

use crate::error::{Error, Result};
use nix::sys::socket::{
    recv, send, socket, AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockProtocol, SockType,
};
use std::net::IpAddr;
use std::os::fd::{AsRawFd, OwnedFd};

const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_ACK: u16 = 0x4;
const NLM_F_EXCL: u16 = 0x200;
const NLM_F_CREATE: u16 = 0x400;
const NLMSG_ERROR: u16 = 2;
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
    let flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL;
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

/// Sends one request and waits for its acknowledgement; EEXIST is success.
fn request(what: &str, msg: &[u8]) -> Result<()> {
    let io = |e: nix::Error| Error::io(format!("netlink: {what}"), std::io::Error::from(e));
    let fd: OwnedFd = socket(
        AddressFamily::Netlink,
        SockType::Raw,
        SockFlag::SOCK_CLOEXEC,
        SockProtocol::NetlinkRoute,
    )
    .map_err(io)?;
    nix::sys::socket::bind(fd.as_raw_fd(), &NetlinkAddr::new(0, 0)).map_err(io)?;
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

fn rule_msg(v6: bool, mark: u32, table: u32) -> Vec<u8> {
    let mut body = vec![
        family(v6),
        0,
        0,
        0,
        table.min(255) as u8,
        0,
        0,
        FR_ACT_TO_TBL,
    ];
    body.extend_from_slice(&0u32.to_ne_bytes());
    message(
        RTM_NEWRULE,
        &body,
        &[
            (FRA_PRIORITY, TPROXY_RULE_PREF.to_ne_bytes().to_vec()),
            (FRA_FWMARK, mark.to_ne_bytes().to_vec()),
            (FRA_TABLE, table.to_ne_bytes().to_vec()),
        ],
    )
}

fn local_route_msg(v6: bool, table: u32, ifindex: u32) -> Vec<u8> {
    let mut body = vec![
        family(v6),
        0,
        0,
        0,
        table.min(255) as u8,
        RTPROT_BOOT,
        RT_SCOPE_HOST,
        RTN_LOCAL,
    ];
    body.extend_from_slice(&0u32.to_ne_bytes());
    message(
        RTM_NEWROUTE,
        &body,
        &[
            (RTA_TABLE, table.to_ne_bytes().to_vec()),
            (RTA_OIF, ifindex.to_ne_bytes().to_vec()),
        ],
    )
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
