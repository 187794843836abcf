//! A restore document (`iptables-restore --noflush` operations per table) as the steps of one nf_tables
//! batch (pure). The chains' rules are followed through the document, from what the tables hold now
//! ([`CurrentTable`], read only when the document inserts or deletes) and the rules the batch adds, so `-I C n`
//! lands after the (n-1)th rule as it stands at that line (an existing rule by handle, one of the batch by
//! its `NFTA_RULE_ID`) and `-D C rule` names the first equal rule. The batch ends waking every table it
//! wrote to ([`Step::Wake`]: our rules in a dormant table would run none of them). Encoding the steps:
//! [`super::batch`].

use super::builtin::{self, Builtin};
use super::encode_rule;
use super::xexpr::XExpr;
use crate::error::{Error, Result};
use crate::netfilter::Family;
use crate::xtables::rule::{Op, Rule, TableOps};
use std::collections::BTreeMap;

/// One chain of a table as read from the kernel: whether it is a base chain, its rules with handles, and a
/// base chain's `(type, hook, priority)` and policy ([`super::incompatible`] compares them with
/// iptables-nft's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CurrentChain {
    pub name: String,
    pub base: bool,
    pub rules: Vec<(u64, Rule)>,
    pub hook: Option<(String, u32, i32)>,
    pub policy: Option<u32>,
}

/// One table as read from the kernel; `dormant`: flagged `NFT_TABLE_F_DORMANT` (none of its chains hooked).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CurrentTable {
    pub name: String,
    pub dormant: bool,
    pub chains: Vec<CurrentChain>,
}

/// A rule the batch refers to: an existing one by handle, or one the batch adds by its id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ref {
    Handle(u64),
    Id(u32),
}

/// One message of the batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// `NEWTABLE` (create if absent), as iptables-nft sends it.
    Table(String),
    /// `NEWTABLE` with flags 0, as `nft add table` sends it: a dormant table wakes (its chains are hooked
    /// again), any other is left as it is. Last in the batch: the kernel refuses a base chain added to a
    /// table after its flags changed in the same batch.
    Wake(String),
    /// `NEWCHAIN` with `NLM_F_EXCL`: a user chain that must not exist.
    NewChain { table: String, chain: String },
    /// `NEWCHAIN` with `NLM_F_CREATE`: a built-in chain as its base chain.
    BaseChain { table: String, chain: Builtin },
    /// `DELRULE` of the whole chain.
    Flush { table: String, chain: String },
    /// `DELCHAIN`.
    DeleteChain { table: String, chain: String },
    /// `NEWRULE`: appended (after `after`, or at the end), or at the head (`append` false).
    Rule {
        table: String,
        chain: String,
        rule: Rule,
        exprs: Vec<XExpr>,
        id: u32,
        append: bool,
        after: Option<Ref>,
    },
    /// `DELRULE` of one rule.
    DeleteRule {
        table: String,
        chain: String,
        rule: Rule,
        which: Ref,
    },
}

/// Whether applying `doc` needs the tables' current rules: it inserts into or deletes from a chain whose
/// rules the document has not made known itself (by creating it with `-N`, which fails if it exists, or
/// flushing it). A TPROXY pod's document inserts only into chains it creates: no read on its ADD.
pub fn needs_current(doc: &[TableOps]) -> bool {
    doc.iter().any(|t| {
        let mut known = std::collections::BTreeSet::new();
        t.ops.iter().any(|o| match o {
            Op::NewChain(c) | Op::Flush(c) => {
                known.insert(c.as_str());
                false
            }
            Op::DeleteChain(c) => {
                known.remove(c.as_str());
                false
            }
            Op::Insert(c, ..) | Op::Delete(c, _) => !known.contains(c.as_str()),
            Op::Append(..) => false,
        })
    })
}

/// A chain followed through the document: `None` while nothing is known about its rules.
struct Chain {
    exists: Option<bool>,
    base: bool,
    rules: Vec<(Ref, Rule)>,
}

/// The steps of `doc`, given `current` (required when [`needs_current`]; `None` otherwise).
pub fn plan(
    family: Family,
    doc: &[TableOps],
    current: Option<&[CurrentTable]>,
) -> Result<Vec<Step>> {
    let mut p = Planner {
        family,
        table: "",
        known: current.is_some(),
        chains: BTreeMap::new(),
        steps: Vec::new(),
        id: 0,
    };
    for t in doc {
        p.table = t.table.as_str();
        if builtin::chains(p.table).is_none() {
            return Err(p.fail("not a table iptables knows".into()));
        }
        let cur = current.and_then(|c| c.iter().find(|c| c.name == p.table));
        p.chains = cur.map(chains_of).unwrap_or_default();
        p.steps.push(Step::Table(p.table.to_string()));
        for op in &t.ops {
            p.op(op)?;
        }
    }
    // Once per table: the kernel refuses a second flags change of one table in a batch.
    let mut woken: Vec<&str> = Vec::new();
    for t in doc {
        if !woken.contains(&t.table.as_str()) {
            woken.push(&t.table);
            p.steps.push(Step::Wake(t.table.clone()));
        }
    }
    Ok(p.steps)
}

