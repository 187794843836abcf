//! Pure netlink encoding (spec nftables.md §4): constants, attributes, expressions, messages and dump
//! requests. The batch itself is built in [`super::batch`].

use super::expr::{Data, Expr};
use crate::netfilter::NFPROTO_UNSPEC;
use crate::netlink::{NLA_F_NESTED, NLM_F_DUMP, NLM_F_REQUEST};

pub const NFNL_MSG_BATCH_BEGIN: u16 = 0x10;
pub const NFNL_MSG_BATCH_END: u16 = 0x11;
pub const NFNL_SUBSYS_NFTABLES: u16 = 10;
pub const NFNL_BATCH_GENID: u16 = 1;

pub const NFT_MSG_NEWTABLE: u16 = 0;
pub const NFT_MSG_GETTABLE: u16 = 1;
pub const NFT_MSG_DELTABLE: u16 = 2;
pub const NFT_MSG_NEWCHAIN: u16 = 3;
pub const NFT_MSG_GETCHAIN: u16 = 4;
pub const NFT_MSG_NEWRULE: u16 = 6;
pub const NFT_MSG_GETRULE: u16 = 7;
pub const NFT_MSG_NEWSET: u16 = 9;
pub const NFT_MSG_NEWSETELEM: u16 = 12;
pub const NFT_MSG_GETSETELEM: u16 = 13;
pub const NFT_MSG_NEWGEN: u16 = 15;
pub const NFT_MSG_GETGEN: u16 = 16;

pub const NFTA_TABLE_NAME: u16 = 1;
pub const NFTA_TABLE_FLAGS: u16 = 2;
pub const NFTA_CHAIN_TABLE: u16 = 1;
pub const NFTA_CHAIN_NAME: u16 = 3;
pub const NFTA_CHAIN_HOOK: u16 = 4;
pub const NFTA_CHAIN_POLICY: u16 = 5;
pub const NFTA_CHAIN_TYPE: u16 = 7;
pub const NFTA_HOOK_HOOKNUM: u16 = 1;
pub const NFTA_HOOK_PRIORITY: u16 = 2;
pub const NFTA_HOOK_DEV: u16 = 3;
pub const NFTA_HOOK_DEVS: u16 = 4;
/// `NFT_TABLE_F_DORMANT`: the table's chains are not registered with the kernel's hooks.
pub const NFT_TABLE_F_DORMANT: u32 = 1;
pub const NFTA_RULE_TABLE: u16 = 1;
pub const NFTA_RULE_CHAIN: u16 = 2;
pub const NFTA_RULE_HANDLE: u16 = 3;
pub const NFTA_RULE_EXPRESSIONS: u16 = 4;
pub const NFTA_LIST_ELEM: u16 = 1;
pub const NFTA_EXPR_NAME: u16 = 1;
pub const NFTA_EXPR_DATA: u16 = 2;
pub const NFTA_DATA_VALUE: u16 = 1;
pub const NFTA_DATA_VERDICT: u16 = 2;
pub const NFTA_VERDICT_CODE: u16 = 1;
pub const NFTA_VERDICT_CHAIN: u16 = 2;
pub const NFTA_SET_TABLE: u16 = 1;
pub const NFTA_SET_NAME: u16 = 2;
pub const NFTA_SET_FLAGS: u16 = 3;
pub const NFTA_SET_KEY_TYPE: u16 = 4;
pub const NFTA_SET_KEY_LEN: u16 = 5;
pub const NFTA_SET_DESC: u16 = 9;
pub const NFTA_SET_DESC_SIZE: u16 = 1;
pub const NFTA_SET_ID: u16 = 10;
pub const NFTA_SET_ELEM_LIST_TABLE: u16 = 1;
pub const NFTA_SET_ELEM_LIST_SET: u16 = 2;
pub const NFTA_SET_ELEM_LIST_ELEMENTS: u16 = 3;
pub const NFTA_SET_ELEM_LIST_SET_ID: u16 = 4;
pub const NFTA_SET_ELEM_KEY: u16 = 1;
pub const NFTA_GEN_ID: u16 = 1;
/// `NFT_SET_ANONYMOUS | NFT_SET_CONSTANT`.
pub const SET_ANON_CONST: u32 = 3;
/// nft's `inet_service` datatype id.
pub const KEY_TYPE_INET_SERVICE: u32 = 13;

