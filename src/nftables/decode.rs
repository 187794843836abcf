//! Pure netlink decoding: messages, attributes, and the nf_tables objects CHECK reads back (spec
//! nftables.md §5) into the same [`Expr`] model the encoder consumes. Dumps add what was never sent
//! (counter values, handles, `bitwise` OP 0, `redir` REG_PROTO_MAX); those are dropped here so a dumped
//! rule compares equal to the rule we would send. Malformed input is an error, never a panic.

use super::encode::*;
use super::expr::{Data, Expr};
use crate::error::{Error, Result};

/// One netlink message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Msg<'a> {
    pub kind: u16,
    pub flags: u16,
    pub seq: u32,
    /// Everything after the 16-byte header.
    pub body: &'a [u8],
}

fn bad(what: &str) -> Error {
    Error::other(format!("malformed netlink reply: {what}"))
}

fn u16_at(b: &[u8], i: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(i..i + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], i: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(i..i + 4)?.try_into().ok()?))
}

/// Splits a buffer into messages.
pub fn messages(buf: &[u8]) -> Result<Vec<Msg<'_>>> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < buf.len() {
        let len = u32_at(buf, i).ok_or_else(|| bad("truncated header"))? as usize;
        if len < 16 || i + len > buf.len() {
            return Err(bad("bad message length"));
        }
        out.push(Msg {
            kind: u16_at(buf, i + 4).ok_or_else(|| bad("header"))?,
            flags: u16_at(buf, i + 6).ok_or_else(|| bad("header"))?,
            seq: u32_at(buf, i + 8).ok_or_else(|| bad("header"))?,
            body: &buf[i + 16..i + len],
        });
        i += (len + 3) & !3;
    }
    Ok(out)
}

/// Attributes of a block: `(type without flag bits, payload)`.
pub fn attrs(b: &[u8]) -> Result<Vec<(u16, &[u8])>> {
    let mut out = Vec::new();
    let mut i = 0;
    while i + 4 <= b.len() {
        let len = u16_at(b, i).ok_or_else(|| bad("attribute"))? as usize;
        let ty = u16_at(b, i + 2).ok_or_else(|| bad("attribute"))? & 0x3fff;
        if len < 4 || i + len > b.len() {
            return Err(bad("bad attribute length"));
        }
        out.push((ty, &b[i + 4..i + len]));
        i += (len + 3) & !3;
    }
    Ok(out)
}

/// The payload of the first attribute of type `ty`.
pub(crate) fn get<'a>(a: &[(u16, &'a [u8])], ty: u16) -> Option<&'a [u8]> {
    a.iter().find(|(t, _)| *t == ty).map(|(_, p)| *p)
}

fn be32(a: &[(u16, &[u8])], ty: u16) -> Result<u32> {
    let p = get(a, ty).ok_or_else(|| bad("missing attribute"))?;
    let arr: [u8; 4] = p
        .get(..4)
        .and_then(|s| s.try_into().ok())
        .ok_or_else(|| bad("short u32"))?;
    Ok(u32::from_be_bytes(arr))
}

/// [`be32`] of an optional attribute, 0 when absent.
pub(crate) fn be32_or0(a: &[(u16, &[u8])], ty: u16) -> Result<u32> {
    get(a, ty).map_or(Ok(0), |_| be32(a, ty))
}

/// A NUL-terminated string attribute (all of it when no NUL), lossily as UTF-8.
pub(crate) fn string(p: &[u8]) -> String {
    let end = p.iter().position(|&c| c == 0).unwrap_or(p.len());
    String::from_utf8_lossy(&p[..end]).into_owned()
}

fn str_attr(a: &[(u16, &[u8])], ty: u16) -> Result<String> {
    get(a, ty)
        .map(string)
        .ok_or_else(|| bad("missing string attribute"))
}

/// The attributes of an nf_tables message (after `nfgenmsg`).
pub fn nft_attrs<'a>(m: &Msg<'a>) -> Result<Vec<(u16, &'a [u8])>> {
    attrs(m.body.get(4..).ok_or_else(|| bad("short nfgenmsg"))?)
}

fn data(p: &[u8]) -> Result<Data> {
    let a = attrs(p)?;
    if let Some(v) = get(&a, NFTA_DATA_VALUE) {
        return Ok(Data::Value(v.to_vec()));
    }
    let v = attrs(get(&a, NFTA_DATA_VERDICT).ok_or_else(|| bad("data without value or verdict"))?)?;
    let code = be32(&v, NFTA_VERDICT_CODE)? as i32;
    Ok(Data::Verdict {
        code,
        chain: get(&v, NFTA_VERDICT_CHAIN).map(string),
    })
}

