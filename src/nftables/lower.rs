//! The lowering of a rule's [`Item`]s to kernel expressions (spec nftables.md §4.4), including the implicit
//! dependencies nft adds in an `inet` table (`meta nfproto` before `ip`/`ip6` matches, `meta l4proto`
//! before port matches, once per rule) and the prefix encodings of §4.5. Byte order follows the kernel:
//! ports and addresses in network order; uid/gid/mark/ct values in host order.

use super::expr::*;
use super::model::{Item, Owner};
use crate::error::{Error, Result};
use crate::netfilter::{NFPROTO_IPV4, NFPROTO_IPV6, NF_ACCEPT, NF_DROP};
use ipnet::IpNet;

/// A rule lowered for the kernel: its expressions and the anonymous sets its lookups use (a lookup's
/// `set_id` is the index into `sets` until the encoder assigns batch ids).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lowered {
    pub exprs: Vec<Expr>,
    /// Per anonymous set: its elements (2-byte big-endian ports).
    pub sets: Vec<Vec<Vec<u8>>>,
}

/// Resolves a group name to its GID (the host's NSS, in the effect layer).
pub type GroupResolver<'a> = &'a dyn Fn(&str) -> Result<u32>;

fn load_meta(key: u32) -> Expr {
    Expr::Meta {
        key,
        dreg: NFT_REG_1,
    }
}

fn set_meta(key: u32) -> Expr {
    Expr::MetaSet {
        key,
        sreg: NFT_REG_1,
    }
}

fn load_ct(key: u32) -> Expr {
    Expr::Ct {
        key,
        dreg: NFT_REG_1,
    }
}

fn set_ct(key: u32) -> Expr {
    Expr::CtSet {
        key,
        sreg: NFT_REG_1,
    }
}

fn load_payload(base: u32, offset: u32, len: u32) -> Expr {
    Expr::Payload {
        dreg: NFT_REG_1,
        base,
        offset,
        len,
    }
}

/// Register 1 masked with `mask` (as long as it).
fn and(mask: Vec<u8>) -> Expr {
    Expr::Bitwise {
        sreg: NFT_REG_1,
        dreg: NFT_REG_1,
        len: mask.len() as u32,
        xor: vec![0; mask.len()],
        mask,
    }
}

fn cmp(op: u32, data: Vec<u8>) -> Expr {
    Expr::Cmp {
        sreg: NFT_REG_1,
        op,
        data,
    }
}

fn value(data: Vec<u8>) -> Expr {
    Expr::Immediate {
        dreg: NFT_REG_1,
        data: Data::Value(data),
    }
}

fn verdict(code: i32, chain: Option<String>) -> Expr {
    Expr::Immediate {
        dreg: NFT_REG_VERDICT,
        data: Data::Verdict { code, chain },
    }
}

fn op(neq: bool) -> u32 {
    if neq {
        CMP_NEQ
    } else {
        CMP_EQ
    }
}

fn ifname(n: &str) -> Vec<u8> {
    let mut v = n.as_bytes().to_vec();
    v.resize(16, 0);
    v
}

/// `meta l4proto <proto>` unless the rule already matched it (`l4`), then the transport port at `offset`
/// (0 source, 2 destination) into register 1, then `test` on it.
fn port_match(e: &mut Vec<Expr>, l4: &mut Option<u8>, proto: u8, offset: u32, test: Expr) {
    if *l4 != Some(proto) {
        e.extend([load_meta(META_L4PROTO), cmp(CMP_EQ, vec![proto])]);
        *l4 = Some(proto);
    }
    e.extend([load_payload(PAYLOAD_TRANSPORT, offset, 2), test]);
}

/// `meta nfproto <family>` unless the rule already matched it (`nfproto`), then the source or destination
/// address compared with `net`: whole bytes when the prefix is a non-zero multiple of 8, else masked (§4.5).
/// A `/0` has no byte to compare (the kernel refuses a zero-length load): like nft, the whole address is
/// loaded and masked to zero.
fn addr_match(e: &mut Vec<Expr>, nfproto: &mut Option<u8>, saddr: bool, neq: bool, net: &IpNet) {
    let (fam, offset, full) = match net {
        IpNet::V4(_) => (NFPROTO_IPV4, if saddr { 12 } else { 16 }, 4u32),
        IpNet::V6(_) => (NFPROTO_IPV6, if saddr { 8 } else { 24 }, 16u32),
    };
    if *nfproto != Some(fam) {
        e.extend([load_meta(META_NFPROTO), cmp(CMP_EQ, vec![fam])]);
        *nfproto = Some(fam);
    }
    let (network, mask): (Vec<u8>, Vec<u8>) = match net.trunc() {
        IpNet::V4(n) => (n.network().octets().to_vec(), n.netmask().octets().to_vec()),
        IpNet::V6(n) => (n.network().octets().to_vec(), n.netmask().octets().to_vec()),
    };
    let bits = u32::from(net.prefix_len());
    if bits % 8 == 0 && bits > 0 {
        let len = bits / 8;
        e.push(load_payload(PAYLOAD_NETWORK, offset, len));
        e.push(cmp(op(neq), network[..len as usize].to_vec()));
    } else {
        e.push(load_payload(PAYLOAD_NETWORK, offset, full));
        e.extend([and(mask), cmp(op(neq), network)]);
    }
}