/// Attribute writer (host-order headers, payload padded to 4 bytes). Writes in place: a nested attribute is
/// built in the same buffer and its length patched afterwards, and no attribute needs a temporary, so a batch
/// costs a few buffer growths instead of an allocation and a copy per attribute (it is on every pod's ADD).
pub struct Attrs {
    pub buf: Vec<u8>,
}

impl Default for Attrs {
    fn default() -> Attrs {
        // Most messages' attributes fit; more grows as usual.
        Attrs {
            buf: Vec::with_capacity(256),
        }
    }
}

impl Attrs {
    /// The header of an attribute whose payload is `payload_len` bytes; the caller appends the payload and
    /// then [`Attrs::pad`].
    fn header(&mut self, ty: u16, payload_len: usize) {
        let l = ((4 + payload_len) as u16).to_ne_bytes();
        let t = ty.to_ne_bytes();
        self.buf.extend_from_slice(&[l[0], l[1], t[0], t[1]]);
    }
    fn pad(&mut self) {
        let n = (4 - self.buf.len() % 4) % 4;
        if n > 0 {
            self.buf.extend_from_slice(&[0u8; 3][..n]);
        }
    }
    pub fn put(&mut self, ty: u16, payload: &[u8]) -> &mut Self {
        self.header(ty, payload.len());
        self.buf.extend_from_slice(payload);
        self.pad();
        self
    }
    /// A NUL-terminated string.
    pub fn str(&mut self, ty: u16, s: &str) -> &mut Self {
        self.header(ty, s.len() + 1);
        self.buf.extend_from_slice(s.as_bytes());
        self.buf.push(0);
        self.pad();
        self
    }
    pub fn be32(&mut self, ty: u16, v: u32) -> &mut Self {
        self.put(ty, &v.to_be_bytes())
    }
    pub fn nest(&mut self, ty: u16, f: impl FnOnce(&mut Attrs)) -> &mut Self {
        let start = self.buf.len();
        self.header(ty | NLA_F_NESTED, 0);
        let mut inner = Attrs {
            buf: std::mem::take(&mut self.buf),
        };
        f(&mut inner);
        self.buf = inner.buf;
        // Every attribute inside is padded, so the nest needs none of its own.
        let len = (self.buf.len() - start) as u16;
        self.buf[start..start + 2].copy_from_slice(&len.to_ne_bytes());
        self
    }
}

/// One netfilter message: `nlmsghdr` + `nfgenmsg` + attributes.
pub fn message(kind: u16, flags: u16, seq: u32, family: u8, res_id: u16, attrs: &[u8]) -> Vec<u8> {
    let mut m = Vec::with_capacity(20 + attrs.len());
    message_into(&mut m, kind, flags, seq, family, res_id, attrs);
    m
}

/// [`message`], appended to `out` (a batch is one buffer).
pub fn message_into(
    out: &mut Vec<u8>,
    kind: u16,
    flags: u16,
    seq: u32,
    family: u8,
    res_id: u16,
    attrs: &[u8],
) {
    let l = ((16 + 4 + attrs.len()) as u32).to_ne_bytes();
    let (k, f, s, r) = (
        kind.to_ne_bytes(),
        flags.to_ne_bytes(),
        seq.to_ne_bytes(),
        res_id.to_be_bytes(),
    );
    // nlmsghdr (nlmsg_pid 0), then nfgenmsg: family, version 0, res_id (big-endian).
    out.extend_from_slice(&[
        l[0], l[1], l[2], l[3], k[0], k[1], f[0], f[1], s[0], s[1], s[2], s[3], 0, 0, 0, 0, family,
        0, r[0], r[1],
    ]);
    out.extend_from_slice(attrs);
}