fn value(a: &[(u16, &[u8])], ty: u16) -> Result<Vec<u8>> {
    match data(get(a, ty).ok_or_else(|| bad("missing data"))?)? {
        Data::Value(v) => Ok(v),
        Data::Verdict { .. } => Err(bad("verdict where a value was expected")),
    }
}

/// One expression from its `NFTA_LIST_ELEM` payload. An expression of a known type whose attributes do not
/// have the shape we send (another tool's rule, e.g. a payload write) becomes [`Expr::Other`], so a foreign
/// rule is reported, never a reason to fail.
pub fn expr(p: &[u8]) -> Result<Expr> {
    let a = attrs(p)?;
    let name = str_attr(&a, NFTA_EXPR_NAME)?;
    let d = attrs(get(&a, NFTA_EXPR_DATA).unwrap_or(&[]))?;
    Ok(known(&name, &d).unwrap_or_else(|_| Expr::Other(format!("{name}(other form)"))))
}

fn known(name: &str, d: &[(u16, &[u8])]) -> Result<Expr> {
    let has = |t| get(d, t).is_some();
    Ok(match name {
        "meta" if has(1) => Expr::Meta {
            key: be32(d, 2)?,
            dreg: be32(d, 1)?,
        },
        "meta" => Expr::MetaSet {
            key: be32(d, 2)?,
            sreg: be32(d, 3)?,
        },
        "cmp" => Expr::Cmp {
            sreg: be32(d, 1)?,
            op: be32(d, 2)?,
            data: value(d, 3)?,
        },
        "payload" => Expr::Payload {
            dreg: be32(d, 1)?,
            base: be32(d, 2)?,
            offset: be32(d, 3)?,
            len: be32(d, 4)?,
        },
        "bitwise" => Expr::Bitwise {
            sreg: be32(d, 1)?,
            dreg: be32(d, 2)?,
            len: be32(d, 3)?,
            mask: value(d, 4)?,
            xor: value(d, 5)?,
        },
        // A map lookup (a destination register): a verdict map can jump anywhere; we never send one.
        "lookup" if has(3) => Expr::Other("lookup(map)".into()),
        "lookup" => Expr::Lookup {
            sreg: be32(d, 2)?,
            set: str_attr(d, 1)?,
            set_id: if has(4) { Some(be32(d, 4)?) } else { None },
            flags: be32_or0(d, 5)?,
        },
        "immediate" => Expr::Immediate {
            dreg: be32(d, 1)?,
            data: data(get(d, 2).ok_or_else(|| bad("immediate without data"))?)?,
        },
        "counter" => Expr::Counter,
        // Shapes we never send, so never compared equal to ours by the attributes we keep: the kernel
        // dumps a redir's REG_PROTO_MAX equal to its MIN for one port (another is a port range), our
        // tproxy has no address register, and none of our ct loads or sets has a direction
        // (`ct original zone set` is not `ct zone set`).
        "redir" if has(2) && get(d, 2) != get(d, 1) => return Err(bad("redir to a port range")),
        "tproxy" if has(2) => return Err(bad("tproxy to an address")),
        "ct" if has(3) => return Err(bad("ct with a direction")),
        "redir" => Expr::Redir {
            reg_min: be32(d, 1)?,
            flags: be32_or0(d, 3)?,
        },
        "tproxy" => Expr::Tproxy {
            family: be32(d, 1)?,
            reg_port: be32(d, 3)?,
        },
        "ct" if has(1) => Expr::Ct {
            key: be32(d, 2)?,
            dreg: be32(d, 1)?,
        },
        "ct" => Expr::CtSet {
            key: be32(d, 2)?,
            sreg: be32(d, 4)?,
        },
        // iptables-nft's x_tables compatibility expressions: keep the extension's name for reports.
        "target" | "match" => Expr::Other(format!("{name} {}", str_attr(d, 1)?)),
        _ => Expr::Other(name.to_string()),
    })
}

/// A rule as sent or dumped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleMsg {
    pub table: String,
    pub chain: String,
    pub handle: Option<u64>,
    pub exprs: Vec<Expr>,
}

