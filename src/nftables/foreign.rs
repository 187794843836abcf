//! Foreign nf_tables base chains the kernel runs on our redirected traffic, before or after our redirect,
//! and whether their rules can move traffic past it (pure).
//!
//! Before ours: every base chain at netdev ingress and inet ingress (before any IP hook, so before
//! conntrack and nat), then, at prerouting and output, every base chain in priority order. Chains of equal
//! priority run in reverse registration order (the one added last runs first), which a dump cannot show,
//! so equal counts as before. `accept` only ends one base chain (the next one still runs), so it cannot get
//! past ours; what can is anything that sets up NAT first (nat hooks stop at the first binding), `notrack`
//! (no conntrack, no nat), a drop, a queue, a mark or a packet rewrite.
//!
//! After ours: prerouting and output above our priority, input (which every redirected packet reaches:
//! inbound after prerouting, outbound after looping through `lo`), postrouting and netdev egress. NAT
//! there cannot undo ours (the connection is bound at the first nat chain, later ones are skipped;
//! postrouting's is source NAT), but at prerouting and output it binds what our chains let through
//! unredirected (an excluded port, [`nat_binds`]) and can send that past the proxy, so it is named; nor can `notrack` (conntrack already holds the packet), a drop or a
//! reject; but a stateless write can put a redirected packet's address or port back (`tcp dport set ct
//! original proto-dst`) and so can a mark, a `ct set`, a queue, tproxy, dup or fwd. At postrouting and
//! egress an outbound redirected packet is already routed to `lo`: a write alone there only loses it (it
//! comes back on `lo` addressed elsewhere and is dropped, measured), but a dup, fwd or queue there can send
//! a rewritten copy, or the packet, out of the pod; they get the same test (stricter than needed for a
//! lone write, which is reported too).
//!
//! A rule made only of loads, comparisons, counters, logs, limits and accept/continue/return verdicts (and
//! after ours, NAT, notrack, drop and reject) is harmless; any other expression, or a jump to a chain with
//! one, is reported (unknown means reported). Base chains at forward (which a redirected packet never
//! reaches) and of other families (bridge, arp) are not looked at.

use super::expr::{Data, Expr, NFT_BREAK, NFT_CONTINUE, NFT_GOTO, NFT_JUMP, NFT_RETURN};
use super::expr_text::describe;
use crate::netfilter::bypass::{self, Effect, Steps};
use crate::netfilter::{
    family_name, hook_name, OurHook, NF_ACCEPT, NF_DROP, NF_INET_INGRESS, OUR_HOOKS,
};
use crate::netfilter::{
    NFPROTO_INET, NFPROTO_IPV4, NFPROTO_IPV6, NFPROTO_NETDEV, NF_NETDEV_INGRESS,
};
use crate::netfilter::{NF_INET_LOCAL_IN, NF_INET_POST_ROUTING, NF_NETDEV_EGRESS};
use std::collections::BTreeMap;

/// Expressions (by the name a dump gives them) that only match, count or log (iptables-nft writes some of
/// them itself: `range` for a port range, `limit` for `-m limit`).
pub const HARMLESS: [&str; 12] = [
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

/// Where a foreign base chain runs relative to our redirect, naming our chains it runs before or after.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Position {
    Before(String),
    After(String),
}

impl Position {
    /// How a finding says it.
    fn phrase(&self) -> String {
        match self {
            Position::Before(o) => format!("runs before {o}"),
            Position::After(o) => format!("runs after {o} and can undo its redirect"),
        }
    }
}

