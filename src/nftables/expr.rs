//! Kernel expressions (nf_tables.h) and the lowering of a rule's [`Item`]s to them (spec nftables.md §4.4),
//! including the implicit dependencies nft adds in an `inet` table (`meta nfproto` before `ip`/`ip6`
//! matches, `meta l4proto` before port matches, once per rule) and the prefix encodings of §4.5.
//! Byte order follows the kernel: ports and addresses in network order; uid/gid/mark/ct values in host
//! order.

use super::model::{Item, Owner};
use crate::error::{Error, Result};
use ipnet::IpNet;

pub const NFT_REG_VERDICT: u32 = 0;
pub const NFT_REG_1: u32 = 1;

pub const META_MARK: u32 = 3;
pub const META_IIFNAME: u32 = 6;
pub const META_OIFNAME: u32 = 7;
pub const META_SKUID: u32 = 10;
pub const META_SKGID: u32 = 11;
pub const META_NFPROTO: u32 = 15;
pub const META_L4PROTO: u32 = 16;
pub const CT_STATE: u32 = 0;
pub const CT_MARK: u32 = 3;
pub const CT_ZONE: u32 = 17;
pub const CMP_EQ: u32 = 0;
pub const CMP_NEQ: u32 = 1;
pub const PAYLOAD_NETWORK: u32 = 1;
pub const PAYLOAD_TRANSPORT: u32 = 2;
pub const NF_DROP: i32 = 0;
pub const NF_ACCEPT: i32 = 1;
pub const NFT_JUMP: i32 = -3;
pub const NFT_RETURN: i32 = -5;
pub const NFPROTO_IPV4: u8 = 2;
pub const NFPROTO_IPV6: u8 = 10;
/// `NF_NAT_RANGE_PROTO_SPECIFIED`.
pub const NAT_RANGE_PROTO_SPECIFIED: u32 = 2;
pub const LOOKUP_F_INV: u32 = 1;

/// Register data: a value, or a verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Data {
    Value(Vec<u8>),
    Verdict { code: i32, chain: Option<String> },
}

/// One kernel expression, as sent and as dumped (after [`super::decode`] drops what dumps add).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expr {
    /// `meta load KEY => reg`
    Meta {
        key: u32,
        dreg: u32,
    },
    /// `meta set KEY with reg`
    MetaSet {
        key: u32,
        sreg: u32,
    },
    Cmp {
        sreg: u32,
        op: u32,
        data: Vec<u8>,
    },
    Payload {
        dreg: u32,
        base: u32,
        offset: u32,
        len: u32,
    },
    Bitwise {
        sreg: u32,
        dreg: u32,
        len: u32,
        mask: Vec<u8>,
        xor: Vec<u8>,
    },
    /// A set lookup; `set` is the set's name (`__set%d` when sent), `set_id` links it to a set of the
    /// same batch.
    Lookup {
        sreg: u32,
        set: String,
        set_id: Option<u32>,
        flags: u32,
    },
    Immediate {
        dreg: u32,
        data: Data,
    },
    Counter,
    Redir {
        reg_min: u32,
        flags: u32,
    },
    Tproxy {
        family: u32,
        reg_port: u32,
    },
    /// `ct load KEY => reg`
    Ct {
        key: u32,
        dreg: u32,
    },
    /// `ct set KEY with reg`
    CtSet {
        key: u32,
        sreg: u32,
    },
    /// An expression this module does not model (from a dump): its name.
    Other(String),
}

