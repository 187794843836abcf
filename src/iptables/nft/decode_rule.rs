//! One iptables-nft rule's expressions back into the model (pure), whichever iptables-nft wrote it: 1.8.7
//! (compatibility `tcp`/`udp`/`mark` matches), 1.8.9 (native ports `payload @th` + `cmp`, native mark `meta
//! mark` + `cmp`) or 1.8.11 (`-p` as `payload @nh+9` for IPv4, header matches in another order, research
//! for issue 40, §4). Never fails: what is not understood becomes a [`Match::Other`] / [`Target::Other`]
//! naming it, so such a rule never equals one of ours.

use super::compat::{self, describe};
use super::encode_rule::addr_offsets;
use super::xexpr::XExpr;
use crate::netfilter::{Family, NF_ACCEPT, NF_DROP};
use crate::nftables::expr::{
    Data, Expr, CMP_EQ, CMP_NEQ, META_IIFNAME, META_L4PROTO, META_MARK, META_OIFNAME, NFT_JUMP,
    NFT_REG_1, NFT_REG_VERDICT, NFT_RETURN, PAYLOAD_NETWORK, PAYLOAD_TRANSPORT,
};
use crate::nftables::foreign::HARMLESS;
use crate::xtables::rule::{Match, Neg, PortDir, Rule, Target, TCP, UDP};
use ipnet::IpNet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The `cmp eq|neq reg 1` at `i`: `(negated, data)`.
fn cmp_at(ex: &[XExpr], i: usize) -> Option<(bool, &[u8])> {
    match ex.get(i)? {
        XExpr::Native(Expr::Cmp { sreg, op, data }) if *sreg == NFT_REG_1 => match *op {
            CMP_EQ => Some((false, data)),
            CMP_NEQ => Some((true, data)),
            _ => None,
        },
        _ => None,
    }
}

/// The `bitwise reg 1 = (reg 1 & mask) ^ 0` of `len` bytes at `i`: its mask.
fn mask_at(ex: &[XExpr], i: usize, len: u32) -> Option<&[u8]> {
    match ex.get(i)? {
        XExpr::Native(Expr::Bitwise {
            sreg,
            dreg,
            len: l,
            mask,
            xor,
        }) if *sreg == NFT_REG_1
            && *dreg == NFT_REG_1
            && *l == len
            && mask.len() == len as usize
            && xor.iter().all(|&b| b == 0) =>
        {
            Some(mask)
        }
        _ => None,
    }
}

fn iface(data: &[u8]) -> Option<String> {
    let name = match data.split_last()? {
        (0, name) => std::str::from_utf8(name).ok()?.to_string(),
        _ => format!("{}+", std::str::from_utf8(data).ok()?),
    };
    let ok = !name.is_empty() && name.len() <= 16 && !name.contains('\0');
    ok.then_some(name)
}

/// `-s`/`-d` from the payload's length, the optional mask and the compared bytes.
fn addr(family: Family, len: u32, mask: Option<&[u8]>, data: &[u8]) -> Option<IpNet> {
    let full = match family {
        Family::V4 => 4,
        Family::V6 => 16,
    };
    if data.len() != len as usize || len as usize > full || len == 0 {
        return None;
    }
    let prefix = match mask {
        None => len * 8,
        Some(m) => {
            let ones: u32 = m.iter().map(|b| b.count_ones()).sum();
            let contiguous = m.iter().enumerate().all(|(i, &b)| {
                let want = (ones as usize).saturating_sub(i * 8).min(8) as u32;
                b == (0xffu16 << (8 - want)) as u8
            });
            // A zero mask matches every address: not a `-s`/`-d` iptables writes.
            if len as usize != full || !contiguous || ones == 0 {
                return None;
            }
            ones
        }
    };
    let mut b = [0u8; 16];
    b[..data.len()].copy_from_slice(data);
    let a = match family {
        Family::V4 => IpAddr::V4(Ipv4Addr::new(b[0], b[1], b[2], b[3])),
        Family::V6 => IpAddr::V6(Ipv6Addr::from(b)),
    };
    let net = IpNet::new(a, prefix as u8).ok()?;
    // The compared bytes are the masked address.
    (net.trunc() == net).then_some(net)
}

