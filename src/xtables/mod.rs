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

pub mod chain_name;
pub mod entries;
pub mod legacy;
pub mod names;
pub mod ops;
pub mod rule;
pub mod sockopt;
pub mod spec;

use crate::error::{IoContext, Result};
use crate::netfilter::bypass::{self, Effect, Steps};
use crate::netfilter::{is_our_chain, Family, OUR_HOOKS};
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
/// Targets that only log or trace: harmless. `ACCEPT` and `RETURN` only end this table's traversal; the
/// kernel's next hook (ours) still runs.
const HARMLESS: [&str; 4] = ["LOG", "NFLOG", "TRACE", "ULOG"];

/// Chains of x_tables' own tables that run after our nat redirect on the redirected packets' way (pure
/// knowledge of the kernel's fixed priorities): filter (0) and security (50) OUTPUT after nat OUTPUT
/// (-100), every INPUT (inbound after prerouting, outbound after looping through `lo`) and POSTROUTING.
/// raw and mangle OUTPUT and PREROUTING run before ours ([`BEFORE_OURS`]); FORWARD never sees a
/// redirected packet.
pub const AFTER_OURS: [(&str, &str); 8] = [
    ("filter", "OUTPUT"),
    ("security", "OUTPUT"),
    ("mangle", "INPUT"),
    ("filter", "INPUT"),
    ("security", "INPUT"),
    ("nat", "INPUT"),
    ("mangle", "POSTROUTING"),
    ("nat", "POSTROUTING"),
];
/// Targets that cannot undo a redirect already made, after ours: NAT (the connection is bound at the
/// first nat hook; INPUT's and POSTROUTING's is source NAT), `CT` (conntrack already holds the packet),
/// `REJECT` (fails closed, as `DROP`), and marks: x_tables routes a packet again on a mark only in mangle
/// OUTPUT, before ours, and the nat hook's own re-route has happened (measured: `-t filter -A OUTPUT -j
/// MARK` with an `ip rule fwmark` sending it out of the pod, still captured); a connection mark counts
/// only when a rule before ours restores it, which is named there.
const HARMLESS_AFTER: [&str; 9] = [
    "REJECT",
    "SNAT",
    "MASQUERADE",
    "DNAT",
    "REDIRECT",
    "NETMAP",
    "CT",
    "MARK",
    "CONNMARK",
];

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

/// What a target can do to a packet already redirected, in a chain that runs after ours: a drop, NAT,
/// `CT`, `REJECT` and marks no longer can ([`HARMLESS_AFTER`]); a queue can (a program rewrites the
/// packet and the kernel routes it again), so can `TEE` (a copy of the app's traffic leaves the pod,
/// measured) and a native nf_tables write in iptables-nft's tables (`tcp dport set ct original
/// proto-dst` in filter INPUT puts a redirected packet's port back, measured); anything unknown is
/// reported, as in the nftables walk ([`crate::nftables::foreign::effect`]).
pub fn after_effect(t: &Target) -> Effect {
    match t {
        Target::Drop => Effect::Harmless,
        Target::Ext(n) if HARMLESS_AFTER.contains(&n.as_str()) => Effect::Harmless,
        t => before_effect(t),
    }
}

/// What a target can do to a packet our nat chain let through unredirected (an excluded port or
/// address, the proxy's own traffic, loopback), after our jump in the same nat chain: its connection is
/// not bound yet, so `DNAT`, `REDIRECT` and `NETMAP` there still send it elsewhere (an excluded inbound
/// port redirected to the app's port skips the proxy, measured); otherwise as [`after_effect`].
pub fn let_through_effect(t: &Target) -> Effect {
    match t {
        Target::Ext(n) if ["DNAT", "REDIRECT", "NETMAP"].contains(&n.as_str()) => Effect::Moves,
        t => after_effect(t),
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

/// A rule of a chain that runs after our redirect, as the walk sees it ([`after_effect`]), or after our
/// jump in the same nat chain ([`let_through_effect`]).
struct AfterOurs<'a>(&'a Rule, fn(&Target) -> Effect);

impl Steps for AfterOurs<'_> {
    fn effects(&self) -> impl Iterator<Item = Effect> + '_ {
        std::iter::once((self.1)(&self.0.target))
    }

    fn text(&self) -> String {
        self.0.text.clone()
    }
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
/// redirect, and per legacy chain after ours that can undo it ([`after_findings`]), in the current thread's namespace, for each of `families`.
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

/// One line per chain of `table` in [`AFTER_OURS`] whose rules (or the chains they jump to) can undo a
/// redirect already made ([`after_effect`]): `{tool} ({family}) -t {table} {chain} runs after our redirect
/// and can undo it: rule {i}[ (via chain {c})]: {rule}`.
pub fn after_findings(tool: &str, family: Family, table: &str, chains: &Chains) -> Vec<String> {
    let starts: Vec<&str> = AFTER_OURS
        .iter()
        .filter(|(t, start)| *t == table && chains.contains_key(*start))
        .map(|(_, start)| *start)
        .collect();
    walk_after(
        tool,
        family,
        table,
        chains,
        &starts,
        after_effect,
        "runs after our redirect and can undo it",
    )
}

