//! A restore document (`iptables-restore --noflush` operations per table) as the steps of one nf_tables
//! batch (pure). The chains' rules are followed through the document, from what the tables hold now
//! ([`CurrentTable`], read only when the document inserts or deletes) and the rules the batch adds, so `-I C n`
//! lands after the (n-1)th rule as it stands at that line (an existing rule by handle, one of the batch by
//! its `NFTA_RULE_ID`) and `-D C rule` names the first equal rule. Encoding the steps: [`super::batch`].

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

/// One table as read from the kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CurrentTable {
    pub name: String,
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
    /// `NEWTABLE` (create if absent).
    Table(String),
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

fn fail(family: Family, table: &str, msg: String) -> Error {
    Error::Rules(format!(
        "iptables-nft ({}) table {table}: {msg}",
        family.name()
    ))
}

/// The steps of `doc`, given `current` (required when [`needs_current`]; `None` otherwise).
pub fn plan(
    family: Family,
    doc: &[TableOps],
    current: Option<&[CurrentTable]>,
) -> Result<Vec<Step>> {
    let mut steps = Vec::new();
    let mut id = 0u32;
    for t in doc {
        let table = t.table.as_str();
        let err = |m: String| fail(family, table, m);
        if builtin::chains(table).is_none() {
            return Err(err("not a table iptables knows".into()));
        }
        let cur = current.and_then(|c| c.iter().find(|c| c.name == table));
        let mut chains: BTreeMap<String, Chain> = BTreeMap::new();
        if let Some(cur) = cur {
            for c in &cur.chains {
                let rules = c.rules.iter().map(|(h, r)| (Ref::Handle(*h), r.clone()));
                let chain = Chain {
                    exists: Some(true),
                    base: c.base,
                    rules: rules.collect(),
                };
                chains.insert(c.name.clone(), chain);
            }
        }
        let known = current.is_some();
        steps.push(Step::Table(table.to_string()));
        for op in &t.ops {
            let name = match op {
                Op::NewChain(c) | Op::Flush(c) | Op::DeleteChain(c) => c,
                Op::Append(c, _) | Op::Insert(c, _, _) | Op::Delete(c, _) => c,
            };
            let bi = builtin::find(table, name);
            let ch = chains.entry(name.clone()).or_insert(Chain {
                exists: known.then_some(false),
                base: false,
                rules: Vec::new(),
            });
            // A built-in chain is created (as its base chain) when first used, as iptables-nft does.
            let ensure_base = |steps: &mut Vec<Step>, ch: &mut Chain| {
                if let Some(b) = bi.filter(|_| !ch.base) {
                    steps.push(Step::BaseChain {
                        table: table.to_string(),
                        chain: b,
                    });
                    ch.base = true;
                    ch.exists = Some(true);
                }
            };
            let s = |c: &str| (table.to_string(), c.to_string());
            match op {
                Op::NewChain(c) => {
                    if bi.is_some() {
                        return Err(err(format!("-N {c}: a built-in chain cannot be created")));
                    }
                    let (table, chain) = s(c);
                    steps.push(Step::NewChain { table, chain });
                    *ch = Chain {
                        exists: Some(true),
                        base: false,
                        rules: Vec::new(),
                    };
                }
                Op::Flush(c) => {
                    ensure_base(&mut steps, ch);
                    let (table, chain) = s(c);
                    steps.push(Step::Flush { table, chain });
                    ch.rules.clear();
                }
                Op::DeleteChain(c) => {
                    if bi.is_some() {
                        return Err(err(format!("-X {c}: a built-in chain cannot be deleted")));
                    }
                    let (table, chain) = s(c);
                    steps.push(Step::DeleteChain { table, chain });
                    ch.exists = known.then_some(false);
                    ch.rules.clear();
                }
                Op::Append(c, r) | Op::Insert(c, _, r) => {
                    ensure_base(&mut steps, ch);
                    if ch.exists == Some(false) {
                        return Err(err(format!("chain {c} does not exist")));
                    }
                    let exprs = encode_rule::encode(family, r)
                        .map_err(|e| err(format!("chain {c}: {e}")))?;
                    id += 1;
                    let (append, after, at) = match op {
                        Op::Insert(_, n, _) if *n == 0 || *n > ch.rules.len() + 1 => {
                            return Err(err(format!(
                                "-I {c} {n}: the chain has {} rules at that point",
                                ch.rules.len()
                            )))
                        }
                        Op::Insert(_, 1, _) => (false, None, 0),
                        Op::Insert(_, n, _) => (true, Some(ch.rules[n - 2].0), n - 1),
                        _ => (true, None, ch.rules.len()),
                    };
                    ch.rules.insert(at, (Ref::Id(id), r.clone()));
                    let (table, chain) = s(c);
                    let rule = r.clone();
                    steps.push(Step::Rule {
                        table,
                        chain,
                        rule,
                        exprs,
                        id,
                        append,
                        after,
                    });
                }
                Op::Delete(c, r) => {
                    // The first rule that prints the same, as the tool and the other two appliers
                    // (xtables::ops, legacy::ops) match it: a model read from the kernel that differs from
                    // the document's only where the text cannot show it is the same rule to iptables.
                    let text = super::describe(family, r);
                    let same = |x: &Rule| x == r || super::describe(family, x) == text;
                    let Some(at) = ch.rules.iter().position(|(_, x)| same(x)) else {
                        return Err(err(format!("-D {c}: no such rule in the chain ({text})")));
                    };
                    let (which, rule) = ch.rules.remove(at);
                    let (table, chain) = s(c);
                    steps.push(Step::DeleteRule {
                        table,
                        chain,
                        rule,
                        which,
                    });
                }
            }
        }
    }
    Ok(steps)
}
