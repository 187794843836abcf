//! The one nf_tables batch that replaces our tables (spec nftables.md §3.4, convergent variant), encoded
//! purely from a [`Ruleset`]: `NEWTABLE`+`DELTABLE` for each Istio table, then every desired table, chain,
//! anonymous set and rule, appended in final order, between `BATCH_BEGIN` and `BATCH_END`. Only the last
//! inner message asks for an ack: the kernel reports a failing message whether or not it asked, and the
//! last one's ack says the whole batch was processed and committed (one reply to read instead of one per
//! message, on every pod's ADD). [`Batch::what`] maps each sequence number back to the operation and the
//! kernel modules it needs, for error messages. The operation is described in nft syntax only when an error
//! needs it ([`What::op`]): formatting every rule cost more than encoding it, on every pod's ADD.

use super::encode::*;
use super::expr::Expr;
use super::lower::{lower, GroupResolver, Lowered};
use super::model::{rule_text, Ruleset, Table, TABLES};
use crate::error::Result;
use crate::netfilter::{NFPROTO_INET, NFPROTO_UNSPEC};
use crate::netlink::{NLM_F_ACK, NLM_F_APPEND, NLM_F_CREATE, NLM_F_REQUEST};

/// Which operation one message of a batch is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    AddTable(Table),
    DeleteTable(Table),
    AddChain(Table, &'static str),
    /// Rule `rule` of chain `chain` of table `table` (indices into the ruleset), or the anonymous set its
    /// lookup uses and that set's elements.
    Rule {
        table: usize,
        chain: usize,
        rule: usize,
        part: Part,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    Rule,
    Set,
    SetElements,
}

/// What one message of a batch does, for error messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct What {
    pub seq: u32,
    pub what: Op,
    /// `(expression, kernel module)` pairs this message needs beyond nf_tables.
    pub modules: Vec<(String, &'static str)>,
}

impl What {
    /// The operation in nft syntax (`add rule inet istio-proxy-nat output counter jump istio-output`); `rs`
    /// is the ruleset the batch was encoded from.
    pub fn op(&self, rs: &Ruleset) -> String {
        match &self.what {
            Op::AddTable(t) => format!("add table inet {}", t.name()),
            Op::DeleteTable(t) => format!("delete table inet {}", t.name()),
            Op::AddChain(t, c) => {
                let op = format!("add chain inet {} {c}", t.name());
                match t.hook(c) {
                    Some(h) => format!(
                        "{op} {{ type {} hook {} priority {} ; }}",
                        h.kind, h.hook, h.priority
                    ),
                    None => op,
                }
            }
            Op::Rule {
                table,
                chain,
                rule,
                part,
            } => {
                let ts = rs.tables.get(*table);
                let c = ts.and_then(|t| t.chains.get(*chain));
                let text = match (ts, c, c.and_then(|c| c.rules.get(*rule))) {
                    (Some(ts), Some(c), Some(items)) => format!(
                        "add rule inet {} {} {}",
                        ts.table.name(),
                        c.name,
                        rule_text(items)
                    ),
                    _ => format!("rule {rule} of chain {chain} of table {table}"),
                };
                match part {
                    Part::Rule => text,
                    Part::Set => format!("{text} (its set)"),
                    Part::SetElements => format!("{text} (its set elements)"),
                }
            }
        }
    }
}

/// An encoded batch.
#[derive(Debug, Clone)]
pub struct Batch {
    pub bytes: Vec<u8>,
    /// Every inner message, in order; only the last asks for an ack.
    pub what: Vec<What>,
    /// Sequence numbers of BEGIN and END.
    pub begin_seq: u32,
}

struct Builder {
    bytes: Vec<u8>,
    what: Vec<What>,
    seq: u32,
    /// Where the last inner message starts in `bytes` (its flags get `NLM_F_ACK`).
    last: Option<usize>,
    /// The last message's attribute buffer, cleared for the next ([`Builder::attrs`]).
    spare: Vec<u8>,
    /// The last anonymous set's batch-unique id.
    set_id: u32,
}

impl Builder {
    /// An empty attribute writer (reusing the last message's buffer).
    fn attrs(&mut self) -> Attrs {
        let mut buf = std::mem::take(&mut self.spare);
        buf.clear();
        if buf.capacity() == 0 {
            return Attrs::default();
        }
        Attrs { buf }
    }

    fn push(
        &mut self,
        msg: u16,
        flags: u16,
        attrs: Attrs,
        what: Op,
        modules: Vec<(String, &'static str)>,
    ) {
        self.seq = self.seq.wrapping_add(1);
        self.last = Some(self.bytes.len());
        message_into(
            &mut self.bytes,
            nft_type(msg),
            NLM_F_REQUEST | flags,
            self.seq,
            NFPROTO_INET,
            0,
            &attrs.buf,
        );
        self.spare = attrs.buf;
        self.what.push(What {
            seq: self.seq,
            what,
            modules,
        });
    }
}

/// Encodes the batch that makes the namespace's Istio tables exactly `rs`. With `replace`, every Istio table
/// is first created (no-op if present) and deleted; without it (a namespace a dump showed without Istio
/// tables) the batch only creates, so its commit leaves nothing for the kernel to destroy (deleted objects
/// make the socket's release wait for an RCU grace period, several ms). `genid` (from that dump) makes the
/// kernel refuse the batch with `ERESTART` if the ruleset changed since. `seq0` is BEGIN's sequence number.
pub fn batch(
    rs: &Ruleset,
    groups: GroupResolver,
    genid: Option<u32>,
    seq0: u32,
    replace: bool,
) -> Result<Batch> {
    let mut b = Builder {
        bytes: Vec::with_capacity(8 << 10),
        what: Vec::new(),
        seq: seq0,
        last: None,
        spare: Vec::new(),
        set_id: 0,
    };
    let mut begin = Attrs::default();
    if let Some(g) = genid {
        begin.be32(NFNL_BATCH_GENID, g);
    }
    message_into(
        &mut b.bytes,
        NFNL_MSG_BATCH_BEGIN,
        NLM_F_REQUEST,
        seq0,
        NFPROTO_UNSPEC,
        NFNL_SUBSYS_NFTABLES,
        &begin.buf,
    );
    for t in TABLES.into_iter().filter(|_| replace) {
        b.table(t);
        let mut a = b.attrs();
        a.str(NFTA_TABLE_NAME, t.name());
        b.push(NFT_MSG_DELTABLE, 0, a, Op::DeleteTable(t), vec![]);
    }
    for (ti, ts) in rs.tables.iter().enumerate() {
        b.table(ts.table);
        for c in &ts.chains {
            b.chain(ts.table, c.name);
        }
        for (ci, c) in ts.chains.iter().enumerate() {
            for (ri, items) in c.rules.iter().enumerate() {
                let op = |part| Op::Rule {
                    table: ti,
                    chain: ci,
                    rule: ri,
                    part,
                };
                b.rule(ts.table.name(), c.name, lower(items, groups)?, op);
            }
        }
    }
    Ok(b.end(seq0))
}

impl Builder {
    fn table(&mut self, t: Table) {
        let mut a = self.attrs();
        a.str(NFTA_TABLE_NAME, t.name()).be32(NFTA_TABLE_FLAGS, 0);
        self.push(NFT_MSG_NEWTABLE, 0, a, Op::AddTable(t), vec![]);
    }

    /// `NEWCHAIN`: a regular chain, or a base chain with its type and hook (a nat one needs its module).
    fn chain(&mut self, t: Table, name: &'static str) {
        let mut a = self.attrs();
        a.str(NFTA_CHAIN_TABLE, t.name()).str(NFTA_CHAIN_NAME, name);
        let mut modules = vec![];
        if let Some(h) = t.hook(name) {
            // Attribute order as nft sends it (type, then hook).
            a.str(NFTA_CHAIN_TYPE, h.kind);
            a.nest(NFTA_CHAIN_HOOK, |n| {
                n.be32(NFTA_HOOK_HOOKNUM, h.hooknum)
                    .put(NFTA_HOOK_PRIORITY, &h.priority.to_be_bytes());
            });
            if h.kind == "nat" {
                modules.push(("type nat chain".to_string(), "nft_chain_nat"));
            }
        }
        let op = Op::AddChain(t, name);
        self.push(NFT_MSG_NEWCHAIN, NLM_F_CREATE, a, op, modules);
    }

    /// One lowered rule of `table`'s `chain`: its anonymous sets first ([`Builder::anon_set`]), the
    /// lookups pointed at their batch ids, then `NEWRULE` with the modules its expressions need.
    fn rule(&mut self, table: &str, chain: &str, mut low: Lowered, op: impl Fn(Part) -> Op) {
        let ids: Vec<u32> = low
            .sets
            .iter()
            .map(|elems| self.anon_set(table, elems, &op))
            .collect();
        for e in low.exprs.iter_mut() {
            if let Expr::Lookup {
                set_id: Some(i), ..
            } = e
            {
                *i = ids.get(*i as usize).copied().unwrap_or(0);
            }
        }
        let modules = low
            .exprs
            .iter()
            .filter_map(|e| super::expr::module_of(e).map(|m| (e.name().to_string(), m)))
            .collect();
        let mut a = self.attrs();
        a.str(NFTA_RULE_TABLE, table).str(NFTA_RULE_CHAIN, chain);
        expressions(&low.exprs, &mut a);
        let flags = NLM_F_CREATE | NLM_F_APPEND;
        self.push(NFT_MSG_NEWRULE, flags, a, op(Part::Rule), modules);
    }

    /// `NEWSET` and `NEWSETELEM` for one anonymous set of ports, with the next batch-unique id (returned).
    fn anon_set(&mut self, table: &str, elems: &[Vec<u8>], op: impl Fn(Part) -> Op) -> u32 {
        self.set_id += 1;
        let set_id = self.set_id;
        let mut a = self.attrs();
        a.str(NFTA_SET_TABLE, table)
            .str(NFTA_SET_NAME, "__set%d")
            .be32(NFTA_SET_FLAGS, SET_ANON_CONST)
            .be32(NFTA_SET_KEY_TYPE, KEY_TYPE_INET_SERVICE)
            .be32(NFTA_SET_KEY_LEN, 2)
            .be32(NFTA_SET_ID, set_id)
            .nest(NFTA_SET_DESC, |d| {
                d.be32(NFTA_SET_DESC_SIZE, elems.len() as u32);
            });
        self.push(NFT_MSG_NEWSET, NLM_F_CREATE, a, op(Part::Set), vec![]);
        let mut a = self.attrs();
        a.str(NFTA_SET_ELEM_LIST_TABLE, table)
            .str(NFTA_SET_ELEM_LIST_SET, "__set%d")
            .be32(NFTA_SET_ELEM_LIST_SET_ID, set_id)
            .nest(NFTA_SET_ELEM_LIST_ELEMENTS, |l| {
                // libnftnl numbers the elements 1, 2, … (the kernel ignores the type).
                for (i, el) in elems.iter().enumerate() {
                    l.nest(i as u16 + 1, |e| {
                        e.nest(NFTA_SET_ELEM_KEY, |k| {
                            k.put(NFTA_DATA_VALUE, el);
                        });
                    });
                }
            });
        let op = op(Part::SetElements);
        self.push(NFT_MSG_NEWSETELEM, NLM_F_CREATE, a, op, vec![]);
        set_id
    }

    /// The last inner message asks for the ack; then `BATCH_END`.
    fn end(mut self, seq0: u32) -> Batch {
        if let Some(at) = self.last {
            // nlmsghdr: len (4), type (2), flags (2, native endian).
            let f = u16::from_ne_bytes([self.bytes[at + 6], self.bytes[at + 7]]) | NLM_F_ACK;
            self.bytes[at + 6..at + 8].copy_from_slice(&f.to_ne_bytes());
        }
        message_into(
            &mut self.bytes,
            NFNL_MSG_BATCH_END,
            NLM_F_REQUEST,
            self.seq.wrapping_add(1),
            NFPROTO_UNSPEC,
            NFNL_SUBSYS_NFTABLES,
            &[],
        );
        Batch {
            bytes: self.bytes,
            what: self.what,
            begin_seq: seq0,
        }
    }
}