impl Expr {
    /// The kernel's name of the expression type (`NFTA_EXPR_NAME`).
    pub fn name(&self) -> &str {
        match self {
            Expr::Meta { .. } | Expr::MetaSet { .. } => "meta",
            Expr::Cmp { .. } => "cmp",
            Expr::Payload { .. } => "payload",
            Expr::Bitwise { .. } => "bitwise",
            Expr::Lookup { .. } => "lookup",
            Expr::Immediate { .. } => "immediate",
            Expr::Counter => "counter",
            Expr::Redir { .. } => "redir",
            Expr::Tproxy { .. } => "tproxy",
            Expr::Ct { .. } | Expr::CtSet { .. } => "ct",
            Expr::Other(n) => n,
        }
    }
}

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
/// (0 source, 2 destination) into register 1.
fn load_port(e: &mut Vec<Expr>, l4: &mut Option<u8>, proto: u8, offset: u32) {
    if *l4 != Some(proto) {
        e.push(load_meta(META_L4PROTO));
        e.push(cmp(CMP_EQ, vec![proto]));
        *l4 = Some(proto);
    }
    e.push(Expr::Payload {
        dreg: NFT_REG_1,
        base: PAYLOAD_TRANSPORT,
        offset,
        len: 2,
    });
}

/// Lowers one rule. `groups` resolves group names (numeric strings are numbers).
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
                e.push(load_meta(META_L4PROTO));
                e.push(cmp(CMP_EQ, vec![p.number()]));
                l4 = Some(p.number());
            }
            Item::Iif(x) | Item::Oif(x) => {
                let key = if matches!(item, Item::Iif(_)) {
                    META_IIFNAME
                } else {
                    META_OIFNAME
                };
                e.push(load_meta(key));
                e.push(cmp(CMP_EQ, ifname(x.as_str())));
            }
            Item::Addr {
                saddr, neq, net, ..
            } => {
                let (fam, offset, full) = match net {
                    IpNet::V4(_) => (NFPROTO_IPV4, if *saddr { 12 } else { 16 }, 4u32),
                    IpNet::V6(_) => (NFPROTO_IPV6, if *saddr { 8 } else { 24 }, 16u32),
                };
                if nfproto != Some(fam) {
                    e.push(load_meta(META_NFPROTO));
                    e.push(cmp(CMP_EQ, vec![fam]));
                    nfproto = Some(fam);
                }
                let (network, mask): (Vec<u8>, Vec<u8>) = match net.trunc() {
                    IpNet::V4(n) => (n.network().octets().to_vec(), n.netmask().octets().to_vec()),
                    IpNet::V6(n) => (n.network().octets().to_vec(), n.netmask().octets().to_vec()),
                };
                let bits = u32::from(net.prefix_len());
                if bits % 8 == 0 {
                    let len = bits / 8;
                    e.push(Expr::Payload {
                        dreg: NFT_REG_1,
                        base: PAYLOAD_NETWORK,
                        offset,
                        len,
                    });
                    e.push(cmp(op(*neq), network[..len as usize].to_vec()));
                } else {
                    e.push(Expr::Payload {
                        dreg: NFT_REG_1,
                        base: PAYLOAD_NETWORK,
                        offset,
                        len: full,
                    });
                    e.push(Expr::Bitwise {
                        sreg: NFT_REG_1,
                        dreg: NFT_REG_1,
                        len: full,
                        mask,
                        xor: vec![0; full as usize],
                    });
                    e.push(cmp(op(*neq), network));
                }
            }
            Item::Port {
                proto,
                dport,
                neq,
                port,
            } => {
                load_port(e, &mut l4, proto.number(), if *dport { 2 } else { 0 });
                e.push(cmp(op(*neq), port.to_be_bytes().to_vec()));
            }
            Item::PortSet { proto, neq, ports } => {
                load_port(e, &mut l4, proto.number(), 2);
                let id = out.sets.len() as u32;
                out.sets
                    .push(ports.iter().map(|p| p.to_be_bytes().to_vec()).collect());
                e.push(Expr::Lookup {
                    sreg: NFT_REG_1,
                    set: "__set%d".into(),
                    set_id: Some(id),
                    flags: if *neq { LOOKUP_F_INV } else { 0 },
                });
            }
            Item::Owner { gid, neq, id, .. } => {
                let n = match id {
                    Owner::Id(n) => *n,
                    Owner::Group(g) => {
                        let s = g.to_string();
                        match s.parse::<u32>() {
                            Ok(n) => n,
                            Err(_) => groups(&s)?,
                        }
                    }
                };
                e.push(load_meta(if *gid { META_SKGID } else { META_SKUID }));
                e.push(cmp(op(*neq), n.to_ne_bytes().to_vec()));
            }
            Item::Mark { neq, value } => {
                e.push(load_meta(META_MARK));
                e.push(cmp(op(*neq), value.to_ne_bytes().to_vec()));
            }
            Item::CtState(mask) => {
                e.push(Expr::Ct {
                    key: CT_STATE,
                    dreg: NFT_REG_1,
                });
                e.push(Expr::Bitwise {
                    sreg: NFT_REG_1,
                    dreg: NFT_REG_1,
                    len: 4,
                    mask: mask.to_ne_bytes().to_vec(),
                    xor: vec![0; 4],
                });
                e.push(cmp(CMP_NEQ, vec![0; 4]));
            }
            Item::CtMark(m) => {
                e.push(Expr::Ct {
                    key: CT_MARK,
                    dreg: NFT_REG_1,
                });
                e.push(cmp(CMP_EQ, m.to_ne_bytes().to_vec()));
            }
            Item::Counter => e.push(Expr::Counter),
            Item::Return => e.push(verdict(NFT_RETURN, None)),
            Item::Accept => e.push(verdict(NF_ACCEPT, None)),
            Item::Drop => e.push(verdict(NF_DROP, None)),
            Item::Jump(c) => e.push(verdict(NFT_JUMP, Some(c.to_string()))),
            Item::Redirect(p) => {
                e.push(value(p.to_be_bytes().to_vec()));
                e.push(Expr::Redir {
                    reg_min: NFT_REG_1,
                    flags: NAT_RANGE_PROTO_SPECIFIED,
                });
            }
            Item::Tproxy { v6, port } => {
                e.push(value(port.to_be_bytes().to_vec()));
                e.push(Expr::Tproxy {
                    family: u32::from(if *v6 { NFPROTO_IPV6 } else { NFPROTO_IPV4 }),
                    reg_port: NFT_REG_1,
                });
            }
            Item::SetMark(m) => {
                e.push(value(m.to_ne_bytes().to_vec()));
                e.push(Expr::MetaSet {
                    key: META_MARK,
                    sreg: NFT_REG_1,
                });
            }
            Item::SetMarkFromCt => {
                e.push(Expr::Ct {
                    key: CT_MARK,
                    dreg: NFT_REG_1,
                });
                e.push(Expr::MetaSet {
                    key: META_MARK,
                    sreg: NFT_REG_1,
                });
            }
            Item::SetCtMarkFromMark => {
                e.push(load_meta(META_MARK));
                e.push(Expr::CtSet {
                    key: CT_MARK,
                    sreg: NFT_REG_1,
                });
            }
            Item::SetCtZone(z) => {
                e.push(value(z.to_ne_bytes().to_vec()));
                e.push(Expr::CtSet {
                    key: CT_ZONE,
                    sreg: NFT_REG_1,
                });
            }
        }
    }
    Ok(out)
}

/// The kernel module an expression needs beyond `nf_tables` itself (spec §4.8), for error messages.
pub fn module_of(e: &Expr) -> Option<&'static str> {
    match e {
        Expr::Tproxy { .. } => Some("nft_tproxy"),
        Expr::Redir { .. } => Some("nft_redir"),
        Expr::Ct { .. } | Expr::CtSet { .. } => Some("nft_ct"),
        _ => None,
    }
}

/// Rejects a group name the resolver cannot map (used when no NSS lookup is wanted, e.g. in tests).
pub fn no_groups(name: &str) -> Result<u32> {
    Err(Error::other(format!("unknown group {name:?}")))
}