pub fn nft_type(msg: u16) -> u16 {
    (NFNL_SUBSYS_NFTABLES << 8) | msg
}

fn data(a: &mut Attrs, ty: u16, d: &Data) {
    a.nest(ty, |n| match d {
        Data::Value(v) => {
            n.put(NFTA_DATA_VALUE, v);
        }
        Data::Verdict { code, chain } => {
            n.nest(NFTA_DATA_VERDICT, |v| {
                v.put(NFTA_VERDICT_CODE, &code.to_be_bytes());
                if let Some(c) = chain {
                    v.str(NFTA_VERDICT_CHAIN, c);
                }
            });
        }
    });
}

/// `NFTA_EXPR_DATA` of one expression.
pub fn expr_attrs(e: &Expr, a: &mut Attrs) {
    match e {
        Expr::Meta { key, dreg } => {
            a.be32(2, *key).be32(1, *dreg);
        }
        Expr::MetaSet { key, sreg } => {
            a.be32(2, *key).be32(3, *sreg);
        }
        Expr::Cmp { sreg, op, data: d } => {
            a.be32(1, *sreg).be32(2, *op);
            data(a, 3, &Data::Value(d.clone()));
        }
        Expr::Payload {
            dreg,
            base,
            offset,
            len,
        } => {
            a.be32(1, *dreg)
                .be32(2, *base)
                .be32(3, *offset)
                .be32(4, *len);
        }
        Expr::Bitwise {
            sreg,
            dreg,
            len,
            mask,
            xor,
        } => {
            a.be32(1, *sreg).be32(2, *dreg).be32(3, *len);
            data(a, 4, &Data::Value(mask.clone()));
            data(a, 5, &Data::Value(xor.clone()));
        }
        Expr::Lookup {
            sreg,
            set,
            set_id,
            flags,
        } => {
            a.be32(2, *sreg).str(1, set);
            if let Some(id) = set_id {
                a.be32(4, *id);
            }
            a.be32(5, *flags);
        }
        Expr::Immediate { dreg, data: d } => {
            a.be32(1, *dreg);
            data(a, 2, d);
        }
        Expr::Counter | Expr::Other(_) => {}
        Expr::Redir { reg_min, flags } => {
            a.be32(1, *reg_min).be32(3, *flags);
        }
        Expr::Tproxy { family, reg_port } => {
            a.be32(1, *family).be32(3, *reg_port);
        }
        Expr::Ct { key, dreg } => {
            a.be32(2, *key).be32(1, *dreg);
        }
        Expr::CtSet { key, sreg } => {
            a.be32(2, *key).be32(4, *sreg);
        }
    }
}

/// `NFTA_RULE_EXPRESSIONS`.
pub fn expressions(exprs: &[Expr], a: &mut Attrs) {
    a.nest(NFTA_RULE_EXPRESSIONS, |l| {
        for e in exprs {
            l.nest(NFTA_LIST_ELEM, |el| {
                el.str(NFTA_EXPR_NAME, e.name());
                el.nest(NFTA_EXPR_DATA, |d| expr_attrs(e, d));
            });
        }
    });
}

/// A dump request (`GET*` with `NLM_F_DUMP`), with optional attributes.
pub fn dump_request(msg: u16, family: u8, seq: u32, attrs: &Attrs) -> Vec<u8> {
    message(
        nft_type(msg),
        NLM_F_REQUEST | NLM_F_DUMP,
        seq,
        family,
        0,
        &attrs.buf,
    )
}

/// `NFT_MSG_GETGEN` (not a dump).
pub fn getgen_request(seq: u32) -> Vec<u8> {
    message(
        nft_type(NFT_MSG_GETGEN),
        NLM_F_REQUEST,
        seq,
        NFPROTO_UNSPEC,
        0,
        &[],
    )
}

#[cfg(test)]
#[path = "codec_tests.rs"]
mod tests;
