//! What x_tables' own chains that run after our nat redirect can still do to it (pure): the chains
//! ([`AFTER_OURS`]), what a target there can do ([`after_effect`]), and, after our jump in the same nat
//! chain, what it can do to the traffic our chains let through unredirected ([`let_through_effect`]);
//! each walked with [`bypass`] into the one finding text.

use super::{before_effect, Chains, Rule, Target};
use crate::netfilter::bypass::{self, Effect, Steps};
use crate::netfilter::Family;
use std::collections::BTreeMap;

/// Chains of x_tables' own tables that run after our nat redirect on the redirected packets' way (pure
/// knowledge of the kernel's fixed priorities): filter (0) and security (50) OUTPUT after nat OUTPUT
/// (-100), every INPUT (inbound after prerouting, outbound after looping through `lo`) and POSTROUTING.
/// raw and mangle OUTPUT and PREROUTING run before ours ([`super::BEFORE_OURS`]); FORWARD never sees a
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
pub const HARMLESS_AFTER: [&str; 9] = [
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
