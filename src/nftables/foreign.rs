//! Foreign nf_tables base chains the kernel runs before our redirect, and whether their rules can move
//! traffic past it (pure). The kernel consults, for a packet our redirect should catch: every base chain at
//! netdev ingress and inet ingress (before any IP hook, so before conntrack and nat), then, at prerouting
//! and output, every base chain in priority order. Chains of equal priority run in reverse registration
//! order (the one added last runs first), which a dump cannot show, so equal counts as before. `accept`
//! only ends one base chain (the next one still runs), so it cannot get past ours; what can is anything
//! that sets up NAT first (nat hooks stop at the first binding), `notrack` (no conntrack, no nat), a drop,
//! a queue, a mark or a packet rewrite. So a rule made only of loads, comparisons, counters, logs, limits
//! and accept/continue/return verdicts is harmless; any other expression, or a jump to a chain with one,
//! is reported (unknown means reported). Base chains at other hooks (input, forward, postrouting, egress)
//! or after ours are not looked at.

use super::expr::{Data, Expr, NFT_BREAK, NFT_CONTINUE, NFT_GOTO, NFT_JUMP, NFT_RETURN};
use super::expr_text::describe;
use crate::netfilter::bypass::{self, Effect, Steps};
use crate::netfilter::{family_name, hook_name, OurHook, NF_ACCEPT, NF_INET_INGRESS, OUR_HOOKS};
use crate::netfilter::{
    NFPROTO_INET, NFPROTO_IPV4, NFPROTO_IPV6, NFPROTO_NETDEV, NF_NETDEV_INGRESS,
};
use std::collections::BTreeMap;

/// Expressions (by the name a dump gives them) that only match, count or log.
const HARMLESS: [&str; 12] = [
    "log",
    "limit",
    "quota",
    "range",
    "fib",
    "numgen",
    "hash",
    "rt",
    "socket",
    "last",
    "connlimit",
    "osf",
];
/// x_tables targets of iptables-nft rules that only log or trace.
const HARMLESS_TARGETS: [&str; 4] = ["target LOG", "target NFLOG", "target TRACE", "target ULOG"];

/// A base chain outside our tables (of a table that is not dormant).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BaseChain {
    pub family: u8,
    pub table: String,
    pub chain: String,
    pub hooknum: u32,
    pub priority: i32,
    pub devices: Vec<String>,
}

/// `(family, table, chain)` of a chain whose rules were read.
pub type ChainKey = (u8, String, String);

/// The rules read for foreign chains.
pub type Rules = BTreeMap<ChainKey, Vec<Vec<Expr>>>;

/// Which of our chains `c` runs before (or with), or `None` when it cannot see our traffic first.
pub fn runs_before(c: &BaseChain, ours: &[OurHook]) -> Option<String> {
    match (c.family, c.hooknum) {
        (NFPROTO_NETDEV, NF_NETDEV_INGRESS) | (NFPROTO_INET, NF_INET_INGRESS) => {
            Some("every IP hook (ingress)".into())
        }
        (NFPROTO_INET | NFPROTO_IPV4 | NFPROTO_IPV6, h) if OUR_HOOKS.iter().any(|o| o.0 == h) => {
            let v: Vec<&str> = ours
                .iter()
                .filter(|o| o.hooknum == h && c.priority <= o.priority)
                .map(|o| o.label.as_str())
                .collect();
            (!v.is_empty()).then(|| v.join(", "))
        }
        _ => None,
    }
}

impl Steps for Vec<Expr> {
    fn effects(&self) -> impl Iterator<Item = Effect> + '_ {
        self.iter().map(effect)
    }

    fn text(&self) -> String {
        describe(self)
    }
}

fn effect(e: &Expr) -> Effect {
    match e {
        Expr::Meta { .. }
        | Expr::Cmp { .. }
        | Expr::Payload { .. }
        | Expr::Bitwise { .. }
        | Expr::Lookup { .. }
        | Expr::Counter
        | Expr::Ct { .. }
        | Expr::Immediate {
            data: Data::Value(_),
            ..
        } => Effect::Harmless,
        Expr::Immediate {
            data: Data::Verdict { code, chain },
            ..
        } => match (*code, chain) {
            (NF_ACCEPT | NFT_CONTINUE | NFT_BREAK | NFT_RETURN, _) => Effect::Harmless,
            (NFT_JUMP | NFT_GOTO, Some(c)) => Effect::Jump(c.clone()),
            _ => Effect::Moves,
        },
        Expr::Other(n) if HARMLESS.contains(&n.as_str()) => Effect::Harmless,
        Expr::Other(n) if n.starts_with("match ") || HARMLESS_TARGETS.contains(&n.as_str()) => {
            Effect::Harmless
        }
        _ => Effect::Moves,
    }
}

/// The chains `rules` jump or go to (in their own table).
pub fn jumps(rules: &[Vec<Expr>]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for e in rules.iter().flat_map(Steps::effects) {
        if let Effect::Jump(c) = e {
            if !out.contains(&c) {
                out.push(c);
            }
        }
    }
    out
}

/// One line per foreign base chain that runs before ours and holds (or jumps to) a rule that can move
/// traffic, naming the chain, where it runs, what it runs before and the first such rule
/// ([`bypass::finding`]).
pub fn findings(base: &[BaseChain], rules: &Rules, ours: &[OurHook]) -> Vec<String> {
    let mut out = Vec::new();
    for c in base {
        let Some(before) = runs_before(c, ours) else {
            continue;
        };
        let fam = family_name(c.family);
        let devices = if c.devices.is_empty() {
            String::new()
        } else {
            format!(" device {}", c.devices.join(","))
        };
        let chain = |name: &str| (c.family, c.table.clone(), name.to_string());
        let n = rules.get(&chain(&c.chain)).map_or(0, Vec::len);
        let hooked = format!(
            "foreign chain {fam} {} {} (hook {}{devices}, priority {}, {n} rules)",
            c.table,
            c.chain,
            hook_name(c.family, c.hooknum),
            c.priority,
        );
        let read = |name: &str| rules.get(&chain(name)).map(Vec::as_slice);
        let via = |name: &str| format!("{fam} {} {name}", c.table);
        out.extend(bypass::finding(
            &hooked,
            Some(&before),
            &c.chain,
            &read,
            &via,
        ));
    }
    out
}

#[cfg(test)]
#[path = "foreign_tests.rs"]
mod tests;