pub fn rule(m: &Msg) -> Result<RuleMsg> {
    let a = nft_attrs(m)?;
    let mut exprs = Vec::new();
    if let Some(list) = get(&a, NFTA_RULE_EXPRESSIONS) {
        for (t, p) in attrs(list)? {
            if t == NFTA_LIST_ELEM {
                exprs.push(expr(p)?);
            }
        }
    }
    let handle = get(&a, NFTA_RULE_HANDLE)
        .and_then(|p| p.get(..8))
        .and_then(|s| s.try_into().ok())
        .map(u64::from_be_bytes);
    Ok(RuleMsg {
        table: str_attr(&a, NFTA_RULE_TABLE)?,
        chain: str_attr(&a, NFTA_RULE_CHAIN)?,
        handle,
        exprs,
    })
}

/// A chain as dumped: table, name, for a base chain `(type, hooknum, priority)` and its policy
/// (`NF_ACCEPT`, `NF_DROP`), and the devices of a netdev or ingress hook.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainMsg {
    pub table: String,
    pub name: String,
    pub base: Option<(String, u32, i32)>,
    pub policy: Option<u32>,
    pub devices: Vec<String>,
}

pub fn chain(m: &Msg) -> Result<ChainMsg> {
    let a = nft_attrs(m)?;
    let mut devices = Vec::new();
    let base = match get(&a, NFTA_CHAIN_HOOK) {
        Some(h) => {
            let h = attrs(h)?;
            if let Some(d) = get(&h, NFTA_HOOK_DEV) {
                devices.push(string(d));
            }
            // Recent kernels send both forms for a single device.
            if let Some(list) = get(&h, NFTA_HOOK_DEVS) {
                for (_, d) in attrs(list)? {
                    let d = string(d);
                    if !devices.contains(&d) {
                        devices.push(d);
                    }
                }
            }
            Some((
                str_attr(&a, NFTA_CHAIN_TYPE)?,
                be32(&h, NFTA_HOOK_HOOKNUM)?,
                be32(&h, NFTA_HOOK_PRIORITY)? as i32,
            ))
        }
        None => None,
    };
    Ok(ChainMsg {
        table: str_attr(&a, NFTA_CHAIN_TABLE)?,
        name: str_attr(&a, NFTA_CHAIN_NAME)?,
        base,
        policy: match get(&a, NFTA_CHAIN_POLICY) {
            Some(_) => Some(be32(&a, NFTA_CHAIN_POLICY)?),
            None => None,
        },
        devices,
    })
}

pub fn table_name(m: &Msg) -> Result<String> {
    str_attr(&nft_attrs(m)?, NFTA_TABLE_NAME)
}

/// A table's name and flags (`NFT_TABLE_F_DORMANT` = 1: none of its chains is hooked).
pub fn table(m: &Msg) -> Result<(String, u32)> {
    let a = nft_attrs(m)?;
    let flags = be32_or0(&a, NFTA_TABLE_FLAGS)?;
    Ok((str_attr(&a, NFTA_TABLE_NAME)?, flags))
}

/// The nfgenmsg family of an nf_tables message.
pub fn family(m: &Msg) -> Option<u8> {
    m.body.first().copied()
}

/// A set's name and the elements of a `NEWSETELEM` dump message: `(set, keys)`.
pub fn set_elems(m: &Msg) -> Result<(String, Vec<Vec<u8>>)> {
    let a = nft_attrs(m)?;
    let mut keys = Vec::new();
    if let Some(list) = get(&a, NFTA_SET_ELEM_LIST_ELEMENTS) {
        for (_, el) in attrs(list)? {
            let e = attrs(el)?;
            if get(&e, NFTA_SET_ELEM_KEY).is_some() {
                keys.push(value(&e, NFTA_SET_ELEM_KEY)?);
            }
        }
    }
    Ok((str_attr(&a, NFTA_SET_ELEM_LIST_SET)?, keys))
}

/// `NFTA_GEN_ID` of a `NEWGEN` message.
pub fn gen_id(m: &Msg) -> Result<u32> {
    be32(&nft_attrs(m)?, NFTA_GEN_ID)
}

/// An `NLMSG_ERROR`: `(errno, seq of the message it answers)`; errno 0 is an ack.
pub fn error(m: &Msg) -> Result<(i32, u32)> {
    let code = m.body.get(..4).ok_or_else(|| bad("short error"))?;
    let code = i32::from_ne_bytes(code.try_into().map_err(|_| bad("short error"))?);
    let seq = u32_at(m.body, 4 + 8).ok_or_else(|| bad("error without the request header"))?;
    // The kernel sends 0 or a negated errno; i32::MIN has no positive counterpart (and is no errno).
    let errno = code
        .checked_neg()
        .filter(|e| *e >= 0)
        .ok_or_else(|| bad("error code out of range"))?;
    Ok((errno, seq))
}
