//! The planned steps as one nf_tables batch (pure): `BATCH_BEGIN` (with the generation id the current
//! state was read at, when it was), the messages as iptables-nft sends them (family ip/ip6, every rule with
//! `NFTA_RULE_COMPAT`, without which the kernel refuses compat `tcp`/`udp`/`multiport`/`TPROXY`), and
//! `BATCH_END`; the plan's last messages wake the tables (`NEWTABLE` with flags 0, as `nft add table` sends
//! it; iptables-nft sends no flags). Only the last message asks for an ack; the kernel reports any failing one and then aborts
//! the whole batch. [`Batch::what`] names each message for error messages.

use super::plan::{Ref, Step};
use super::xexpr;
use crate::netfilter::{Family, NFPROTO_UNSPEC};
use crate::netlink::{NLM_F_ACK, NLM_F_APPEND, NLM_F_CREATE, NLM_F_EXCL, NLM_F_REQUEST};
use crate::nftables::encode::*;
use std::collections::BTreeSet;

const NFT_MSG_DELCHAIN: u16 = 5;
const NFT_MSG_DELRULE: u16 = 8;
const NFTA_CHAIN_POLICY: u16 = 5;
const NFTA_RULE_POSITION: u16 = 6;
const NFTA_RULE_COMPAT: u16 = 5;
const NFTA_RULE_COMPAT_PROTO: u16 = 1;
const NFTA_RULE_COMPAT_FLAGS: u16 = 2;
const NFTA_RULE_ID: u16 = 9;
const NFTA_RULE_POSITION_ID: u16 = 10;

/// An encoded batch: its bytes, and what each message does by sequence number.
#[derive(Debug, Clone)]
pub struct Batch {
    pub bytes: Vec<u8>,
    pub what: Vec<(u32, String)>,
    pub begin_seq: u32,
    /// The message that asks for the ack (none: an empty document).
    pub ack_seq: Option<u32>,
}

/// The rules' attributes (table, chain, ...) before the expressions.
fn rule_ref(a: &mut Attrs, r: Ref, by_handle: u16, by_id: u16) {
    match r {
        Ref::Handle(h) => a.put(by_handle, &h.to_be_bytes()),
        Ref::Id(i) => a.be32(by_id, i),
    };
}

