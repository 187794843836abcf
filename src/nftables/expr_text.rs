//! A readable rendering of kernel expressions, close to `nft --debug=netlink` (data as plain hex bytes), for
//! CHECK's reports of unexpected rules and of foreign rules that run before ours.

use super::expr::*;
use crate::netfilter::{NFPROTO_IPV6, NF_ACCEPT, NF_DROP};

/// A dumped rule, one expression after the other.
pub fn describe(exprs: &[Expr]) -> String {
    let v: Vec<String> = exprs.iter().map(|e| e.to_string()).collect();
    v.join(" ")
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn meta_key(k: u32) -> String {
    match k {
        META_MARK => "mark".into(),
        META_IIFNAME => "iifname".into(),
        META_OIFNAME => "oifname".into(),
        META_SKUID => "skuid".into(),
        META_SKGID => "skgid".into(),
        META_NFPROTO => "nfproto".into(),
        META_L4PROTO => "l4proto".into(),
        k => format!("key{k}"),
    }
}

fn cmp_op(op: u32) -> &'static str {
    match op {
        CMP_EQ => "eq",
        CMP_NEQ => "neq",
        _ => "op",
    }
}

fn payload_base(base: u32) -> &'static str {
    match base {
        PAYLOAD_NETWORK => "network",
        PAYLOAD_TRANSPORT => "transport",
        _ => "other",
    }
}

fn ct_key(k: u32) -> String {
    match k {
        CT_STATE => "state".into(),
        CT_MARK => "mark".into(),
        CT_ZONE => "zone".into(),
        k => format!("key{k}"),
    }
}

impl std::fmt::Display for Expr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Expr::Meta { key, dreg } => write!(f, "[ meta load {} => reg {dreg} ]", meta_key(*key)),
            Expr::MetaSet { key, sreg } => {
                write!(f, "[ meta set {} with reg {sreg} ]", meta_key(*key))
            }
            Expr::Cmp { sreg, op, data } => {
                write!(f, "[ cmp {} reg {sreg} 0x{} ]", cmp_op(*op), hex(data))
            }
            Expr::Payload {
                dreg,
                base,
                offset,
                len,
            } => write!(
                f,
                "[ payload load {len}b @ {} header + {offset} => reg {dreg} ]",
                payload_base(*base)
            ),
            Expr::Bitwise {
                sreg,
                dreg,
                mask,
                xor,
                ..
            } => {
                write!(
                    f,
                    "[ bitwise reg {dreg} = ( reg {sreg} & 0x{} ) ^ 0x{} ]",
                    hex(mask),
                    hex(xor)
                )
            }
            Expr::Lookup {
                sreg, set, flags, ..
            } => write!(f, "[ lookup reg {sreg} set {set} 0x{flags:x} ]"),
            Expr::Immediate {
                dreg,
                data: Data::Value(v),
            } => write!(f, "[ immediate reg {dreg} 0x{} ]", hex(v)),
            Expr::Immediate {
                data: Data::Verdict { code, chain },
                ..
            } => {
                let v = match *code {
                    NF_DROP => "drop".to_string(),
                    NF_ACCEPT => "accept".to_string(),
                    NFT_JUMP => format!("jump -> {}", chain.as_deref().unwrap_or("?")),
                    NFT_GOTO => format!("goto -> {}", chain.as_deref().unwrap_or("?")),
                    NFT_RETURN => "return".to_string(),
                    c => format!("verdict {c}"),
                };
                write!(f, "[ immediate reg 0 {v} ]")
            }
            Expr::Counter => f.write_str("[ counter ]"),
            Expr::Redir { reg_min, .. } => write!(f, "[ redir proto_min reg {reg_min} ]"),
            Expr::Tproxy { family, reg_port } => {
                let fam = if *family == u32::from(NFPROTO_IPV6) {
                    "ip6"
                } else {
                    "ip"
                };
                write!(f, "[ tproxy {fam} port reg {reg_port} ]")
            }
            Expr::Ct { key, dreg } => write!(f, "[ ct load {} => reg {dreg} ]", ct_key(*key)),
            Expr::CtSet { key, sreg } => write!(f, "[ ct set {} with reg {sreg} ]", ct_key(*key)),
            Expr::Other(n) => write!(f, "[ {n} ]"),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::nftables::lower::{lower, no_groups};
    use crate::nftables::model::{Item, Proto};

    #[test]
    fn renders_like_nft_debug_netlink() {
        // spec §4.6: `meta l4proto tcp tcp dport 15008 counter return` (nft prints data as LE words).
        let items = [
            Item::L4(Proto::Tcp),
            crate::nftables::emit::tcp_dport(false, 15008),
            Item::Counter,
            Item::Return,
        ];
        let low = lower(&items, &no_groups).unwrap();
        let text: Vec<String> = low.exprs.iter().map(|e| e.to_string()).collect();
        assert_eq!(
            text,
            [
                "[ meta load l4proto => reg 1 ]",
                "[ cmp eq reg 1 0x06 ]",
                "[ payload load 2b @ transport header + 2 => reg 1 ]",
                "[ cmp eq reg 1 0x3aa0 ]",
                "[ counter ]",
                "[ immediate reg 0 return ]"
            ]
        );
    }
}
