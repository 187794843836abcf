//! Rules of other programs in our own backend's raw and mangle tables that run before our redirect and can
//! move traffic past it (pure), from the same `iptables-save` dump CHECK and re-ADD already read: a
//! `-j CT --notrack` in raw leaves the connection untracked, so our nat rules never see it. Chains that
//! run after our redirect (filter and security OUTPUT, every INPUT, POSTROUTING) are read too, with the
//! narrower test of [`crate::xtables::after::after_effect`]. The nat table's PREROUTING and OUTPUT are
//! [`super::state::diff`]'s (anything before our jumps). The other x_tables backend and native nf_tables are read by [`crate::xtables`] and [`crate::nftables::observe::foreign_only`].

use super::save::{target, Dump, Table};
use super::state::builtin_rule_is_ours;
use super::Backend;
use crate::netfilter::{is_builtin, is_our_chain, Family};
use crate::xtables::{after_findings, let_through_findings, table_findings, Chains, Rule, Target};

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
/// traffic, and per chain of any table that runs after our redirect whose foreign rules can undo it
/// ([`after_findings`]), named as `b`'s tool lists them ([`table_findings`]), the rule as `iptables-save`
/// prints it.
pub fn findings(b: Backend, family: Family, expected: &Dump, actual: &Dump) -> Vec<String> {
    let mut out = Vec::new();
    for (name, t) in actual {
        let name = name.as_str();
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
        if ["raw", "mangle"].contains(&name) {
            out.extend(table_findings(&b.command(family), family, name, &chains));
        }
        out.extend(after_findings(&b.command(family), family, name, &chains));
        if name == "nat" {
            let (chains, starts) = after_our_jumps(chains, t, expected);
            out.extend(let_through_findings(
                &b.command(family),
                family,
                &chains,
                &starts,
            ));
        }
    }
    out
}

