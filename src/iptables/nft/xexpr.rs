//! A rule's expressions as iptables-nft writes them: the nftables codec's native [`Expr`]s plus the x_tables
//! compatibility `match` / `target` expressions, encoded into and decoded from `NFTA_RULE_EXPRESSIONS`
//! (pure). Attribute order is libnftnl's (name, revision, info; a counter's bytes then packets, zero).

use super::compat::Ext;
use crate::error::Result;
use crate::nftables::decode;
use crate::nftables::encode::{expr_attrs, Attrs, NFTA_EXPR_DATA, NFTA_EXPR_NAME, NFTA_LIST_ELEM};
use crate::nftables::expr::Expr;

/// `NFTA_MATCH_*` / `NFTA_TARGET_*` (same numbers), `NFTA_COUNTER_*`.
const NFTA_XT_NAME: u16 = 1;
const NFTA_XT_REV: u16 = 2;
const NFTA_XT_INFO: u16 = 3;
const NFTA_COUNTER_BYTES: u16 = 1;
const NFTA_COUNTER_PACKETS: u16 = 2;

/// One expression of an iptables-nft rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum XExpr {
    Native(Expr),
    Match(Ext),
    Target(Ext),
    /// An expression that could not be decoded at all: its name, or what was wrong.
    Broken(String),
}

fn one(e: &XExpr, a: &mut Attrs) {
    let (name, ext) = match e {
        XExpr::Native(n) => (n.name(), None),
        XExpr::Match(x) => ("match", Some(x)),
        XExpr::Target(x) => ("target", Some(x)),
        XExpr::Broken(n) => (n.as_str(), None),
    };
    a.str(NFTA_EXPR_NAME, name);
    a.nest(NFTA_EXPR_DATA, |d| match (e, ext) {
        (_, Some(x)) => {
            d.str(NFTA_XT_NAME, &x.name)
                .be32(NFTA_XT_REV, x.rev)
                .put(NFTA_XT_INFO, &x.info);
        }
        (XExpr::Native(Expr::Counter), _) => {
            d.put(NFTA_COUNTER_BYTES, &[0; 8])
                .put(NFTA_COUNTER_PACKETS, &[0; 8]);
        }
        (XExpr::Native(n), _) => expr_attrs(n, d),
        _ => {}
    });
}

/// `NFTA_RULE_EXPRESSIONS` (attribute 4) holding `exprs`.
pub fn encode(exprs: &[XExpr], a: &mut Attrs) {
    a.nest(crate::nftables::encode::NFTA_RULE_EXPRESSIONS, |l| {
        for e in exprs {
            l.nest(NFTA_LIST_ELEM, |el| one(e, el));
        }
    });
}

/// The payload of `NFTA_RULE_EXPRESSIONS` back into expressions. Never fails on content: an element that
/// cannot be read becomes [`XExpr::Broken`]; only a list whose attribute framing is wrong is an error.
pub fn decode(list: &[u8]) -> Result<Vec<XExpr>> {
    let mut out = Vec::new();
    for (t, p) in decode::attrs(list)? {
        if t == NFTA_LIST_ELEM {
            out.push(element(p));
        }
    }
    Ok(out)
}

fn element(p: &[u8]) -> XExpr {
    let Ok(a) = decode::attrs(p) else {
        return XExpr::Broken("malformed expression".into());
    };
    let find = |a: &[(u16, &[u8])], ty| a.iter().find(|(t, _)| *t == ty).map(|(_, v)| v.to_vec());
    let name = find(&a, NFTA_EXPR_NAME)
        .map(|n| decode::string(&n))
        .unwrap_or_default();
    if name == "match" || name == "target" {
        let d = find(&a, NFTA_EXPR_DATA).unwrap_or_default();
        let Ok(d) = decode::attrs(&d) else {
            return XExpr::Broken(format!("malformed {name} expression"));
        };
        let rev = find(&d, NFTA_XT_REV).and_then(|r| {
            r.get(..4)
                .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
        });
        let (Some(xname), Some(rev)) = (find(&d, NFTA_XT_NAME), rev) else {
            return XExpr::Broken(format!("{name} expression without a name or revision"));
        };
        let x = Ext {
            name: decode::string(&xname),
            rev,
            info: find(&d, NFTA_XT_INFO).unwrap_or_default(),
        };
        return if name == "match" {
            XExpr::Match(x)
        } else {
            XExpr::Target(x)
        };
    }
    match decode::expr(p) {
        Ok(e) => XExpr::Native(e),
        Err(_) if name.is_empty() => XExpr::Broken("expression without a name".into()),
        Err(_) => XExpr::Broken(format!("{name} expression of another form")),
    }
}