/// The numeric id of an owner: a uid or gid, or a group name resolved by `groups` (numeric names are
/// numbers).
fn owner_id(id: &Owner, groups: GroupResolver) -> Result<u32> {
    match id {
        Owner::Id(n) => Ok(*n),
        Owner::Group(g) => {
            let s = g.to_string();
            match s.parse::<u32>() {
                Ok(n) => Ok(n),
                Err(_) => groups(&s),
            }
        }
    }
}

/// Lowers one rule. `groups` resolves group names (numeric strings are numbers).
/// Kept whole: one match arm per [`Item`], the item-to-expression table of §4.4 read side by side.
pub fn lower(items: &[Item], groups: GroupResolver) -> Result<Lowered> {
    let mut out = Lowered {
        exprs: Vec::new(),
        sets: Vec::new(),
    };
    let e = &mut out.exprs;
    let mut nfproto: Option<u8> = None;
    let mut l4: Option<u8> = None;
    for item in items {
        match item {
            Item::L4(p) => {
                e.extend([load_meta(META_L4PROTO), cmp(CMP_EQ, vec![p.number()])]);
                l4 = Some(p.number());
            }
            Item::Iif(x) | Item::Oif(x) => {
                let key = if matches!(item, Item::Iif(_)) {
                    META_IIFNAME
                } else {
                    META_OIFNAME
                };
                e.extend([load_meta(key), cmp(CMP_EQ, ifname(x.as_str()))]);
            }
            Item::Addr {
                saddr, neq, net, ..
            } => addr_match(e, &mut nfproto, *saddr, *neq, net),
            Item::Port {
                proto,
                dport,
                neq,
                port,
            } => port_match(
                e,
                &mut l4,
                proto.number(),
                if *dport { 2 } else { 0 },
                cmp(op(*neq), port.to_be_bytes().to_vec()),
            ),
            Item::PortSet { proto, neq, ports } => {
                let test = Expr::Lookup {
                    sreg: NFT_REG_1,
                    set: "__set%d".into(),
                    set_id: Some(out.sets.len() as u32),
                    flags: if *neq { LOOKUP_F_INV } else { 0 },
                };
                out.sets
                    .push(ports.iter().map(|p| p.to_be_bytes().to_vec()).collect());
                port_match(e, &mut l4, proto.number(), 2, test);
            }
            Item::Owner { gid, neq, id, .. } => {
                let key = if *gid { META_SKGID } else { META_SKUID };
                let n = owner_id(id, groups)?;
                e.extend([load_meta(key), cmp(op(*neq), n.to_ne_bytes().to_vec())]);
            }
            Item::Mark { neq, value } => {
                e.extend([
                    load_meta(META_MARK),
                    cmp(op(*neq), value.to_ne_bytes().to_vec()),
                ]);
            }
            Item::CtState(mask) => e.extend([
                load_ct(CT_STATE),
                and(mask.to_ne_bytes().to_vec()),
                cmp(CMP_NEQ, vec![0; 4]),
            ]),
            Item::CtMark(m) => e.extend([load_ct(CT_MARK), cmp(CMP_EQ, m.to_ne_bytes().to_vec())]),
            Item::Counter => e.push(Expr::Counter),
            Item::Return => e.push(verdict(NFT_RETURN, None)),
            Item::Accept => e.push(verdict(NF_ACCEPT, None)),
            Item::Drop => e.push(verdict(NF_DROP, None)),
            Item::Jump(c) => e.push(verdict(NFT_JUMP, Some(c.to_string()))),
            Item::Redirect(p) => e.extend([
                value(p.to_be_bytes().to_vec()),
                Expr::Redir {
                    reg_min: NFT_REG_1,
                    flags: NAT_RANGE_PROTO_SPECIFIED,
                },
            ]),
            Item::Tproxy { v6, port } => e.extend([
                value(port.to_be_bytes().to_vec()),
                Expr::Tproxy {
                    family: u32::from(if *v6 { NFPROTO_IPV6 } else { NFPROTO_IPV4 }),
                    reg_port: NFT_REG_1,
                },
            ]),
            Item::SetMark(m) => e.extend([value(m.to_ne_bytes().to_vec()), set_meta(META_MARK)]),
            Item::SetMarkFromCt => e.extend([load_ct(CT_MARK), set_meta(META_MARK)]),
            Item::SetCtMarkFromMark => e.extend([load_meta(META_MARK), set_ct(CT_MARK)]),
            Item::SetCtZone(z) => e.extend([value(z.to_ne_bytes().to_vec()), set_ct(CT_ZONE)]),
        }
    }
    Ok(out)
}

/// Rejects a group name the resolver cannot map (used when no NSS lookup is wanted, e.g. in tests).
pub fn no_groups(name: &str) -> Result<u32> {
    Err(Error::other(format!("unknown group {name:?}")))
}
