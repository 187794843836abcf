//! Expression builders and the shape of a form case, shared by the iptables-nft codec's tests.

use super::compat::Ext;
use super::xexpr::XExpr;
use crate::netfilter::Family;
use crate::nftables::expr::{Data, Expr};
use crate::xtables::rule::*;

pub fn h(s: &str) -> Vec<u8> {
    let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

pub fn n(e: Expr) -> XExpr {
    XExpr::Native(e)
}
pub fn meta(key: u32) -> XExpr {
    n(Expr::Meta { key, dreg: 1 })
}
pub fn cmp(op: u32, data: &str) -> XExpr {
    n(Expr::Cmp {
        sreg: 1,
        op,
        data: h(data),
    })
}
pub fn pl(base: u32, offset: u32, len: u32) -> XExpr {
    n(Expr::Payload {
        dreg: 1,
        base,
        offset,
        len,
    })
}
pub fn bitwise(mask: &str) -> XExpr {
    let mask = h(mask);
    n(Expr::Bitwise {
        sreg: 1,
        dreg: 1,
        len: mask.len() as u32,
        xor: vec![0; mask.len()],
        mask,
    })
}
pub fn counter() -> XExpr {
    n(Expr::Counter)
}
pub fn verdict(code: i32, chain: Option<&str>) -> XExpr {
    n(Expr::Immediate {
        dreg: 0,
        data: Data::Verdict {
            code,
            chain: chain.map(str::to_string),
        },
    })
}
pub fn ext(name: &str, rev: u32, info: &str) -> Ext {
    Ext {
        name: name.into(),
        rev,
        info: h(info),
    }
}
pub fn mt(name: &str, rev: u32, info: &str) -> XExpr {
    XExpr::Match(ext(name, rev, info))
}
pub fn tg(name: &str, rev: u32, info: &str) -> XExpr {
    XExpr::Target(ext(name, rev, info))
}

pub fn neg<T>(inv: bool, value: T) -> Option<Neg<T>> {
    Some(Neg { inv, value })
}

pub const RET: i32 = -5;
pub const JUMP: i32 = -3;
pub const PROTO: u32 = 16;
pub const OIF: u32 = 7;
pub const IIF: u32 = 6;

/// `(family, rule, 1.8.7 encoding, other writers' encodings)`.
pub type Case = (Family, Rule, Vec<XExpr>, Vec<Vec<XExpr>>);

pub fn tcp() -> Rule {
    Rule {
        proto: Some(TCP),
        ..Rule::any()
    }
}
