//! Rules of other programs in our own backend's raw and mangle tables that run before our redirect and can
//! move traffic past it (pure), from the same `iptables-save` dump CHECK and re-ADD already read: a
//! `-j CT --notrack` in raw leaves the connection untracked, so our nat rules never see it. The nat table
//! itself is [`super::state::diff`]'s (anything before our jumps). The other x_tables backend and native
//! nf_tables are read by [`crate::xtables`] and [`crate::nftables::observe::foreign_only`].

use super::save::{target, Dump, Table};
use super::state::builtin_rule_is_ours;
use super::Backend;
use crate::netfilter::{is_builtin, is_our_chain, Family};
use crate::xtables::{table_findings, Chains, Rule, Target};

/// What a rule of `chain` in `t` does; ours (our chains, our rules in built-in chains) fall through.
fn target_of(name: &str, chain: &str, spec: &str, t: &Table, expected: &Dump) -> Target {
    if is_our_chain(chain)
        || (is_builtin(chain) && builtin_rule_is_ours(name, chain, spec, expected))
    {
        return Target::Fall;
    }
    match target(spec) {
        None => Target::Fall,
        Some("ACCEPT") => Target::Accept,
        Some("DROP") => Target::Drop,
        Some("RETURN") => Target::Return,
        Some("QUEUE") => Target::Queue,
        Some(c) if t.chains.contains_key(c) => Target::Jump(c.to_string()),
        Some(n) => Target::Ext(n.to_string()),
    }
}

/// One line per hooked chain of raw and mangle whose foreign rules (or the chains they jump to) can move
/// traffic, named as `b`'s tool lists them ([`table_findings`]), the rule as `iptables-save` prints it.
pub fn findings(b: Backend, family: Family, expected: &Dump, actual: &Dump) -> Vec<String> {
    let mut out = Vec::new();
    for name in ["raw", "mangle"] {
        let Some(t) = actual.get(name) else {
            continue;
        };
        let chains: Chains = t
            .chains
            .iter()
            .map(|(chain, specs)| {
                let rules = specs
                    .iter()
                    .map(|s| Rule {
                        text: s.clone(),
                        target: target_of(name, chain, s, t, expected),
                    })
                    .collect();
                (chain.clone(), rules)
            })
            .collect();
        out.extend(table_findings(&b.command(family), family, name, &chains));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::iptables::save::parse;

    #[test]
    fn foreign_raw_and_mangle_rules_that_can_move_traffic_are_named_others_are_not() {
        let expected = parse("*nat\n:OUTPUT ACCEPT [0:0]\n-A OUTPUT -j ISTIO_OUTPUT\nCOMMIT\n");
        let actual = parse(
            "*raw\n:PREROUTING ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:MINE - [0:0]\n\
             -A PREROUTING -p tcp -j ACCEPT\n-A PREROUTING -j LOG\n-A PREROUTING -p udp\n\
             -A PREROUTING -j MINE\n-A MINE -p tcp -j CT --notrack\n-A OUTPUT -j CT --notrack\nCOMMIT\n\
             *mangle\n:OUTPUT ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n-A INPUT -j MARK --set-mark 1\n\
             -A OUTPUT -j RETURN\nCOMMIT\n",
        );
        assert_eq!(
            findings(Backend::Nft, Family::V4, &expected, &actual),
            vec![
                "iptables-nft (IPv4) -t raw PREROUTING rule 1 (via chain MINE): -p tcp -j CT --notrack",
                "iptables-nft (IPv4) -t raw OUTPUT rule 1: -j CT --notrack",
            ]
        );
        // Our own TPROXY mark rules in mangle are ours, not findings.
        let expected = parse("*mangle\n:PREROUTING ACCEPT [0:0]\n-A PREROUTING -p tcp -m mark --mark 0x539/0xfff -j CONNMARK --save-mark --nfmask 0xfff --ctmask 0xfff\nCOMMIT\n");
        assert!(findings(Backend::Legacy, Family::V6, &expected, &expected).is_empty());
    }
}
