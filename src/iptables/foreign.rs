//! Rules of other programs in our own backend's raw and mangle tables that run before our redirect and can
//! move traffic past it (pure), from the same `iptables-save` dump CHECK and re-ADD already read: a
//! `-j CT --notrack` in raw leaves the connection untracked, so our nat rules never see it. The nat table
//! itself is [`super::state::diff`]'s (anything before our jumps). The other x_tables backend and native
//! nf_tables are read by [`crate::xtables`] and [`crate::nftables::observe::foreign_only`].

use super::save::{is_builtin, is_ours, target, Dump, Table};
use super::state::builtin_rule_is_ours;
use super::Family;
use crate::xtables::{first_mover, Chains, Rule, Target, HOOKED};

fn target_of(spec: &str, t: &Table) -> Target {
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
/// traffic: the first such rule as `iptables-save` prints it.
pub fn findings(family: Family, expected: &Dump, actual: &Dump) -> Vec<String> {
    let mut out = Vec::new();
    for table in ["raw", "mangle"] {
        let Some(t) = actual.get(table) else {
            continue;
        };
        let chains: Chains = t
            .chains
            .iter()
            .map(|(name, specs)| {
                let rules = specs
                    .iter()
                    .map(|s| Rule {
                        text: s.clone(),
                        target: target_of(s, t),
                    })
                    .collect();
                (name.clone(), rules)
            })
            .collect();
        let skip = |chain: &str, r: &Rule| {
            is_ours(chain)
                || (is_builtin(chain) && builtin_rule_is_ours(table, chain, &r.text, expected))
        };
        for start in HOOKED {
            if let Some((chain, _, r)) = first_mover(&chains, start, &skip) {
                let from = if chain == start {
                    String::new()
                } else {
                    format!(" (reached from {start})")
                };
                out.push(format!(
                    "{}: -t {table} -A {chain} {}{from} (another program's rule where the kernel looks before our redirect: it can take traffic past it)",
                    family.name(),
                    r.text
                ));
            }
        }
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
            findings(Family::V4, &expected, &actual),
            vec![
                "IPv4: -t raw -A MINE -p tcp -j CT --notrack (reached from PREROUTING) (another program's rule where the kernel looks before our redirect: it can take traffic past it)",
                "IPv4: -t raw -A OUTPUT -j CT --notrack (another program's rule where the kernel looks before our redirect: it can take traffic past it)",
            ]
        );
        // Our own TPROXY mark rules in mangle are ours, not findings.
        let expected = parse("*mangle\n:PREROUTING ACCEPT [0:0]\n-A PREROUTING -p tcp -m mark --mark 0x539/0xfff -j CONNMARK --save-mark --nfmask 0xfff --ctmask 0xfff\nCOMMIT\n");
        assert!(findings(Family::V6, &expected, &expected).is_empty());
    }
}
