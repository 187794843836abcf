//! One rule as an `ipt_entry` / `ip6t_entry` (pure): the IP header fields (`-s`, `-d`, `-i`, `-o`, `-p`
//! and their `!`), then the matches, then the target, exactly as `iptables-legacy` lays them out
//! (research in issue 40 §3.2). Addresses are stored masked with full netmasks; an interface name with a
//! mask of `strlen + 1` bytes of 0xff (`eth+`: `strlen - 1`, the `+` kept in the name); ip6 `-p` also sets
//! `IP6T_F_PROTO`. Counters, `comefrom` and `nfcache` are zero (the kernel keeps its own).

use super::exts::{self, EXT_HEADER};
use crate::error::{Error, Result};
use crate::netfilter::Family;
use crate::xtables::rule::{Match, Neg, Rule, Target};
use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Where the fields sit in one family's entry.
#[derive(Debug, Clone, Copy)]
pub struct Layout {
    pub family: Family,
    /// Address length (4 or 16): src, dst, smsk, dmsk follow each other from 0.
    addr: usize,
    /// iniface, outiface, iniface_mask, outiface_mask (16 bytes each).
    iface_at: usize,
    proto_at: usize,
    flags_at: usize,
    invflags_at: usize,
    pub target_offset_at: usize,
    pub comefrom_at: usize,
    pub counters_at: usize,
    /// `sizeof(struct ipt_entry)`: matches start here.
    pub size: usize,
}

pub const V4: Layout = Layout {
    family: Family::V4,
    addr: 4,
    iface_at: 16,
    proto_at: 80,
    flags_at: 82,
    invflags_at: 83,
    target_offset_at: 88,
    comefrom_at: 92,
    counters_at: 96,
    size: 112,
};

pub const V6: Layout = Layout {
    family: Family::V6,
    addr: 16,
    iface_at: 64,
    proto_at: 128,
    flags_at: 131,
    invflags_at: 132,
    target_offset_at: 140,
    comefrom_at: 144,
    counters_at: 152,
    size: 168,
};

pub fn layout(family: Family) -> Layout {
    match family {
        Family::V4 => V4,
        Family::V6 => V6,
    }
}

const INV_VIA_IN: u8 = 0x01;
const INV_VIA_OUT: u8 = 0x02;
const INV_SRCIP: u8 = 0x08;
const INV_DSTIP: u8 = 0x10;
const INV_PROTO: u8 = 0x40;
const IP6T_F_PROTO: u8 = 0x01;
const IFNAMSIZ: usize = 16;

fn rules_err(msg: String) -> Error {
    Error::Rules(msg)
}

/// The bytes of an address and of its netmask, masked, in the family's length.
fn addr_bytes(l: &Layout, net: &IpNet) -> Result<(Vec<u8>, Vec<u8>)> {
    match (l.family, net) {
        (Family::V4, IpNet::V4(n)) => {
            Ok((n.network().octets().to_vec(), n.netmask().octets().to_vec()))
        }
        (Family::V6, IpNet::V6(n)) => {
            Ok((n.network().octets().to_vec(), n.netmask().octets().to_vec()))
        }
        _ => Err(rules_err(format!(
            "address {net} in an {} rule",
            l.family.name()
        ))),
    }
}

/// An interface name and its mask (`+` at the end: a prefix).
fn iface_bytes(name: &str) -> Result<([u8; IFNAMSIZ], [u8; IFNAMSIZ])> {
    let b = name.as_bytes();
    if b.len() >= IFNAMSIZ {
        return Err(rules_err(format!(
            "interface name {name:?} is longer than 15 characters"
        )));
    }
    let mut n = [0u8; IFNAMSIZ];
    let mut m = [0u8; IFNAMSIZ];
    n[..b.len()].copy_from_slice(b);
    let masked = if b.last() == Some(&b'+') {
        b.len() - 1
    } else {
        b.len() + 1
    };
    m[..masked].fill(0xff);
    Ok((n, m))
}

