//! ctnetlink, the little of it repair needs (pure): a dump request for one IP family's conntrack table
//! (`IPCTNL_MSG_CT_GET` with `NLM_F_DUMP`), an entry decoded from the dump (its original and reply tuples,
//! its id and zone), and the request deleting exactly that entry (`IPCTNL_MSG_CT_DELETE` with its original
//! tuple, zone and id: an entry recycled meanwhile has another id and is not touched). The messages go
//! over the nf_tables socket ([`super::socket`]), the same `NETLINK_NETFILTER` family, in the same codec
//! ([`super::encode`], [`super::decode`]).

use super::decode::{self, get, Msg};
use super::encode::{message, Attrs};
use crate::error::{Error, Result};
use crate::netlink::{NLM_F_ACK, NLM_F_DUMP, NLM_F_REQUEST};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

const NFNL_SUBSYS_CTNETLINK: u16 = 1;
const IPCTNL_MSG_CT_GET: u16 = 1;
const IPCTNL_MSG_CT_DELETE: u16 = 2;
const CTA_TUPLE_ORIG: u16 = 1;
const CTA_TUPLE_REPLY: u16 = 2;
const CTA_ID: u16 = 12;
const CTA_ZONE: u16 = 18;
const CTA_TUPLE_IP: u16 = 1;
const CTA_TUPLE_PROTO: u16 = 2;
const CTA_IP_V4_SRC: u16 = 1;
const CTA_IP_V4_DST: u16 = 2;
const CTA_IP_V6_SRC: u16 = 3;
const CTA_IP_V6_DST: u16 = 4;
const CTA_PROTO_NUM: u16 = 1;
const CTA_PROTO_SRC_PORT: u16 = 2;
const CTA_PROTO_DST_PORT: u16 = 3;
pub const AF_INET: u8 = 2;
pub const AF_INET6: u8 = 10;
pub const IPPROTO_TCP: u8 = 6;

/// The netlink message type of a ctnetlink message.
pub fn ct_type(msg: u16) -> u16 {
    (NFNL_SUBSYS_CTNETLINK << 8) | msg
}

/// One direction of a connection: protocol, source and destination (ports 0 for a protocol without).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tuple {
    pub proto: u8,
    pub src: SocketAddr,
    pub dst: SocketAddr,
}

/// A conntrack entry as dumped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub family: u8,
    pub orig: Tuple,
    pub reply: Tuple,
    pub id: Option<u32>,
    pub zone: Option<u16>,
}

fn bad(what: &str) -> Error {
    Error::other(format!("malformed conntrack entry: {what}"))
}

fn ip(p: &[u8]) -> Result<IpAddr> {
    match p.len() {
        4 => Ok(IpAddr::V4(Ipv4Addr::new(p[0], p[1], p[2], p[3]))),
        16 => {
            let mut b = [0u8; 16];
            b.copy_from_slice(p);
            Ok(IpAddr::V6(Ipv6Addr::from(b)))
        }
        _ => Err(bad("address length")),
    }
}

fn port(a: &[(u16, &[u8])], ty: u16) -> u16 {
    get(a, ty)
        .and_then(|p| p.get(..2))
        .map_or(0, |p| u16::from_be_bytes([p[0], p[1]]))
}

pub(super) fn tuple(p: &[u8]) -> Result<Tuple> {
    let a = decode::attrs(p)?;
    let ips = decode::attrs(get(&a, CTA_TUPLE_IP).ok_or_else(|| bad("no addresses"))?)?;
    let proto = decode::attrs(get(&a, CTA_TUPLE_PROTO).ok_or_else(|| bad("no protocol"))?)?;
    let (src, dst) = match (get(&ips, CTA_IP_V4_SRC), get(&ips, CTA_IP_V4_DST)) {
        (Some(s), Some(d)) => (ip(s)?, ip(d)?),
        _ => (
            ip(get(&ips, CTA_IP_V6_SRC).ok_or_else(|| bad("no source"))?)?,
            ip(get(&ips, CTA_IP_V6_DST).ok_or_else(|| bad("no destination"))?)?,
        ),
    };
    Ok(Tuple {
        proto: *get(&proto, CTA_PROTO_NUM)
            .and_then(|p| p.first())
            .ok_or_else(|| bad("no protocol number"))?,
        src: SocketAddr::new(src, port(&proto, CTA_PROTO_SRC_PORT)),
        dst: SocketAddr::new(dst, port(&proto, CTA_PROTO_DST_PORT)),
    })
}

/// The dump of `family`'s (`AF_INET`, `AF_INET6`) conntrack table of the socket's namespace.
pub fn dump_request(family: u8, seq: u32) -> Vec<u8> {
    message(
        ct_type(IPCTNL_MSG_CT_GET),
        NLM_F_REQUEST | NLM_F_DUMP,
        seq,
        family,
        0,
        &[],
    )
}

/// An entry of a dump of `family`'s table.
pub fn entry(m: &Msg, family: u8) -> Result<Entry> {
    let a = decode::nft_attrs(m)?;
    let orig = get(&a, CTA_TUPLE_ORIG).ok_or_else(|| bad("no original tuple"))?;
    let reply = get(&a, CTA_TUPLE_REPLY).ok_or_else(|| bad("no reply tuple"))?;
    let be = |ty| get(&a, ty);
    Ok(Entry {
        family,
        orig: tuple(orig)?,
        reply: tuple(reply)?,
        id: be(CTA_ID)
            .and_then(|p| p.get(..4))
            .map(|p| u32::from_be_bytes([p[0], p[1], p[2], p[3]])),
        zone: be(CTA_ZONE)
            .and_then(|p| p.get(..2))
            .map(|p| u16::from_be_bytes([p[0], p[1]])),
    })
}

