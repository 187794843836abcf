//! Legacy x_tables (`iptables-legacy`) in a pod's network namespace, read without exec. Whichever backend
//! programmed our redirect (native nftables, iptables-nft or iptables-legacy), the kernel also runs the
//! hooks of every legacy table instantiated in the namespace: raw (priority -300), mangle (-150) and nat
//! (-100, and a nat table registered after ours runs first) at prerouting and output, before or with our
//! redirect. A rule there that can move traffic (notrack, a NAT binding, a mark, a drop, ...) is reported
//! by CHECK and stops a re-ADD from answering "already in place"; so is a rule in a chain that runs after
//! our redirect ([`AFTER_OURS`]) that can still undo it or copy it out of the pod (a queue, `TEE`, ...).
//!
//! Pure: [`entries`] (the getsockopt table format), what a target can do (a rule's [`Steps`] for the
//! walk in [`bypass`]) and [`table_findings`] and [`after_findings`], which the iptables backend also
//! applies to its own `iptables-save` dump. Effect: [`findings`] reads the table
//! names from `/proc/thread-self/net/ip{,6}_tables_names` (only tables that exist: asking for another one
//! would instantiate it) and each table with two getsockopt calls ([`sockopt`]).

pub mod after;
pub mod chain_name;
pub mod entries;
pub mod legacy;
pub mod names;
pub mod ops;
pub mod rule;
pub mod save_text;
pub mod sockopt;
pub mod spec;

pub use after::{after_findings, let_through_findings, AFTER_OURS};

use crate::error::{IoContext, Result};
use crate::netfilter::bypass::{self, Effect, Steps};
use crate::netfilter::{Family, OUR_HOOKS};
use std::collections::BTreeMap;

/// What a rule does with a packet, as far as our redirect is concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// No target: on to the next rule.
    Fall,
    Accept,
    Drop,
    Return,
    Queue,
    /// Jump or goto a user chain of the same table.
    Jump(String),
    /// A target extension (`CT`, `DNAT`, `LOG`, ...), by name.
    Ext(String),
}

impl Target {
    pub fn text(&self) -> String {
        match self {
            Target::Fall => "no target".into(),
            Target::Accept => "target ACCEPT".into(),
            Target::Drop => "target DROP".into(),
            Target::Return => "target RETURN".into(),
            Target::Queue => "target QUEUE".into(),
            Target::Jump(c) => format!("jump to {c}"),
            Target::Ext(n) => format!("target {n}"),
        }
    }
}

/// One rule: how to name it, and its target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub text: String,
    pub target: Target,
}

/// A table's chains by name, rules in order.
pub type Chains = BTreeMap<String, Vec<Rule>>;

/// The tables iptables knows (and lists, and iptables-nft makes in `ip`/`ip6`).
pub const TABLES: [&str; 5] = ["raw", "mangle", "nat", "filter", "security"];
/// Tables whose prerouting/output hooks run before or with our redirect.
pub const BEFORE_OURS: [&str; 3] = ["raw", "mangle", "nat"];
/// Targets that only log or trace: harmless. `ACCEPT` and `RETURN` only end this table's traversal; the
/// kernel's next hook (ours) still runs.
const HARMLESS: [&str; 4] = ["LOG", "NFLOG", "TRACE", "ULOG"];

/// What a target can do to a packet our redirect should catch, in a chain that runs before ours: only
/// matches, logs, `ACCEPT` and `RETURN` (which end this table's traversal; ours still runs) are harmless.
pub fn before_effect(t: &Target) -> Effect {
    match t {
        Target::Fall | Target::Accept | Target::Return => Effect::Harmless,
        Target::Jump(c) => Effect::Jump(c.clone()),
        Target::Ext(n) if HARMLESS.contains(&n.as_str()) => Effect::Harmless,
        Target::Drop | Target::Queue | Target::Ext(_) => Effect::Moves,
    }
}

impl Steps for Rule {
    fn effects(&self) -> impl Iterator<Item = Effect> + '_ {
        std::iter::once(before_effect(&self.target))
    }

    fn text(&self) -> String {
        self.text.clone()
    }
}

/// The names of the legacy tables instantiated in the current thread's namespace, for `family`: one read
/// of `/proc/thread-self/net/ip{,6}_tables_names` (a table is instantiated in a namespace on first use, so
/// a fresh pod's namespace lists none).
pub fn table_names(family: Family) -> Result<Vec<String>> {
    let names = match family {
        Family::V4 => "/proc/thread-self/net/ip_tables_names",
        Family::V6 => "/proc/thread-self/net/ip6_tables_names",
    };
    // Absent: the x_tables module is not loaded, so no legacy table exists anywhere.
    let text = match std::fs::read_to_string(names) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).io_context(|| format!("read {names}")),
    };
    Ok(text
        .lines()
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(str::to_string)
        .collect())
}

/// The legacy tables instantiated in the current thread's namespace, for `family`, with their chains.
pub fn read(family: Family) -> Result<Vec<(String, Chains)>> {
    let (layout, v6) = match family {
        Family::V4 => (entries::IPV4, false),
        Family::V6 => (entries::IPV6, true),
    };
    let mut out = Vec::new();
    for table in table_names(family)? {
        let (info, blob) = sockopt::read(v6, &table)?;
        let chains = entries::chains(layout, &info, &blob)?;
        out.push((table, chains));
    }
    Ok(out)
}

/// One line per legacy raw/mangle/nat table and hooked chain whose rules can move traffic past our
/// redirect, and per legacy chain after ours that can undo it ([`after_findings`]), in the current
/// thread's namespace, for each of `families`.
pub fn findings(families: &[Family]) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for &family in families {
        for (table, chains) in read(family)? {
            if BEFORE_OURS.contains(&table.as_str()) {
                out.extend(table_findings("legacy iptables", family, &table, &chains));
            }
            out.extend(after_findings("legacy iptables", family, &table, &chains));
        }
    }
    Ok(out)
}

/// [`findings`] for one table already read, named as `tool` lists it: `{tool} ({family}) -t {table}
/// {chain} rule {i}[ (via chain {c})]: {rule}` ([`bypass::finding`]). A hooked chain the table does not
/// have runs nothing.
pub fn table_findings(tool: &str, family: Family, table: &str, chains: &Chains) -> Vec<String> {
    let rules = |c: &str| chains.get(c).map(Vec::as_slice);
    OUR_HOOKS
        .iter()
        .filter(|(_, start)| chains.contains_key(*start))
        .filter_map(|(_, start)| {
            let hooked = format!("{tool} ({}) -t {table} {start}", family.name());
            bypass::finding(&hooked, None, start, &rules, &|c| format!("chain {c}"))
        })
        .collect()
}