/// An entry's bytes with a zero standard verdict where a jump or fall-through goes (the layout fills it).
pub fn encode(l: &Layout, r: &Rule) -> Result<Vec<u8>> {
    let mut e = vec![0u8; l.size];
    let mut inv = 0u8;
    for (i, (x, bit)) in [(&r.src, INV_SRCIP), (&r.dst, INV_DSTIP)]
        .into_iter()
        .enumerate()
    {
        if let Some(Neg { inv: neg, value }) = x {
            let (a, m) = addr_bytes(l, value)?;
            e[i * l.addr..(i + 1) * l.addr].copy_from_slice(&a);
            e[(i + 2) * l.addr..(i + 3) * l.addr].copy_from_slice(&m);
            if *neg {
                inv |= bit;
            }
        }
    }
    for (i, (x, bit)) in [(&r.iif, INV_VIA_IN), (&r.oif, INV_VIA_OUT)]
        .into_iter()
        .enumerate()
    {
        if let Some(Neg { inv: neg, value }) = x {
            let (n, m) = iface_bytes(value)?;
            let at = l.iface_at + i * IFNAMSIZ;
            e[at..at + IFNAMSIZ].copy_from_slice(&n);
            e[at + 2 * IFNAMSIZ..at + 3 * IFNAMSIZ].copy_from_slice(&m);
            if *neg {
                inv |= bit;
            }
        }
    }
    if let Some(p) = r.proto {
        e[l.proto_at..l.proto_at + 2].copy_from_slice(&u16::from(p).to_ne_bytes());
        if l.family == Family::V6 && p != 0 {
            e[l.flags_at] = IP6T_F_PROTO;
        }
    }
    e[l.invflags_at] = inv;
    for m in &r.matches {
        e.extend(exts::encode_match(m, r.proto)?);
    }
    let toff = e.len();
    e.extend(exts::encode_target(l.family, &r.target)?);
    let next = e.len();
    let (toff, next) = (u16::try_from(toff), u16::try_from(next));
    let (Ok(toff), Ok(next)) = (toff, next) else {
        return Err(rules_err("a rule larger than 64 KiB".into()));
    };
    e[l.target_offset_at..l.target_offset_at + 2].copy_from_slice(&toff.to_ne_bytes());
    e[l.target_offset_at + 2..l.target_offset_at + 4].copy_from_slice(&next.to_ne_bytes());
    Ok(e)
}

/// The offsets in one entry (already checked to lie inside it).
pub struct Parts<'a> {
    pub bytes: &'a [u8],
    /// (offset, size) of each match.
    pub matches: Vec<(usize, usize)>,
    pub target_at: usize,
}

/// Splits entry `e` (exactly `next_offset` bytes) into matches and target; `None` if malformed.
pub fn parts<'a>(l: &Layout, e: &'a [u8]) -> Option<Parts<'a>> {
    let toff = usize::from(u16::from_ne_bytes(
        e.get(l.target_offset_at..l.target_offset_at + 2)?
            .try_into()
            .ok()?,
    ));
    if toff < l.size || toff + EXT_HEADER > e.len() {
        return None;
    }
    let tsize = usize::from(u16::from_ne_bytes(e[toff..toff + 2].try_into().ok()?));
    if tsize < EXT_HEADER || toff + tsize > e.len() {
        return None;
    }
    let mut matches = Vec::new();
    let mut m = l.size;
    while m < toff {
        let size = usize::from(u16::from_ne_bytes(e.get(m..m + 2)?.try_into().ok()?));
        if size < EXT_HEADER || m + size > toff {
            return None;
        }
        matches.push((m, size));
        m += size;
    }
    Some(Parts {
        bytes: e,
        matches,
        target_at: toff,
    })
}

/// An extension's name, revision and payload at `at` (size `size`).
pub fn ext_at(e: &[u8], at: usize, size: usize) -> (String, u8, &[u8]) {
    let name = &e[at + 2..at + 31];
    let end = name.iter().position(|&c| c == 0).unwrap_or(name.len());
    (
        String::from_utf8_lossy(&name[..end]).into_owned(),
        e[at + 31],
        &e[at + EXT_HEADER..at + size],
    )
}