/// The message of one step: `(type, flags, attributes, description)`. Kept whole: one arm per [`Step`],
/// each the attributes of one nf_tables message as iptables-nft sends it.
fn message(family: Family, step: &Step, ids: &BTreeSet<u32>) -> (u16, u16, Attrs, String) {
    let f = super::nft_family(family);
    let mut a = Attrs::default();
    match step {
        Step::Table(t) => {
            a.str(NFTA_TABLE_NAME, t);
            let w = format!("create table {f} {t}");
            (NFT_MSG_NEWTABLE, NLM_F_CREATE, a, w)
        }
        Step::Wake(t) => {
            a.str(NFTA_TABLE_NAME, t).be32(NFTA_TABLE_FLAGS, 0);
            let w = format!("wake table {f} {t} (flags 0: not dormant)");
            (NFT_MSG_NEWTABLE, 0, a, w)
        }
        Step::NewChain { table, chain } => {
            a.str(NFTA_CHAIN_TABLE, table).str(NFTA_CHAIN_NAME, chain);
            let w = format!("create chain {chain} in table {f} {table}");
            (NFT_MSG_NEWCHAIN, NLM_F_EXCL, a, w)
        }
        Step::BaseChain { table, chain: b } => {
            a.str(NFTA_CHAIN_TABLE, table).str(NFTA_CHAIN_NAME, b.name);
            a.nest(NFTA_CHAIN_HOOK, |h| {
                h.be32(NFTA_HOOK_HOOKNUM, b.hooknum)
                    .put(NFTA_HOOK_PRIORITY, &b.priority.to_be_bytes());
            });
            a.be32(NFTA_CHAIN_POLICY, crate::netfilter::NF_ACCEPT as u32)
                .str(NFTA_CHAIN_TYPE, b.kind);
            let w = format!(
                "create built-in chain {} in table {f} {table} (type {} hook {} priority {})",
                b.name, b.kind, b.hooknum, b.priority
            );
            (NFT_MSG_NEWCHAIN, NLM_F_CREATE, a, w)
        }
        Step::Flush { table, chain } => {
            a.str(NFTA_RULE_TABLE, table).str(NFTA_RULE_CHAIN, chain);
            let w = format!("flush chain {chain} of table {f} {table}");
            (NFT_MSG_DELRULE, 0, a, w)
        }
        Step::DeleteChain { table, chain } => {
            a.str(NFTA_CHAIN_TABLE, table).str(NFTA_CHAIN_NAME, chain);
            let w = format!("delete chain {chain} of table {f} {table}");
            (NFT_MSG_DELCHAIN, 0, a, w)
        }
        Step::Rule {
            table,
            chain,
            rule,
            exprs,
            id,
            append,
            after,
        } => {
            a.str(NFTA_RULE_TABLE, table).str(NFTA_RULE_CHAIN, chain);
            // libnftnl's order: position, expressions, compat, id, position id.
            if let Some(Ref::Handle(h)) = after {
                a.put(NFTA_RULE_POSITION, &h.to_be_bytes());
            }
            xexpr::encode(exprs, &mut a);
            a.nest(NFTA_RULE_COMPAT, |c| {
                c.be32(NFTA_RULE_COMPAT_PROTO, rule.proto.unwrap_or(0) as u32)
                    .be32(NFTA_RULE_COMPAT_FLAGS, 0);
            });
            if ids.contains(id) {
                a.be32(NFTA_RULE_ID, *id);
            }
            if let Some(Ref::Id(i)) = after {
                a.be32(NFTA_RULE_POSITION_ID, *i);
            }
            let how = if *append { "append" } else { "insert" };
            let w = format!(
                "{how} to chain {chain} of table {f} {table}: {}",
                super::describe(family, rule)
            );
            let flags = NLM_F_CREATE | if *append { NLM_F_APPEND } else { 0 };
            (NFT_MSG_NEWRULE, flags, a, w)
        }
        Step::DeleteRule {
            table,
            chain,
            rule,
            which,
        } => {
            a.str(NFTA_RULE_TABLE, table).str(NFTA_RULE_CHAIN, chain);
            rule_ref(&mut a, *which, NFTA_RULE_HANDLE, NFTA_RULE_ID);
            let w = format!(
                "delete from chain {chain} of table {f} {table}: {}",
                super::describe(family, rule)
            );
            (NFT_MSG_DELRULE, 0, a, w)
        }
    }
}

/// The batch of `steps`; `seq0` is `BATCH_BEGIN`'s sequence number.
pub fn encode(family: Family, steps: &[Step], genid: Option<u32>, seq0: u32) -> Batch {
    // Only rules another message names carry their id.
    let mut ids = BTreeSet::new();
    for s in steps {
        match s {
            Step::Rule {
                after: Some(Ref::Id(i)),
                ..
            }
            | Step::DeleteRule {
                which: Ref::Id(i), ..
            } => {
                ids.insert(*i);
            }
            _ => {}
        }
    }
    let mut bytes = Vec::with_capacity(4096);
    let mut begin = Attrs::default();
    if let Some(g) = genid {
        begin.be32(NFNL_BATCH_GENID, g);
    }
    let sub = NFNL_SUBSYS_NFTABLES;
    message_into(
        &mut bytes,
        NFNL_MSG_BATCH_BEGIN,
        NLM_F_REQUEST,
        seq0,
        NFPROTO_UNSPEC,
        sub,
        &begin.buf,
    );
    let mut what = Vec::with_capacity(steps.len());
    let mut seq = seq0;
    for (i, s) in steps.iter().enumerate() {
        seq = seq.wrapping_add(1);
        let (kind, mut flags, a, w) = message(family, s, &ids);
        if i + 1 == steps.len() {
            flags |= NLM_F_ACK;
        }
        let flags = NLM_F_REQUEST | flags;
        message_into(
            &mut bytes,
            nft_type(kind),
            flags,
            seq,
            family.nfproto(),
            0,
            &a.buf,
        );
        what.push((seq, w));
    }
    let end = seq.wrapping_add(1);
    message_into(
        &mut bytes,
        NFNL_MSG_BATCH_END,
        NLM_F_REQUEST,
        end,
        NFPROTO_UNSPEC,
        sub,
        &[],
    );
    Batch {
        bytes,
        ack_seq: what.last().map(|w| w.0),
        what,
        begin_seq: seq0,
    }
}