/// nat PREROUTING and OUTPUT holding a rule of ours, with every rule up to our last one there made to
/// fall through (those before it are [`super::state::diff`]'s), and their names: what runs after our jump
/// sees only the traffic our chains let through unredirected. So does the whole of a nat chain at a hook
/// where our redirect sits in mangle instead (TPROXY mode's inbound, priority -150): what our mangle
/// chains let through (an excluded port) passes it, and a `REDIRECT` there re-points it (measured).
fn after_our_jumps(mut chains: Chains, t: &Table, expected: &Dump) -> (Chains, Vec<&'static str>) {
    let mut starts = Vec::new();
    for start in ["PREROUTING", "OUTPUT"] {
        let Some(specs) = t.chains.get(start) else {
            continue;
        };
        let Some(last) = specs
            .iter()
            .rposition(|s| builtin_rule_is_ours("nat", start, s, expected))
        else {
            let ours_in = |table: &str| {
                expected
                    .get(table)
                    .and_then(|x| x.chains.get(start))
                    .is_some_and(|r| !r.is_empty())
            };
            if ours_in("mangle") && !ours_in("nat") && chains.contains_key(start) {
                starts.push(start);
            }
            continue;
        };
        if let Some(rules) = chains.get_mut(start) {
            for r in rules.iter_mut().take(last + 1) {
                r.target = Target::Fall;
            }
            starts.push(start);
        }
    }
    (chains, starts)
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
        // After our redirect: what can still undo it or copy it out of the pod is named (a queue, TEE, an
        // unknown target, through a jump too); a drop, REJECT, NAT, a mark, a log are not.
        let actual = parse(
            "*filter\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:Q - [0:0]\n\
             -A INPUT -p udp --dport 1 -j DROP\n-A INPUT -j REJECT --reject-with icmp-port-unreachable\n\
             -A INPUT -j Q\n-A Q -j LOG\n-A Q -j NFQUEUE --queue-num 3\n\
             -A OUTPUT -j REJECT\n-A FORWARD -j NFQUEUE --queue-num 1\nCOMMIT\n\
             *mangle\n:POSTROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n\
             -A POSTROUTING -j TEE --gateway 10.0.0.1\n-A INPUT -j MARK --set-xmark 0x7/0xffffffff\nCOMMIT\n\
             *nat\n:POSTROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n\
             -A POSTROUTING -j MASQUERADE\n-A INPUT -j SNAT --to-source 10.0.0.2\nCOMMIT\n\
             *security\n:OUTPUT ACCEPT [0:0]\n-A OUTPUT -j SECMARK --selctx x\nCOMMIT\n",
        );
        assert_eq!(
            findings(Backend::Legacy, Family::V4, &expected, &actual),
            vec![
                "iptables-legacy (IPv4) -t filter INPUT runs after our redirect and can undo it: rule 2 (via chain Q): -j NFQUEUE --queue-num 3",
                "iptables-legacy (IPv4) -t mangle POSTROUTING runs after our redirect and can undo it: rule 1: -j TEE --gateway 10.0.0.1",
                "iptables-legacy (IPv4) -t security OUTPUT runs after our redirect and can undo it: rule 1: -j SECMARK --selctx x",
            ]
        );
        // After our jump in nat PREROUTING/OUTPUT: a DNAT or REDIRECT (or a jump to one) sends what our
        // chains let through (an excluded port) elsewhere; before our jump is diff's; MARK, ACCEPT are not.
        let expected = parse(
            "*nat\n:PREROUTING ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n-A PREROUTING -p tcp -j ISTIO_INBOUND\n\
             -A OUTPUT -j ISTIO_OUTPUT\nCOMMIT\n",
        );
        let actual = parse(
            "*nat\n:PREROUTING ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\n\
             :ISTIO_INBOUND - [0:0]\n:ISTIO_OUTPUT - [0:0]\n:J - [0:0]\n\
             -A PREROUTING -p tcp --dport 1 -j DNAT --to-destination 10.0.0.1\n\
             -A PREROUTING -p tcp -j ISTIO_INBOUND\n-A PREROUTING -j MARK --set-xmark 0x1/0xffffffff\n\
             -A PREROUTING -p tcp --dport 8081 -j REDIRECT --to-ports 8080\n\
             -A OUTPUT -j ISTIO_OUTPUT\n-A OUTPUT -j ACCEPT\n-A OUTPUT -j J\n\
             -A J -j DNAT --to-destination 10.0.0.1:9090\n\
             -A ISTIO_INBOUND -p tcp --dport 8081 -j RETURN\n\
             -A POSTROUTING -j MASQUERADE\nCOMMIT\n",
        );
        assert_eq!(
            findings(Backend::Nft, Family::V4, &expected, &actual),
            vec![
                "iptables-nft (IPv4) -t nat PREROUTING after our jump, on traffic ours lets through: rule 4: -p tcp --dport 8081 -j REDIRECT --to-ports 8080",
                "iptables-nft (IPv4) -t nat OUTPUT after our jump, on traffic ours lets through: rule 1 (via chain J): -j DNAT --to-destination 10.0.0.1:9090",
            ]
        );
        // Without a rule of ours in the chain nothing is walked here (diff names every rule then).
        let bare = parse(
            "*nat\n:OUTPUT ACCEPT [0:0]\n-A OUTPUT -j DNAT --to-destination 10.0.0.1\nCOMMIT\n",
        );
        assert!(findings(Backend::Nft, Family::V4, &expected, &bare).is_empty());
        // No redirect of ours at a hook (inbound not captured: nothing of ours in nat or mangle
        // PREROUTING): nothing there to go past, its nat chain is not walked.
        let outbound_only =
            parse("*nat\n:OUTPUT ACCEPT [0:0]\n-A OUTPUT -j ISTIO_OUTPUT\nCOMMIT\n");
        let actual = parse(
            "*nat\n:PREROUTING ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:ISTIO_OUTPUT - [0:0]\n\
             -A PREROUTING -p tcp --dport 8081 -j REDIRECT --to-ports 8080\n\
             -A OUTPUT -j ISTIO_OUTPUT\nCOMMIT\n",
        );
        assert!(findings(Backend::Nft, Family::V4, &outbound_only, &actual).is_empty());
        // TPROXY mode: our inbound redirect is in mangle PREROUTING, nothing of ours in nat PREROUTING;
        // the whole nat chain sees what ours lets through (an excluded port), a REDIRECT there is named.
        let expected = parse(
            "*mangle\n:PREROUTING ACCEPT [0:0]\n-A PREROUTING -p tcp -j ISTIO_INBOUND\nCOMMIT\n\
             *nat\n:OUTPUT ACCEPT [0:0]\n-A OUTPUT -j ISTIO_OUTPUT\nCOMMIT\n",
        );
        let actual = parse(
            "*nat\n:PREROUTING ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:ISTIO_OUTPUT - [0:0]\n\
             -A PREROUTING -j MARK --set-xmark 0x1/0xffffffff\n\
             -A PREROUTING -p tcp --dport 8081 -j REDIRECT --to-ports 8080\n\
             -A OUTPUT -j ISTIO_OUTPUT\nCOMMIT\n",
        );
        assert_eq!(
            findings(Backend::Nft, Family::V4, &expected, &actual),
            vec![
                "iptables-nft (IPv4) -t nat PREROUTING after our jump, on traffic ours lets through: rule 2: -p tcp --dport 8081 -j REDIRECT --to-ports 8080",
            ]
        );
        // Our own TPROXY mark rules in mangle are ours, not findings.
        let expected = parse("*mangle\n:PREROUTING ACCEPT [0:0]\n-A PREROUTING -p tcp -m mark --mark 0x539/0xfff -j CONNMARK --save-mark --nfmask 0xfff --ctmask 0xfff\nCOMMIT\n");
        assert!(findings(Backend::Legacy, Family::V6, &expected, &expected).is_empty());
    }
}