/// One line per nat chain in `starts` (PREROUTING, OUTPUT: the rules after our jump there, which see
/// what our chains let through unredirected) whose rules can send that traffic elsewhere
/// ([`let_through_effect`]): `{tool} ({family}) -t nat {chain} after our jump, on traffic ours lets
/// through: rule {i}[ (via chain {c})]: {rule}` (the caller makes the rules up to our jump fall through).
pub fn let_through_findings(
    tool: &str,
    family: Family,
    chains: &Chains,
    starts: &[&str],
) -> Vec<String> {
    walk_after(
        tool,
        family,
        "nat",
        chains,
        starts,
        let_through_effect,
        "after our jump, on traffic ours lets through",
    )
}

fn walk_after(
    tool: &str,
    family: Family,
    table: &str,
    chains: &Chains,
    starts: &[&str],
    effect: fn(&Target) -> Effect,
    place: &str,
) -> Vec<String> {
    let after: BTreeMap<&str, Vec<AfterOurs>> = chains
        .iter()
        .map(|(c, rules)| {
            let list = rules.iter().map(|r| AfterOurs(r, effect)).collect();
            (c.as_str(), list)
        })
        .collect();
    let rules = |c: &str| after.get(c).map(Vec::as_slice);
    starts
        .iter()
        .filter_map(|start| {
            let hooked = format!("{tool} ({}) -t {table} {start}", family.name());
            bypass::finding(&hooked, Some(place), start, &rules, &|c| {
                format!("chain {c}")
            })
        })
        .collect()
}

/// Whether the legacy tables hold one of our `ISTIO_*` chains (which x_tables backend an unsuffixed
/// `iptables` is).
pub fn holds_istio_chains(family: Family) -> Result<bool> {
    Ok(read(family)?
        .iter()
        .any(|(_, c)| c.keys().any(|k| is_our_chain(k))))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// After our redirect a drop, REJECT, NAT, CT, marks and logs cannot undo it; a queue, TEE or an
    /// unknown target can, as before ours. Before ours a drop and NAT can move traffic too.
    #[test]
    fn after_ours_only_what_can_still_undo_the_redirect_moves() {
        let ext = |n: &str| Target::Ext(n.into());
        for t in [
            Target::Fall,
            Target::Accept,
            Target::Return,
            Target::Drop,
            ext("REJECT"),
            ext("SNAT"),
            ext("MASQUERADE"),
            ext("DNAT"),
            ext("REDIRECT"),
            ext("NETMAP"),
            ext("CT"),
            ext("LOG"),
            ext("MARK"),
            ext("CONNMARK"),
        ] {
            assert_eq!(after_effect(&t), Effect::Harmless, "{t:?}");
        }
        for t in [
            Target::Queue,
            ext("NFQUEUE"),
            ext("TEE"),
            ext("TPROXY"),
            ext("?"),
        ] {
            assert_eq!(after_effect(&t), Effect::Moves, "{t:?}");
        }
        assert_eq!(
            after_effect(&Target::Jump("X".into())),
            Effect::Jump("X".into())
        );
        for t in [Target::Drop, ext("DNAT"), ext("CT"), ext("MARK")] {
            assert_eq!(before_effect(&t), Effect::Moves, "{t:?}");
        }
    }

    /// Only the chains that run after ours are walked: nat OUTPUT and PREROUTING, mangle OUTPUT and
    /// FORWARD are not [`after_findings`]' (the first three are [`table_findings`]').
    #[test]
    fn after_findings_walks_only_chains_after_ours() {
        let rule = |t: &str| Rule {
            text: format!("-j {t}"),
            target: Target::Ext(t.into()),
        };
        let chains = |list: &[(&str, &str)]| -> Chains {
            list.iter()
                .map(|(c, t)| (c.to_string(), vec![rule(t)]))
                .collect()
        };
        let nat = chains(&[
            ("OUTPUT", "NFQUEUE"),
            ("PREROUTING", "NFQUEUE"),
            ("INPUT", "NFQUEUE"),
        ]);
        assert_eq!(
            after_findings("legacy iptables", Family::V6, "nat", &nat),
            vec!["legacy iptables (IPv6) -t nat INPUT runs after our redirect and can undo it: rule 1: -j NFQUEUE"]
        );
        let mangle = chains(&[("OUTPUT", "TEE"), ("FORWARD", "TEE")]);
        assert!(after_findings("legacy iptables", Family::V4, "mangle", &mangle).is_empty());
        let filter = chains(&[("OUTPUT", "TEE")]);
        assert_eq!(
            after_findings("x", Family::V4, "filter", &filter),
            vec![
                "x (IPv4) -t filter OUTPUT runs after our redirect and can undo it: rule 1: -j TEE"
            ]
        );
    }
}