struct Decoder {
    family: Family,
    r: Rule,
    /// Port matches with the protocol their encoding named (`None`: native, takes the rule's).
    ports: Vec<(usize, Option<String>)>,
    has_target: bool,
    /// An expression iptables does not write as a match: it may act on the packet (a native `notrack`,
    /// `ct set`, `meta set`, NAT, ...), so the rule is never read as one that only matches.
    acts: bool,
}

impl Decoder {
    fn other(&mut self, what: String) {
        self.r.matches.push(Match::Other(what));
    }

    fn set<T>(slot: &mut Option<T>, v: T) -> bool {
        let was = slot.is_none();
        if was {
            *slot = Some(v);
        }
        was
    }

    /// The native pair (or triple) at `i`; how many expressions it took, 0 when it is none we know. Kept
    /// whole: one arm per expression sequence iptables-nft writes natively (payload + cmp for addresses,
    /// meta for interfaces and protocol, ...), the table of issue 40's research read side by side.
    fn native(&mut self, ex: &[XExpr], i: usize) -> usize {
        let Some(XExpr::Native(e)) = ex.get(i) else {
            return 0;
        };
        match *e {
            Expr::Meta { key, dreg } if dreg == NFT_REG_1 => {
                if key == META_MARK {
                    let mask = mask_at(ex, i + 1, 4);
                    let at = i + 1 + mask.is_some() as usize;
                    return match (cmp_at(ex, at), mask) {
                        (Some((inv, d)), m) if d.len() == 4 => {
                            let mark = u32::from_ne_bytes([d[0], d[1], d[2], d[3]]);
                            let mask = m
                                .map_or(u32::MAX, |m| u32::from_ne_bytes([m[0], m[1], m[2], m[3]]));
                            self.r.matches.push(Match::Mark { mark, mask, inv });
                            at + 1 - i
                        }
                        _ => 0,
                    };
                }
                let Some((inv, d)) = cmp_at(ex, i + 1) else {
                    return 0;
                };
                let ok = match key {
                    META_IIFNAME | META_OIFNAME => match iface(d) {
                        Some(n) if key == META_IIFNAME => {
                            Self::set(&mut self.r.iif, Neg { inv, value: n })
                        }
                        Some(n) => Self::set(&mut self.r.oif, Neg { inv, value: n }),
                        None => false,
                    },
                    META_L4PROTO if !inv && d.len() == 1 => Self::set(&mut self.r.proto, d[0]),
                    _ => false,
                };
                if ok {
                    2
                } else {
                    0
                }
            }
            Expr::Payload {
                dreg,
                base,
                offset,
                len,
            } if dreg == NFT_REG_1 => {
                let mask = mask_at(ex, i + 1, len);
                let at = i + 1 + mask.is_some() as usize;
                let Some((inv, d)) = cmp_at(ex, at) else {
                    return 0;
                };
                let (so, dof) = addr_offsets(self.family);
                let ok = match (base, offset) {
                    (PAYLOAD_NETWORK, 9) if self.family == Family::V4 => {
                        let one = len == 1 && d.len() == 1 && mask.is_none() && !inv;
                        one && Self::set(&mut self.r.proto, d[0])
                    }
                    (PAYLOAD_NETWORK, o) if o == so || o == dof => {
                        match addr(self.family, len, mask, d) {
                            Some(value) if o == so => {
                                Self::set(&mut self.r.src, Neg { inv, value })
                            }
                            Some(value) => Self::set(&mut self.r.dst, Neg { inv, value }),
                            None => false,
                        }
                    }
                    (PAYLOAD_TRANSPORT, 0 | 2) if len == 2 && d.len() == 2 && mask.is_none() => {
                        let dir = if offset == 0 {
                            PortDir::Src
                        } else {
                            PortDir::Dst
                        };
                        let port = u16::from_be_bytes([d[0], d[1]]);
                        self.ports.push((self.r.matches.len(), None));
                        self.r.matches.push(Match::Port { dir, port, inv });
                        true
                    }
                    _ => false,
                };
                if ok {
                    at + 1 - i
                } else {
                    0
                }
            }
            _ => 0,
        }
    }

    fn verdict(&mut self, e: &Expr) -> Option<Target> {
        let Expr::Immediate {
            dreg: NFT_REG_VERDICT,
            data: Data::Verdict { code, chain },
        } = e
        else {
            return None;
        };
        Some(match (*code, chain) {
            (NF_ACCEPT, None) => Target::Accept,
            (NF_DROP, None) => Target::Drop,
            (NFT_RETURN, None) => Target::Return,
            (NFT_JUMP, Some(c)) => Target::Jump(c.clone()),
            _ => Target::Other(format!("nft verdict {e}")),
        })
    }