/// The network a stored address and mask describe; `None` if the mask is not a prefix.
fn net(l: &Layout, a: &[u8], m: &[u8]) -> Option<IpNet> {
    let ones: u32 = m.iter().map(|b| b.count_ones()).sum();
    let prefix = u8::try_from(ones).ok()?;
    let contiguous = m
        .iter()
        .flat_map(|b| (0..8).rev().map(move |i| b >> i & 1))
        .skip(ones as usize)
        .all(|b| b == 0);
    if !contiguous {
        return None;
    }
    match l.family {
        Family::V4 => {
            let a: [u8; 4] = a.try_into().ok()?;
            Ipv4Net::new(Ipv4Addr::from(a), prefix).ok().map(IpNet::V4)
        }
        Family::V6 => {
            let a: [u8; 16] = a.try_into().ok()?;
            Ipv6Net::new(Ipv6Addr::from(a), prefix).ok().map(IpNet::V6)
        }
    }
}

fn any_addr(l: &Layout) -> IpAddr {
    match l.family {
        Family::V4 => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        Family::V6 => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
    }
}

/// The rule entry `p` describes; `link` is its standard target's resolved jump or fall-through. What
/// the model cannot say becomes [`Match::Other`] / [`Target::Other`].
pub fn decode(l: &Layout, p: &Parts, link: Option<Target>) -> Rule {
    let e = p.bytes;
    let mut r = Rule::any();
    let mut odd: Vec<String> = Vec::new();
    let inv = e[l.invflags_at];
    for (i, bit, opt) in [(0usize, INV_SRCIP, "-s"), (1, INV_DSTIP, "-d")] {
        let a = &e[i * l.addr..(i + 1) * l.addr];
        let m = &e[(i + 2) * l.addr..(i + 3) * l.addr];
        let neg = inv & bit != 0;
        if m.iter().all(|&b| b == 0) && a.iter().all(|&b| b == 0) && !neg {
            continue;
        }
        match net(l, a, m) {
            Some(n) => {
                let value = Some(Neg { inv: neg, value: n });
                if i == 0 {
                    r.src = value
                } else {
                    r.dst = value
                }
            }
            None => odd.push(format!(
                "{opt} with a non-prefix mask (not {})",
                any_addr(l)
            )),
        }
    }
    for (i, bit, opt) in [(0usize, INV_VIA_IN, "-i"), (1, INV_VIA_OUT, "-o")] {
        let at = l.iface_at + i * IFNAMSIZ;
        let n = &e[at..at + IFNAMSIZ];
        let m = &e[at + 2 * IFNAMSIZ..at + 3 * IFNAMSIZ];
        let neg = inv & bit != 0;
        let len = n.iter().position(|&c| c == 0).unwrap_or(IFNAMSIZ);
        let name = String::from_utf8_lossy(&n[..len]).into_owned();
        if len == 0 && m.iter().all(|&b| b == 0) && !neg {
            continue;
        }
        let value = Some(Neg {
            inv: neg,
            value: name.clone(),
        });
        match iface_bytes(&name) {
            Ok((_, want)) if want == m => {
                if i == 0 {
                    r.iif = value
                } else {
                    r.oif = value
                }
            }
            _ => odd.push(format!("{opt} {name} with an unusual mask")),
        }
    }
    let proto = u16::from_ne_bytes([e[l.proto_at], e[l.proto_at + 1]]);
    if proto != 0 {
        match u8::try_from(proto) {
            Ok(p) => r.proto = Some(p),
            Err(_) => odd.push(format!("-p {proto}")),
        }
    }
    if inv & INV_PROTO != 0 {
        odd.push(format!("! -p {proto}"));
    }
    for &(at, size) in &p.matches {
        let (name, rev, d) = ext_at(e, at, size);
        r.matches.push(exts::decode_match(&name, rev, d));
    }
    let tsize = usize::from(u16::from_ne_bytes([e[p.target_at], e[p.target_at + 1]]));
    let (name, rev, d) = ext_at(e, p.target_at, tsize);
    r.target = exts::decode_target(l.family, &name, rev, d, link);
    r.matches.extend(odd.into_iter().map(Match::Other));
    r
}

/// Whether the rule holds something only read, never written by us.
pub fn has_other(r: &Rule) -> bool {
    matches!(r.target, Target::Other(_)) || r.matches.iter().any(|m| matches!(m, Match::Other(_)))
}

/// `e` with the fields the kernel owns (counters, `comefrom`) zeroed.
pub fn normalized(l: &Layout, e: &[u8]) -> Vec<u8> {
    let mut v = e.to_vec();
    v[l.comefrom_at..l.comefrom_at + 4].fill(0);
    v[l.counters_at..l.counters_at + 16].fill(0);
    v
}
