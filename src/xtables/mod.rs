//! Legacy x_tables (`iptables-legacy`) in a pod's network namespace, read without exec. Whichever backend
//! programmed our redirect (native nftables, iptables-nft or iptables-legacy), the kernel also runs the
//! hooks of every legacy table instantiated in the namespace: raw (priority -300), mangle (-150) and nat
//! (-100, and a nat table registered after ours runs first) at prerouting and output, before or with our
//! redirect. A rule there that can move traffic (notrack, a NAT binding, a mark, a drop, ...) is reported
//! by CHECK and stops a re-ADD from answering "already in place".
//!
//! Pure: [`entries`] (the getsockopt table format), the target classification and [`first_mover`], which
//! the iptables backend also applies to its own `iptables-save` dump. Effect: [`findings`] reads the table
//! names from `/proc/thread-self/net/ip{,6}_tables_names` (only tables that exist: asking for another one
//! would instantiate it) and each table with two getsockopt calls ([`sockopt`]).

pub mod entries;
mod sockopt;

use crate::error::{IoContext, Result};
use crate::iptables::Family;
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

/// Tables whose prerouting/output hooks run before or with our redirect.
pub const BEFORE_OURS: [&str; 3] = ["raw", "mangle", "nat"];
/// Their built-in chains at those hooks.
pub const HOOKED: [&str; 2] = ["PREROUTING", "OUTPUT"];
/// Both families (nftables mode's inet tables redirect both).
pub const FAMILIES: [Family; 2] = [Family::V4, Family::V6];
/// Targets that only log or trace: harmless. `ACCEPT` and `RETURN` only end this table's traversal; the
/// kernel's next hook (ours) still runs.
const HARMLESS: [&str; 4] = ["LOG", "NFLOG", "TRACE", "ULOG"];

enum Effect {
    None,
    Follow(String),
    Moves,
}

fn effect(t: &Target) -> Effect {
    match t {
        Target::Fall | Target::Accept | Target::Return => Effect::None,
        Target::Jump(c) => Effect::Follow(c.clone()),
        Target::Ext(n) if HARMLESS.contains(&n.as_str()) => Effect::None,
        Target::Drop | Target::Queue | Target::Ext(_) => Effect::Moves,
    }
}

/// The first rule reachable from chain `start` (following jumps, each chain once) that can move traffic,
/// leaving out the rules `skip` names: `(chain, 1-based index, rule)`.
pub fn first_mover<'a>(
    chains: &'a Chains,
    start: &str,
    skip: &dyn Fn(&str, &Rule) -> bool,
) -> Option<(String, usize, &'a Rule)> {
    fn walk<'a>(
        chains: &'a Chains,
        chain: &str,
        skip: &dyn Fn(&str, &Rule) -> bool,
        seen: &mut Vec<String>,
    ) -> Option<(String, usize, &'a Rule)> {
        if seen.iter().any(|c| c == chain) {
            return None;
        }
        seen.push(chain.to_string());
        for (i, r) in chains.get(chain)?.iter().enumerate() {
            if skip(chain, r) {
                continue;
            }
            match effect(&r.target) {
                Effect::None => {}
                Effect::Moves => return Some((chain.to_string(), i + 1, r)),
                Effect::Follow(c) => {
                    if let Some(found) = walk(chains, &c, skip, seen) {
                        return Some(found);
                    }
                }
            }
        }
        None
    }
    walk(chains, start, skip, &mut Vec::new())
}

/// The legacy tables instantiated in the current thread's namespace, for `family`, with their chains.
pub fn read(family: Family) -> Result<Vec<(String, Chains)>> {
    let (names, layout, v6) = match family {
        Family::V4 => (
            "/proc/thread-self/net/ip_tables_names",
            entries::IPV4,
            false,
        ),
        Family::V6 => (
            "/proc/thread-self/net/ip6_tables_names",
            entries::IPV6,
            true,
        ),
    };
    // Absent: the x_tables module is not loaded, so no legacy table exists anywhere.
    let text = match std::fs::read_to_string(names) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).io_context(|| format!("read {names}")),
    };
    let mut out = Vec::new();
    for table in text.lines().map(str::trim).filter(|t| !t.is_empty()) {
        let (info, blob) = sockopt::read(v6, table)?;
        out.push((table.to_string(), entries::chains(layout, &info, &blob)?));
    }
    Ok(out)
}

/// One line per legacy raw/mangle/nat table and hooked chain whose rules can move traffic past our
/// redirect, in the current thread's namespace, for each of `families`.
pub fn findings(families: &[Family]) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for &family in families {
        for (table, chains) in read(family)? {
            if !BEFORE_OURS.contains(&table.as_str()) {
                continue;
            }
            out.extend(table_findings(family, &table, &chains, &|_, _| false));
        }
    }
    Ok(out)
}

/// [`findings`] for one table already read, with the rules `skip` names left out.
pub fn table_findings(
    family: Family,
    table: &str,
    chains: &Chains,
    skip: &dyn Fn(&str, &Rule) -> bool,
) -> Vec<String> {
    HOOKED
        .iter()
        .filter_map(|start| {
            let (chain, i, r) = first_mover(chains, start, skip)?;
            let via = if chain == *start {
                String::new()
            } else {
                format!(" (via chain {chain})")
            };
            Some(format!(
                "legacy iptables ({}) -t {table} {start} rule {i}{via}: {}",
                family.name(),
                r.text
            ))
        })
        .collect()
}

/// Whether the legacy tables hold one of our `ISTIO_*` chains (which x_tables backend an unsuffixed
/// `iptables` is).
pub fn holds_istio_chains(family: Family) -> Result<bool> {
    Ok(read(family)?
        .iter()
        .any(|(_, c)| c.keys().any(|k| k.starts_with("ISTIO_"))))
}