/// Where `c` runs on our redirected traffic, or `None` when it cannot see that traffic where a rule could
/// take it past our redirect (see the module comment).
pub fn position(c: &BaseChain, ours: &[OurHook]) -> Option<Position> {
    let labels = |v: Vec<&OurHook>| {
        v.iter()
            .map(|o| o.label.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    match (c.family, c.hooknum) {
        (NFPROTO_NETDEV, NF_NETDEV_INGRESS) | (NFPROTO_INET, NF_INET_INGRESS) => {
            Some(Position::Before("every IP hook (ingress)".into()))
        }
        (NFPROTO_INET | NFPROTO_IPV4 | NFPROTO_IPV6, h) if OUR_HOOKS.iter().any(|o| o.0 == h) => {
            let at: Vec<&OurHook> = ours.iter().filter(|o| o.hooknum == h).collect();
            let before: Vec<&OurHook> = at
                .iter()
                .copied()
                .filter(|o| c.priority <= o.priority)
                .collect();
            if !before.is_empty() {
                Some(Position::Before(labels(before)))
            } else if !at.is_empty() {
                Some(Position::After(labels(at)))
            } else {
                None
            }
        }
        (NFPROTO_INET | NFPROTO_IPV4 | NFPROTO_IPV6, NF_INET_LOCAL_IN | NF_INET_POST_ROUTING)
        | (NFPROTO_NETDEV, NF_NETDEV_EGRESS)
            if !ours.is_empty() =>
        {
            Some(Position::After(labels(ours.iter().collect())))
        }
        _ => None,
    }
}

/// A foreign rule as seen from where its base chain runs: `after` our redirect or before it, and whether
/// NAT there still binds what our chains let through ([`nat_binds`]).
struct Placed<'a> {
    exprs: &'a [Expr],
    after: bool,
    binds: bool,
}

impl Steps for Placed<'_> {
    fn effects(&self) -> impl Iterator<Item = Effect> + '_ {
        self.exprs.iter().map(|e| match e {
            Expr::Redir { .. } if self.binds => Effect::Moves,
            Expr::Other(n) if self.binds && (n == "nat" || n == "masq") => Effect::Moves,
            e => effect(e, self.after),
        })
    }

    fn text(&self) -> String {
        describe(self.exprs)
    }
}

/// Whether NAT in `c` still binds traffic: at prerouting and output (ip, ip6, inet) our nat chains let
/// some traffic through unbound (an excluded port or address, loopback, the proxy's own), and a later nat
/// chain there binds it: `tcp dport 8081 redirect to :8080` at prerouting priority 0, 8081 excluded,
/// reaches the app past the proxy (measured). At input and postrouting NAT is source NAT.
pub fn nat_binds(c: &BaseChain) -> bool {
    c.family != NFPROTO_NETDEV && OUR_HOOKS.iter().any(|o| o.0 == c.hooknum)
}

/// Expressions (by the name a dump gives them) that cannot undo a redirect already made: NAT (the
/// connection is bound at the first nat chain), notrack (conntrack already holds the packet), reject.
const HARMLESS_AFTER: [&str; 4] = ["nat", "masq", "notrack", "reject"];

/// What `e` can do to a packet our redirect should catch, in a chain that runs `after` ours or before.
pub fn effect(e: &Expr, after: bool) -> Effect {
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
            (NF_DROP, _) if after => Effect::Harmless,
            (NFT_JUMP | NFT_GOTO, Some(c)) => Effect::Jump(c.clone()),
            _ => Effect::Moves,
        },
        Expr::Redir { .. } if after => Effect::Harmless,
        Expr::Other(n) if after && HARMLESS_AFTER.contains(&n.as_str()) => Effect::Harmless,
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
    for e in rules.iter().flatten().map(|e| effect(e, false)) {
        if let Effect::Jump(c) = e {
            if !out.contains(&c) {
                out.push(c);
            }
        }
    }
    out
}

/// One line per foreign base chain that runs before ours, or after ours where it can undo the redirect,
/// and holds (or jumps to) a rule that can move traffic from there, naming the chain, where it runs,
/// which of ours it runs before or after and the first such rule ([`bypass::finding`]).
pub fn findings(base: &[BaseChain], rules: &Rules, ours: &[OurHook]) -> Vec<String> {
    let mut out = Vec::new();
    for c in base {
        let Some(pos) = position(c, ours) else {
            continue;
        };
        let after = matches!(pos, Position::After(_));
        let binds = after && nat_binds(c);
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
        // The table's rules as seen from where this chain runs.
        let placed: BTreeMap<&str, Vec<Placed>> = rules
            .iter()
            .filter(|((f, t, _), _)| *f == c.family && *t == c.table)
            .map(|((_, _, name), list)| {
                let list = list
                    .iter()
                    .map(|r| Placed {
                        exprs: r,
                        after,
                        binds,
                    })
                    .collect();
                (name.as_str(), list)
            })
            .collect();
        let read = |name: &str| placed.get(name).map(Vec::as_slice);
        let via = |name: &str| format!("{fam} {} {name}", c.table);
        out.extend(bypass::finding(
            &hooked,
            Some(&pos.phrase()),
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