/// A tuple's attributes, as the kernel parses them (`CTA_TUPLE_IP`, `CTA_TUPLE_PROTO`).
fn tuple_attrs(t: &Tuple, a: &mut Attrs) {
    let (s, d) = (t.src.ip(), t.dst.ip());
    let bytes = |ip: IpAddr| match ip {
        IpAddr::V4(v) => v.octets().to_vec(),
        IpAddr::V6(v) => v.octets().to_vec(),
    };
    let (ts, td) = if s.is_ipv4() {
        (CTA_IP_V4_SRC, CTA_IP_V4_DST)
    } else {
        (CTA_IP_V6_SRC, CTA_IP_V6_DST)
    };
    a.nest(CTA_TUPLE_IP, |i| {
        i.put(ts, &bytes(s)).put(td, &bytes(d));
    });
    a.nest(CTA_TUPLE_PROTO, |p| {
        p.put(CTA_PROTO_NUM, &[t.proto])
            .put(CTA_PROTO_SRC_PORT, &t.src.port().to_be_bytes())
            .put(CTA_PROTO_DST_PORT, &t.dst.port().to_be_bytes());
    });
}

/// Deletes exactly `e` (its original tuple, zone and id), acknowledged.
pub fn delete_request(e: &Entry, seq: u32) -> Vec<u8> {
    let mut a = Attrs::default();
    a.nest(CTA_TUPLE_ORIG, |t| tuple_attrs(&e.orig, t));
    if let Some(z) = e.zone {
        a.put(CTA_ZONE, &z.to_be_bytes());
    }
    if let Some(id) = e.id {
        a.be32(CTA_ID, id);
    }
    message(
        ct_type(IPCTNL_MSG_CT_DELETE),
        NLM_F_REQUEST | NLM_F_ACK,
        seq,
        e.family,
        0,
        &a.buf,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::NLA_F_NESTED;

    /// A dumped entry as the kernel writes it: orig 10.0.0.2:40000 -> 10.9.9.9:80, reply from `reply_src`.
    fn dumped(reply_src: (&[u8], u16)) -> Vec<u8> {
        let tuple = |src: &[u8], dst: &[u8], sp: u16, dp: u16| {
            let mut t = Attrs::default();
            t.nest(CTA_TUPLE_IP, |i| {
                i.put(CTA_IP_V4_SRC, src).put(CTA_IP_V4_DST, dst);
            });
            t.nest(CTA_TUPLE_PROTO, |p| {
                p.put(CTA_PROTO_NUM, &[IPPROTO_TCP])
                    .put(CTA_PROTO_SRC_PORT, &sp.to_be_bytes())
                    .put(CTA_PROTO_DST_PORT, &dp.to_be_bytes());
            });
            t.buf
        };
        let mut a = Attrs::default();
        a.put(
            CTA_TUPLE_ORIG | NLA_F_NESTED,
            &tuple(&[10, 0, 0, 2], &[10, 9, 9, 9], 40000, 80),
        );
        a.put(
            CTA_TUPLE_REPLY | NLA_F_NESTED,
            &tuple(reply_src.0, &[10, 0, 0, 2], reply_src.1, 40000),
        );
        a.be32(CTA_ID, 0xdead_beef);
        message(ct_type(0), 0x2, 7, AF_INET, 0, &a.buf)
    }

    #[test]
    fn an_entry_is_read_and_deleted_by_its_exact_tuple_zone_and_id() {
        let buf = dumped((&[127, 0, 0, 1], 15001));
        let msgs = decode::messages(&buf).unwrap();
        let e = entry(&msgs[0], AF_INET).unwrap();
        assert_eq!(e.orig.proto, IPPROTO_TCP);
        assert_eq!(e.orig.src, "10.0.0.2:40000".parse().unwrap());
        assert_eq!(e.orig.dst, "10.9.9.9:80".parse().unwrap());
        assert_eq!(e.reply.src, "127.0.0.1:15001".parse().unwrap());
        assert_eq!(e.id, Some(0xdead_beef));
        assert_eq!(e.zone, None);
        let del = delete_request(&e, 9);
        let m = &decode::messages(&del).unwrap()[0];
        assert_eq!(m.kind, 0x102);
        assert_eq!(m.flags, NLM_F_REQUEST | NLM_F_ACK);
        assert_eq!(m.body[0], AF_INET);
        let a = decode::nft_attrs(m).unwrap();
        assert_eq!(tuple(get(&a, CTA_TUPLE_ORIG).unwrap()).unwrap(), e.orig);
        assert_eq!(get(&a, CTA_ID), Some(&0xdead_beef_u32.to_be_bytes()[..]));
        let dump = dump_request(AF_INET6, 3);
        let m = &decode::messages(&dump).unwrap()[0];
        assert_eq!((m.kind, m.flags, m.body[0]), (0x101, 0x301, AF_INET6));
    }

    #[test]
    fn a_malformed_entry_is_an_error_not_a_panic() {
        let buf = dumped((&[127, 0, 0], 15001));
        let msgs = decode::messages(&buf).unwrap();
        assert!(entry(&msgs[0], AF_INET).is_err());
        let empty = message(ct_type(0), 0, 1, AF_INET, 0, &[]);
        assert!(entry(&decode::messages(&empty).unwrap()[0], AF_INET).is_err());
    }
}
