//! The bounded netlink reader every read of a pod namespace's nf_tables state goes through: one decision
//! reads at most [`MAX_OBJECTS`] objects and [`MAX_BYTES`] bytes of replies, and fails closed past them (a
//! pod with `NET_ADMIN` controls its own ruleset); and the ruleset generation id that makes several dumps
//! one read ([`super::observe::in_one_generation`]).

use super::decode::{self, Msg};
use super::encode::{self, Attrs};
use super::socket::Socket;
use crate::error::{Error, Result};

/// At most this many tables, chains, rules and set elements are read for one decision.
pub const MAX_OBJECTS: usize = 10_000;
/// At most this many bytes of replies are read for one decision.
pub const MAX_BYTES: usize = 16 << 20;

fn too_large() -> Error {
    Error::Rules(format!(
        "nftables: the pod's ruleset is too large to verify: more than {MAX_OBJECTS} tables, chains, rules \
         and set elements (or {} MiB) to read where our redirect could be bypassed; failing closed",
        MAX_BYTES >> 20
    ))
}

/// A socket with what one decision has read so far.
pub struct Reader<'s> {
    pub(super) s: &'s mut Socket,
    objects: usize,
    bytes: usize,
}

impl<'s> Reader<'s> {
    pub fn new(s: &'s mut Socket) -> Reader<'s> {
        Reader {
            s,
            objects: 0,
            bytes: 0,
        }
    }

    /// One dump request; every reply goes to `f` as it arrives, within the bound.
    pub(super) fn dump(
        &mut self,
        what: &str,
        msg: u16,
        family: u8,
        a: &Attrs,
        f: &mut dyn FnMut(&Msg) -> Result<()>,
    ) -> Result<()> {
        let seq = self.s.next_seq(1);
        let req = encode::dump_request(msg, family, seq, a);
        let (objects, bytes) = (&mut self.objects, &mut self.bytes);
        self.s.dump(what, &req, &mut |m| {
            *objects += 1;
            *bytes += m.body.len();
            if *objects > MAX_OBJECTS || *bytes > MAX_BYTES {
                return Err(too_large());
            }
            f(m)
        })
    }

    /// The rules of `table` (and of `chain` only, when given) in `family`, in order.
    pub(super) fn rules(
        &mut self,
        family: u8,
        table: &str,
        chain: Option<&str>,
    ) -> Result<Vec<decode::RuleMsg>> {
        let mut a = Attrs::default();
        a.str(encode::NFTA_RULE_TABLE, table);
        if let Some(c) = chain {
            a.str(encode::NFTA_RULE_CHAIN, c);
        }
        let mut out = Vec::new();
        self.dump(
            "list rules",
            encode::NFT_MSG_GETRULE,
            family,
            &a,
            &mut |m| {
                out.push(decode::rule(m)?);
                Ok(())
            },
        )?;
        Ok(out)
    }
}

/// The ruleset generation id.
pub fn genid(s: &mut Socket) -> Result<u32> {
    let seq = s.next_seq(1);
    let mut id = None;
    let req = encode::getgen_request(seq);
    s.dump("read the ruleset generation", &req, &mut |m| {
        if id.is_none() && m.kind == encode::nft_type(encode::NFT_MSG_NEWGEN) {
            id = Some(decode::gen_id(m)?);
        }
        Ok(())
    })?;
    id.ok_or_else(|| Error::other("nftables: no generation id in the reply"))
}