    fn target(&mut self, t: Target) {
        if self.has_target {
            self.other(format!("a second target ({t:?})"));
        } else {
            self.r.target = t;
            self.has_target = true;
        }
    }
}

/// The model of one rule of `family` from its expressions.
pub fn decode(family: Family, ex: &[XExpr]) -> Rule {
    let mut d = Decoder {
        family,
        r: Rule::any(),
        ports: Vec::new(),
        has_target: false,
        acts: false,
    };
    let mut i = 0;
    while i < ex.len() {
        if d.has_target && !matches!(ex[i], XExpr::Native(Expr::Counter)) {
            // A compatibility target that answers "continue" (`LOG`, `MARK`, ...) lets the kernel run
            // what follows it in the rule: a native write, NAT, a second verdict or jump, anything. The
            // rule is then not what its target says (fail closed: after a verdict nothing runs, but
            // iptables never writes that either).
            d.other(format!("{} after the target", text(&ex[i])));
            d.acts = true;
            i += 1;
            continue;
        }
        let took = d.native(ex, i);
        if took > 0 {
            i += took;
            continue;
        }
        match &ex[i] {
            XExpr::Native(Expr::Counter) => {}
            XExpr::Native(e) => match d.verdict(e) {
                Some(t) => d.target(t),
                // Only reads or matches (iptables-nft writes `--dport 1000:2000` as a payload load and a
                // `range`, `-m limit` as `limit`): kept, never equal to ours; what could act on a register
                // loaded here (a write, NAT, a map) is named on its own.
                None if only_reads(e) => d.other(text(&ex[i])),
                None => {
                    d.other(text(&ex[i]));
                    d.acts = true;
                }
            },
            XExpr::Match(x) => match compat::read_match(x) {
                Some(m) => {
                    if matches!(m, Match::Port { .. }) {
                        d.ports.push((d.r.matches.len(), Some(x.name.clone())));
                    }
                    d.r.matches.push(m);
                }
                None => d.other(describe("match", x)),
            },
            XExpr::Target(x) => {
                let t = compat::read_target(x, family)
                    .unwrap_or_else(|| Target::Other(describe("target", x)));
                d.target(t);
            }
            XExpr::Broken(what) => {
                d.other(what.clone());
                d.acts = true;
            }
        }
        i += 1;
    }
    // A port match compares the protocol `-p` names: tcp or udp, and the same as a compat match's.
    let proto = match d.r.proto {
        Some(TCP) => Some("tcp"),
        Some(UDP) => Some("udp"),
        _ => None,
    };
    for (at, name) in std::mem::take(&mut d.ports) {
        let ok = proto.is_some() && name.as_deref().map_or(true, |n| Some(n) == proto);
        if !ok {
            let was = format!("{:?}", d.r.matches[at]);
            d.r.matches[at] = Match::Other(format!("{was} without its protocol's -p"));
        }
    }
    if d.acts {
        let then = match &d.r.target {
            Target::None => "no verdict".to_string(),
            t => format!("{t:?}"),
        };
        d.r.target = Target::Other(format!("{MAY_ACT}; then {then})"));
    }
    d.r
}

/// Whether `e` (one [`Decoder::native`] did not take) only loads into a register or matches.
fn only_reads(e: &Expr) -> bool {
    match e {
        Expr::Payload { .. } | Expr::Meta { .. } | Expr::Bitwise { .. } | Expr::Cmp { .. } => true,
        Expr::Other(n) => HARMLESS.contains(&n.as_str()),
        _ => false,
    }
}

/// How a rule holding an expression iptables never writes as a match reads: its target, whatever the rule's
/// verdict ([`acts`]).
pub const MAY_ACT: &str = "-j ?(may act on the packet";

/// Whether the rule holds an expression iptables never writes as a match (a native `notrack`, a payload
/// write, NAT, anything unknown): it may act on the packet, and iptables-save may not show it.
pub fn acts(r: &Rule) -> bool {
    matches!(&r.target, Target::Other(t) if t.starts_with(MAY_ACT))
}

fn text(e: &XExpr) -> String {
    match e {
        XExpr::Native(n) => format!("nft expression {n}"),
        XExpr::Match(x) => describe("match", x),
        XExpr::Target(x) => describe("target", x),
        XExpr::Broken(w) => w.clone(),
    }
}