/// The chains of a table as read, each rule by its handle.
fn chains_of(cur: &CurrentTable) -> BTreeMap<String, Chain> {
    let chain = |c: &CurrentChain| Chain {
        exists: Some(true),
        base: c.base,
        rules: c
            .rules
            .iter()
            .map(|(h, r)| (Ref::Handle(*h), r.clone()))
            .collect(),
    };
    cur.chains
        .iter()
        .map(|c| (c.name.clone(), chain(c)))
        .collect()
}

/// The planning of one table at a time: its chains as the document has left them so far, and the steps and
/// rule ids of the whole batch.
struct Planner<'a> {
    family: Family,
    table: &'a str,
    /// The tables' current rules were read: a chain not among them does not exist.
    known: bool,
    chains: BTreeMap<String, Chain>,
    steps: Vec<Step>,
    /// The last `NFTA_RULE_ID` given to a rule of the batch.
    id: u32,
}

impl Planner<'_> {
    fn fail(&self, msg: String) -> Error {
        Error::Rules(format!(
            "iptables-nft ({}) table {}: {msg}",
            self.family.name(),
            self.table
        ))
    }

    fn names(&self, c: &str) -> (String, String) {
        (self.table.to_string(), c.to_string())
    }

    /// The chain `name` as followed so far (created empty, unknown or absent, on first mention).
    fn chain(&mut self, name: &str) -> &mut Chain {
        let known = self.known;
        self.chains.entry(name.to_string()).or_insert(Chain {
            exists: known.then_some(false),
            base: false,
            rules: Vec::new(),
        })
    }

    /// A built-in chain is created (as its base chain) when first used, as iptables-nft does.
    fn ensure_base(&mut self, name: &str) {
        let Some(b) = builtin::find(self.table, name) else {
            return;
        };
        let table = self.table.to_string();
        let ch = self.chain(name);
        if !ch.base {
            ch.base = true;
            ch.exists = Some(true);
            self.steps.push(Step::BaseChain { table, chain: b });
        }
    }

    fn op(&mut self, op: &Op) -> Result<()> {
        let builtin = |c: &str| builtin::find(self.table, c).is_some();
        match op {
            Op::NewChain(c) => {
                if builtin(c) {
                    return Err(self.fail(format!("-N {c}: a built-in chain cannot be created")));
                }
                let (table, chain) = self.names(c);
                self.steps.push(Step::NewChain { table, chain });
                *self.chain(c) = Chain {
                    exists: Some(true),
                    base: false,
                    rules: Vec::new(),
                };
            }
            Op::Flush(c) => {
                self.ensure_base(c);
                let (table, chain) = self.names(c);
                self.steps.push(Step::Flush { table, chain });
                self.chain(c).rules.clear();
            }
            Op::DeleteChain(c) => {
                if builtin(c) {
                    return Err(self.fail(format!("-X {c}: a built-in chain cannot be deleted")));
                }
                let (table, chain) = self.names(c);
                self.steps.push(Step::DeleteChain { table, chain });
                let known = self.known;
                let ch = self.chain(c);
                ch.exists = known.then_some(false);
                ch.rules.clear();
            }
            Op::Append(c, r) => self.add(c, None, r)?,
            Op::Insert(c, n, r) => self.add(c, Some(*n), r)?,
            Op::Delete(c, r) => self.delete(c, r)?,
        }
        Ok(())
    }

    /// `-A` (`at` none) or `-I C n`: the rule after the (n-1)th rule as the chain stands now.
    fn add(&mut self, c: &str, at: Option<usize>, r: &Rule) -> Result<()> {
        self.ensure_base(c);
        if self.chain(c).exists == Some(false) {
            return Err(self.fail(format!("chain {c} does not exist")));
        }
        let exprs = encode_rule::encode(self.family, r)
            .map_err(|e| self.fail(format!("chain {c}: {e}")))?;
        let len = self.chain(c).rules.len();
        let (append, after, pos) = match at {
            Some(n) if n == 0 || n > len + 1 => {
                return Err(self.fail(format!(
                    "-I {c} {n}: the chain has {len} rules at that point"
                )))
            }
            Some(1) => (false, None, 0),
            Some(n) => (true, Some(self.chain(c).rules[n - 2].0), n - 1),
            None => (true, None, len),
        };
        self.id += 1;
        let id = self.id;
        self.chain(c).rules.insert(pos, (Ref::Id(id), r.clone()));
        let (table, chain) = self.names(c);
        self.steps.push(Step::Rule {
            table,
            chain,
            rule: r.clone(),
            exprs,
            id,
            append,
            after,
        });
        Ok(())
    }

    /// `-D C rule`: the first rule that prints the same, as the tool and the other two appliers
    /// (xtables::ops, legacy::ops) match it: a model read from the kernel that differs from the document's
    /// only where the text cannot show it is the same rule to iptables.
    fn delete(&mut self, c: &str, r: &Rule) -> Result<()> {
        let family = self.family;
        let text = super::describe(family, r);
        let same = |x: &Rule| x == r || super::describe(family, x) == text;
        let Some(at) = self.chain(c).rules.iter().position(|(_, x)| same(x)) else {
            return Err(self.fail(format!("-D {c}: no such rule in the chain ({text})")));
        };
        let (which, rule) = self.chain(c).rules.remove(at);
        let (table, chain) = self.names(c);
        self.steps.push(Step::DeleteRule {
            table,
            chain,
            rule,
            which,
        });
        Ok(())
    }
}
