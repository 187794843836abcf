//! One model rule as iptables-nft 1.8.7 encodes it (pure), the encoding every tested iptables-nft
//! (1.8.7, 1.8.9, 1.8.11) prints back exactly (research for issue 40, §4): `-i`, `-o`, `-p` (meta l4proto),
//! `-s`, `-d` as native expressions in that order, then the `-m` matches in rule order as compatibility
//! expressions (ports as `match tcp|udp` revision 0, `-m mark` as `match mark` revision 1), a `counter`,
//! then the verdict (`immediate`) or the target extension.

use super::compat::{self, Ext};
use super::xexpr::XExpr;
use crate::error::{Error, Result};
use crate::netfilter::{Family, NF_ACCEPT, NF_DROP};
use crate::nftables::expr::{
    Data, Expr, CMP_EQ, CMP_NEQ, META_IIFNAME, META_L4PROTO, META_OIFNAME, NFT_JUMP, NFT_REG_1,
    NFT_REG_VERDICT, NFT_RETURN, PAYLOAD_NETWORK,
};
use crate::xtables::rule::{Match, Neg, Rule, Target, TCP, UDP};
use ipnet::IpNet;

fn cmp(inv: bool, data: Vec<u8>) -> XExpr {
    XExpr::Native(Expr::Cmp {
        sreg: NFT_REG_1,
        op: if inv { CMP_NEQ } else { CMP_EQ },
        data,
    })
}

fn meta(key: u32) -> XExpr {
    XExpr::Native(Expr::Meta {
        key,
        dreg: NFT_REG_1,
    })
}

/// `-i`/`-o`: the name with its NUL (`strlen + 1` bytes); a trailing `+` (prefix wildcard) drops both.
fn iface(out: &mut Vec<XExpr>, key: u32, n: &Neg<String>) {
    let mut data = n.value.as_bytes().to_vec();
    if data.last() == Some(&b'+') {
        data.pop();
    } else {
        data.push(0);
    }
    out.push(meta(key));
    out.push(cmp(n.inv, data));
}

/// Where an address is in the network header: `(saddr offset, daddr offset)`.
pub fn addr_offsets(family: Family) -> (u32, u32) {
    match family {
        Family::V4 => (12, 16),
        Family::V6 => (8, 24),
    }
}

/// `-s`/`-d`: a payload of the prefix's whole bytes, or of the whole address with a `bitwise` mask when the
/// prefix is not a multiple of 8; `0.0.0.0/0` (not negated) is no match at all.
fn addr(out: &mut Vec<XExpr>, offset: u32, n: &Neg<IpNet>) -> Result<()> {
    let net = n.value.trunc();
    let (bytes, mask) = match net {
        IpNet::V4(v) => (v.addr().octets().to_vec(), v.netmask().octets().to_vec()),
        IpNet::V6(v) => (v.addr().octets().to_vec(), v.netmask().octets().to_vec()),
    };
    let plen = net.prefix_len() as usize;
    if plen == 0 {
        return match n.inv {
            false => Ok(()),
            true => Err(Error::Rules(format!(
                "iptables-nft: `! {net}` matches nothing; not encodable"
            ))),
        };
    }
    let len = if plen % 8 == 0 { plen / 8 } else { bytes.len() };
    out.push(XExpr::Native(Expr::Payload {
        dreg: NFT_REG_1,
        base: PAYLOAD_NETWORK,
        offset,
        len: len as u32,
    }));
    if plen % 8 != 0 {
        out.push(XExpr::Native(Expr::Bitwise {
            sreg: NFT_REG_1,
            dreg: NFT_REG_1,
            len: len as u32,
            mask,
            xor: vec![0; len],
        }));
    }
    out.push(cmp(n.inv, bytes[..len].to_vec()));
    Ok(())
}

fn verdict(code: i32, chain: Option<String>) -> XExpr {
    XExpr::Native(Expr::Immediate {
        dreg: NFT_REG_VERDICT,
        data: Data::Verdict { code, chain },
    })
}

fn unencodable(what: &str) -> Error {
    Error::Rules(format!("iptables-nft: cannot encode {what}"))
}

/// The rule's expressions, in iptables-nft 1.8.7's order.
pub fn encode(family: Family, r: &Rule) -> Result<Vec<XExpr>> {
    for n in [&r.src, &r.dst].into_iter().flatten() {
        if matches!(
            (family, n.value),
            (Family::V4, IpNet::V6(_)) | (Family::V6, IpNet::V4(_))
        ) {
            let what = format!("address {} in an {} rule", n.value, family.name());
            return Err(unencodable(&what));
        }
    }
    let mut out = Vec::with_capacity(8);
    if let Some(n) = &r.iif {
        iface(&mut out, META_IIFNAME, n);
    }
    if let Some(n) = &r.oif {
        iface(&mut out, META_OIFNAME, n);
    }
    if let Some(p) = r.proto {
        out.push(meta(META_L4PROTO));
        out.push(cmp(false, vec![p]));
    }
    let (so, dof) = addr_offsets(family);
    if let Some(n) = &r.src {
        addr(&mut out, so, n)?;
    }
    if let Some(n) = &r.dst {
        addr(&mut out, dof, n)?;
    }
    for m in &r.matches {
        let ext = match m {
            Match::Port { dir, port, inv } => {
                let proto = match r.proto {
                    Some(TCP) => "tcp",
                    Some(UDP) => "udp",
                    _ => return Err(unencodable("a port match without `-p tcp` or `-p udp`")),
                };
                compat::port(proto, *dir, *port, *inv)
            }
            Match::Multiport { ports, .. } if ports.is_empty() || ports.len() > 15 => {
                return Err(unencodable("a multiport match without 1 to 15 ports"))
            }
            Match::Other(t) => return Err(unencodable(&format!("the match `{t}`"))),
            m => compat::match_ext(m).ok_or_else(|| unencodable("a match"))?,
        };
        out.push(XExpr::Match(ext));
    }
    out.push(XExpr::Native(Expr::Counter));
    match &r.target {
        Target::None => {}
        Target::Accept => out.push(verdict(NF_ACCEPT, None)),
        Target::Drop => out.push(verdict(NF_DROP, None)),
        Target::Return => out.push(verdict(NFT_RETURN, None)),
        Target::Jump(c) => out.push(verdict(NFT_JUMP, Some(c.clone()))),
        Target::Other(t) => return Err(unencodable(&format!("the target `{t}`"))),
        t => {
            let ext: Ext = compat::target_ext(t, family).ok_or_else(|| unencodable("a target"))?;
            out.push(XExpr::Target(ext));
        }
    }
    Ok(out)
}
