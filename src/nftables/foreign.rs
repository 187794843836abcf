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

use super::expr::{Data, Expr, NFT_JUMP, NFT_RETURN, NF_ACCEPT};
use super::state::describe;
use std::collections::BTreeMap;

pub const NFPROTO_INET: u8 = 1;
pub const NFPROTO_IPV4: u8 = 2;
pub const NFPROTO_NETDEV: u8 = 5;
pub const NFPROTO_IPV6: u8 = 10;
pub const HOOK_PREROUTING: u32 = 0;
pub const HOOK_OUTPUT: u32 = 3;
/// `NF_INET_INGRESS` (inet family) and `NF_NETDEV_INGRESS` (netdev family).
const HOOK_INET_INGRESS: u32 = 5;
const HOOK_NETDEV_INGRESS: u32 = 0;
const NFT_CONTINUE: i32 = -1;
const NFT_BREAK: i32 = -2;
const NFT_GOTO: i32 = -4;

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

/// One of our base chains, where the kernel runs it, and how to name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OurHook {
    pub hooknum: u32,
    pub priority: i32,
    pub label: String,
}

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

pub fn family_name(f: u8) -> &'static str {
    match f {
        NFPROTO_INET => "inet",
        NFPROTO_IPV4 => "ip",
        NFPROTO_IPV6 => "ip6",
        3 => "arp",
        NFPROTO_NETDEV => "netdev",
        7 => "bridge",
        _ => "?",
    }
}

fn hook_name(family: u8, hooknum: u32) -> &'static str {
    match (family, hooknum) {
        (NFPROTO_NETDEV, 0) => "ingress",
        (NFPROTO_NETDEV, 1) => "egress",
        (_, 0) => "prerouting",
        (_, 1) => "input",
        (_, 2) => "forward",
        (_, 3) => "output",
        (_, 4) => "postrouting",
        (_, 5) => "ingress",
        _ => "other",
    }
}

/// Which of our chains `c` runs before (or with), or `None` when it cannot see our traffic first.
pub fn runs_before(c: &BaseChain, ours: &[OurHook]) -> Option<String> {
    match (c.family, c.hooknum) {
        (NFPROTO_NETDEV, HOOK_NETDEV_INGRESS) | (NFPROTO_INET, HOOK_INET_INGRESS) => {
            Some("every IP hook (ingress)".into())
        }
        (NFPROTO_INET | NFPROTO_IPV4 | NFPROTO_IPV6, h @ (HOOK_PREROUTING | HOOK_OUTPUT)) => {
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

enum Effect {
    None,
    Jump(String),
    Moves,
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
        } => Effect::None,
        Expr::Immediate {
            data: Data::Verdict { code, chain },
            ..
        } => match (*code, chain) {
            (NF_ACCEPT | NFT_CONTINUE | NFT_BREAK | NFT_RETURN, _) => Effect::None,
            (NFT_JUMP | NFT_GOTO, Some(c)) => Effect::Jump(c.clone()),
            _ => Effect::Moves,
        },
        Expr::Other(n) if HARMLESS.contains(&n.as_str()) => Effect::None,
        Expr::Other(n) if n.starts_with("match ") || HARMLESS_TARGETS.contains(&n.as_str()) => {
            Effect::None
        }
        _ => Effect::Moves,
    }
}

/// The chains `rules` jump or go to (in their own table).
pub fn jumps(rules: &[Vec<Expr>]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for e in rules.iter().flatten() {
        if let Effect::Jump(c) = effect(e) {
            if !out.contains(&c) {
                out.push(c);
            }
        }
    }
    out
}

/// The first rule reachable from `key` that can move traffic: `(chain it is in, 1-based index, text)`.
fn first_mover(
    key: &ChainKey,
    rules: &Rules,
    seen: &mut Vec<ChainKey>,
) -> Option<(ChainKey, usize, String)> {
    if seen.contains(key) {
        return None;
    }
    seen.push(key.clone());
    let Some(list) = rules.get(key) else {
        return Some((key.clone(), 0, "the chain could not be read".into()));
    };
    for (i, r) in list.iter().enumerate() {
        for e in r {
            match effect(e) {
                Effect::None => {}
                Effect::Moves => return Some((key.clone(), i + 1, describe(r))),
                Effect::Jump(c) => {
                    let to = (key.0, key.1.clone(), c);
                    if let Some(found) = first_mover(&to, rules, seen) {
                        return Some(found);
                    }
                }
            }
        }
    }
    None
}

/// One line per foreign base chain that runs before ours and holds (or jumps to) a rule that can move
/// traffic, naming the chain, where it runs, what it runs before and the first such rule.
pub fn findings(base: &[BaseChain], rules: &Rules, ours: &[OurHook]) -> Vec<String> {
    let mut out = Vec::new();
    for c in base {
        let Some(before) = runs_before(c, ours) else {
            continue;
        };
        let key = (c.family, c.table.clone(), c.chain.clone());
        let Some((at, i, text)) = first_mover(&key, rules, &mut Vec::new()) else {
            continue;
        };
        let fam = family_name(c.family);
        let devices = if c.devices.is_empty() {
            String::new()
        } else {
            format!(" device {}", c.devices.join(","))
        };
        let n = rules.get(&key).map_or(0, Vec::len);
        let via = if at == key {
            String::new()
        } else {
            format!(" (via {fam} {} {})", at.1, at.2)
        };
        out.push(format!(
            "foreign chain {fam} {} {} (hook {}{devices}, priority {}, {n} rules) runs before {before}: rule {i}{via}: {text}",
            c.table,
            c.chain,
            hook_name(c.family, c.hooknum),
            c.priority,
        ));
    }
    out
}

#[cfg(test)]
#[path = "foreign_tests.rs"]
mod tests;
