//! The x_tables extensions iptables-nft writes as `match` / `target` compatibility expressions: each
//! one's name, revision and `info` bytes (the extension's struct, host byte order where the kernel header
//! says so, ports of NAT and TPROXY big-endian), built from the model and read back into it (pure). Sizes
//! are `XT_ALIGN`ed (8 bytes), as iptables sends them and the kernel dumps them. An `info` that does not
//! have exactly the shape we write reads back as [`Match::Other`] / [`Target::Other`] naming the extension.

use crate::netfilter::Family;
use crate::xtables::rule::{ConnmarkMode, Match, OwnerKind, PortDir, Target};

/// One compatibility expression's identity and payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ext {
    pub name: String,
    pub rev: u32,
    pub info: Vec<u8>,
}

fn ext(name: &str, rev: u32, info: Vec<u8>) -> Ext {
    Ext {
        name: name.to_string(),
        rev,
        info,
    }
}

fn put32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_ne_bytes());
}

fn put16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_ne_bytes());
}

fn get32(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn get16(b: &[u8], at: usize) -> u16 {
    u16::from_ne_bytes([b[at], b[at + 1]])
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

/// `info` has at least `len` bytes and only zeros after them.
fn shaped(info: &[u8], len: usize) -> bool {
    info.len() >= len && zero(info, len..info.len())
}

/// The bytes `r` of `info` exist and are all zero.
fn zero(info: &[u8], r: std::ops::Range<usize>) -> bool {
    info.get(r).is_some_and(|b| b.iter().all(|&x| x == 0))
}

/// How a compatibility expression we cannot model is named in a rule read back.
pub fn describe(kind: &str, e: &Ext) -> String {
    let opt = if kind == "target" { "-j" } else { "-m" };
    format!(
        "{opt} {} (revision {}, {} bytes of options)",
        e.name,
        e.rev,
        e.info.len()
    )
}

/// `-m tcp|udp [!] --sport|--dport P` (revision 0, as iptables 1.8.7 writes it): xt_tcp / xt_udp.
pub fn port(proto: &str, dir: PortDir, port: u16, inv: bool) -> Ext {
    let mut b = vec![0u8; 16];
    let (sp, dp) = match dir {
        PortDir::Src => ((port, port), (0, 0xffff)),
        PortDir::Dst => ((0, 0xffff), (port, port)),
    };
    put16(&mut b, 0, sp.0);
    put16(&mut b, 2, sp.1);
    put16(&mut b, 4, dp.0);
    put16(&mut b, 6, dp.1);
    let flag = match dir {
        PortDir::Src => 1,
        PortDir::Dst => 2,
    };
    // xt_tcp: option, flg_mask, flg_cmp, invflags; xt_udp: invflags right after the ports.
    let at = if proto == "tcp" { 11 } else { 8 };
    b[at] = if inv { flag } else { 0 };
    ext(proto, 0, b)
}

fn read_port(e: &Ext) -> Option<Match> {
    let inv_at = if e.name == "tcp" { 11 } else { 8 };
    let shape = shaped(&e.info, inv_at + 1) && zero(&e.info, 8..inv_at);
    if e.rev != 0 || !shape || e.info.len() > 16 {
        return None;
    }
    let b = &e.info;
    let (sp, dp, invf) = (
        (get16(b, 0), get16(b, 2)),
        (get16(b, 4), get16(b, 6)),
        b[inv_at],
    );
    let (dir, p, flag) = match (sp, dp) {
        ((0, 0xffff), (a, z)) if a == z => (PortDir::Dst, a, 2),
        ((a, z), (0, 0xffff)) if a == z => (PortDir::Src, a, 1),
        _ => return None,
    };
    if invf != 0 && invf != flag {
        return None;
    }
    Some(Match::Port {
        dir,
        port: p,
        inv: invf != 0,
    })
}

/// A model match as its compatibility expression; `None` for the ones written natively or not at all
/// (ports: [`port`], which needs the rule's protocol).
pub fn match_ext(m: &Match) -> Option<Ext> {
    Some(match m {
        Match::Port { .. } | Match::Other(_) => return None,
        Match::Multiport { ports, inv } => {
            let mut b = vec![0u8; 48];
            b[0] = 1; // XT_MULTIPORT_DESTINATION
            b[1] = ports.len() as u8;
            for (i, p) in ports.iter().take(15).enumerate() {
                put16(&mut b, 2 + 2 * i, *p);
            }
            b[47] = *inv as u8;
            ext("multiport", 1, b)
        }
        Match::Owner { kind, id, inv } => {
            let mut b = vec![0u8; 24];
            let (at, flag) = match kind {
                OwnerKind::Uid => (0, 1),
                OwnerKind::Gid => (8, 2),
            };
            put32(&mut b, at, *id);
            put32(&mut b, at + 4, *id);
            b[16] = flag;
            b[17] = if *inv { flag } else { 0 };
            ext("owner", 1, b)
        }
        Match::Mark { mark, mask, inv } => ext("mark", 1, mark_info(*mark, *mask, *inv)),
        Match::Connmark { mark, mask, inv } => ext("connmark", 1, mark_info(*mark, *mask, *inv)),
        Match::Conntrack { states } => {
            let mut b = vec![0u8; 168];
            put16(&mut b, 146, 1); // XT_CONNTRACK_STATE
            put16(&mut b, 150, *states as u16);
            ext("conntrack", 3, b)
        }
    })
}

fn mark_info(mark: u32, mask: u32, inv: bool) -> Vec<u8> {
    let mut b = vec![0u8; 16];
    put32(&mut b, 0, mark);
    put32(&mut b, 4, mask);
    b[8] = inv as u8;
    b
}

fn read_mark(info: &[u8]) -> Option<(u32, u32, bool)> {
    (shaped(info, 9) && info[8] <= 1).then(|| (get32(info, 0), get32(info, 4), info[8] == 1))
}

/// A compatibility match read back (`None`: not one of the shapes we write).
pub fn read_match(e: &Ext) -> Option<Match> {
    let b = &e.info;
    match (e.name.as_str(), e.rev) {
        ("tcp" | "udp", 0) => read_port(e),
        ("mark", 1) => read_mark(b).map(|(mark, mask, inv)| Match::Mark { mark, mask, inv }),
        ("connmark", 1) => {
            read_mark(b).map(|(mark, mask, inv)| Match::Connmark { mark, mask, inv })
        }
        ("owner", 1) => {
            if !shaped(b, 18) {
                return None;
            }
            let (kind, at, other, flag) = match b[16] {
                1 => (OwnerKind::Uid, 0, 8..16, 1),
                2 => (OwnerKind::Gid, 8, 0..8, 2),
                _ => return None,
            };
            let id = get32(b, at);
            let ok =
                get32(b, at + 4) == id && shaped(b, 18) && zero(b, other) && b[17] & !flag == 0;
            ok.then_some(Match::Owner {
                kind,
                id,
                inv: b[17] == flag,
            })
        }
        ("multiport", 1) => {
            let n = b.get(1).copied().unwrap_or(0) as usize;
            // Destination ports, no ranges (pflags), invert 0/1.
            let ok = shaped(b, 48)
                && zero(b, 32..47)
                && zero(b, 2 + 2 * n.min(15)..32)
                && b[0] == 1
                && (1..=15).contains(&n)
                && b[47] <= 1;
            ok.then(|| Match::Multiport {
                ports: (0..n).map(|i| get16(b, 2 + 2 * i)).collect(),
                inv: b[47] == 1,
            })
        }
        ("conntrack", 3) => {
            let ok = shaped(b, 162)
                && zero(b, 0..146)
                && zero(b, 148..150)
                && zero(b, 152..162)
                && get16(b, 146) == 1;
            ok.then(|| Match::Conntrack {
                states: get16(b, 150) as u32,
            })
        }
        _ => None,
    }
}

/// A model target as its compatibility expression (`None`: a verdict, or nothing).
pub fn target_ext(t: &Target, family: Family) -> Option<Ext> {
    Some(match t {
        Target::None
        | Target::Accept
        | Target::Drop
        | Target::Return
        | Target::Jump(_)
        | Target::Other(_) => return None,
        Target::Redirect { port } => match family {
            // nf_nat_ipv4_multi_range_compat: rangesize 1, then one range (flags, min/max ip, ports).
            Family::V4 => {
                let mut b = vec![0u8; 24];
                put32(&mut b, 0, 1);
                put32(&mut b, 4, 2); // NF_NAT_RANGE_PROTO_SPECIFIED
                b[16..18].copy_from_slice(&port.to_be_bytes());
                b[18..20].copy_from_slice(&port.to_be_bytes());
                ext("REDIRECT", 0, b)
            }
            // nf_nat_range: flags, min/max address, min/max port.
            Family::V6 => {
                let mut b = vec![0u8; 40];
                put32(&mut b, 0, 2);
                b[36..38].copy_from_slice(&port.to_be_bytes());
                b[38..40].copy_from_slice(&port.to_be_bytes());
                ext("REDIRECT", 0, b)
            }
        },
        Target::Mark { mark, mask } => {
            let mut b = vec![0u8; 8];
            put32(&mut b, 0, *mark);
            put32(&mut b, 4, *mask);
            ext("MARK", 2, b)
        }
        Target::Connmark {
            mode,
            nfmask,
            ctmask,
        } => {
            let mut b = vec![0u8; 16];
            put32(&mut b, 4, *ctmask);
            put32(&mut b, 8, *nfmask);
            b[14] = match mode {
                ConnmarkMode::Save => 1,
                ConnmarkMode::Restore => 2,
            };
            ext("CONNMARK", 2, b)
        }
        Target::Tproxy { port, mark, mask } => {
            let mut b = vec![0u8; 32];
            put32(&mut b, 0, *mask);
            put32(&mut b, 4, *mark);
            b[24..26].copy_from_slice(&port.to_be_bytes());
            ext("TPROXY", 1, b)
        }
        Target::Ct { zone } => {
            let mut b = vec![0u8; 72];
            put16(&mut b, 2, *zone);
            ext("CT", 2, b)
        }
    })
}

/// A compatibility target read back (`None`: not one of the shapes we write).
pub fn read_target(e: &Ext, family: Family) -> Option<Target> {
    let b = &e.info;
    match (e.name.as_str(), e.rev, family) {
        ("REDIRECT", 0, Family::V4) => {
            let ok = shaped(b, 20) && zero(b, 8..16) && get32(b, 0) == 1 && get32(b, 4) == 2;
            if !ok {
                return None;
            }
            let (lo, hi) = (be16(b, 16), be16(b, 18));
            (lo == hi).then_some(Target::Redirect { port: lo })
        }
        ("REDIRECT", 0, Family::V6) => {
            let ok = shaped(b, 40) && zero(b, 4..36) && get32(b, 0) == 2;
            if !ok {
                return None;
            }
            let (lo, hi) = (be16(b, 36), be16(b, 38));
            (lo == hi).then_some(Target::Redirect { port: lo })
        }
        ("MARK", 2, _) if shaped(b, 8) => Some(Target::Mark {
            mark: get32(b, 0),
            mask: get32(b, 4),
        }),
        ("CONNMARK", 2, _) if shaped(b, 15) && zero(b, 0..4) && zero(b, 12..14) => {
            let mode = match b[14] {
                1 => ConnmarkMode::Save,
                2 => ConnmarkMode::Restore,
                _ => return None,
            };
            Some(Target::Connmark {
                mode,
                ctmask: get32(b, 4),
                nfmask: get32(b, 8),
            })
        }
        ("TPROXY", 1, _) if shaped(b, 26) && zero(b, 8..24) => Some(Target::Tproxy {
            mask: get32(b, 0),
            mark: get32(b, 4),
            port: be16(b, 24),
        }),
        // The last 8 bytes are the kernel's conntrack template pointer (dumped as it holds it).
        ("CT", 2, _) if b.len() >= 64 && shaped(&b[..64], 4) && zero(&b[..64], 0..2) => {
            Some(Target::Ct { zone: get16(b, 2) })
        }
        // Not ours, but the bypass CHECK names most: named as iptables-save names it.
        ("CT", 2, _) if b.len() >= 64 && get16(b, 0) == 1 && shaped(&b[..64], 2) => {
            Some(Target::Other("-j CT --notrack".into()))
        }
        _ => None,
    }
}
