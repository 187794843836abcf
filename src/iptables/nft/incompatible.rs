//! What iptables-nft would not have made in its own tables (pure): a built-in chain that is not a base
//! chain, or one hooked with another type, hook or priority than iptables-nft gives it (iptables-nft-save
//! then calls the table incompatible), a policy other than ACCEPT (our rules never set one), a base chain
//! with a name iptables does not know. The rule model has no place for these, so [`super::save`] cannot
//! show them; CHECK asks here. Nor does iptables-nft ever flag a table dormant: [`dormant`] names our
//! tables that are.

use super::builtin;
use super::decode_rule;
use super::plan::CurrentTable;
use crate::netfilter::{is_our_chain, Family, NF_ACCEPT};
use crate::xtables::rule::Table;

/// One line per dormant table holding one of our chains: none of its chains is hooked, so none of our
/// rules there runs (a dormant table of someone else's does nothing and is not named).
pub fn dormant(family: &str, tables: &[CurrentTable]) -> Vec<String> {
    tables
        .iter()
        .filter(|t| ours_dormant(t))
        .map(|t| {
            format!(
                "table {family} {} is dormant (none of its chains is hooked: traffic is not redirected)",
                t.name
            )
        })
        .collect()
}

/// One line per rule of `tables` holding an expression iptables never writes ([`decode_rule::acts`]):
/// the node's iptables-nft-save prints such a rule otherwise than it is (1.8.9 leaves a native
/// `tcp dport set 8080` out of the rule, which then reads as a match) or leaves its table out, so only our
/// reader can say it is there.
pub fn acting(family: Family, tables: &[Table]) -> Vec<String> {
    let mut out = Vec::new();
    for t in tables {
        for c in &t.chains {
            for (i, r) in c
                .rules
                .iter()
                .enumerate()
                .filter(|(_, r)| decode_rule::acts(r))
            {
                out.push(format!(
                    "-t {} {} rule {}: {} (an expression iptables never writes, which its -save does not \
                     print as it is)",
                    t.name,
                    c.name,
                    i + 1,
                    super::describe(family, r)
                ));
            }
        }
    }
    out
}

/// Whether `t` is dormant and holds one of our chains (what [`dormant`] names).
pub fn ours_dormant(t: &CurrentTable) -> bool {
    t.dormant && t.chains.iter().any(|c| is_our_chain(&c.name))
}

/// One line per chain iptables-nft would not have made, naming the table, the chain and what differs.
pub fn chains(family: &str, tables: &[CurrentTable]) -> Vec<String> {
    let mut out = Vec::new();
    for t in tables {
        for c in &t.chains {
            let at = format!("chain {} of table {family} {}", c.name, t.name);
            match (builtin::find(&t.name, &c.name), &c.hook) {
                (Some(_), None) => out.push(format!("{at} is not a base chain")),
                (Some(b), Some((kind, hook, prio))) => {
                    if (kind.as_str(), *hook, *prio) != (b.kind, b.hooknum, b.priority) {
                        out.push(format!(
                            "{at} is hooked as type {kind} hook {hook} priority {prio}, not as iptables-nft \
                             hooks it (type {} hook {} priority {})",
                            b.kind, b.hooknum, b.priority
                        ));
                    }
                }
                (None, Some((kind, hook, prio))) => out.push(format!(
                    "{at} is a base chain (type {kind} hook {hook} priority {prio}) iptables does not know"
                )),
                (None, None) => {}
            }
            match c.policy {
                Some(p) if c.hook.is_some() && p != NF_ACCEPT as u32 => {
                    let p = if p == 0 {
                        "DROP".to_string()
                    } else {
                        p.to_string()
                    };
                    out.push(format!("{at} has policy {p}"));
                }
                _ => {}
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::plan::{CurrentChain, CurrentTable};
    use super::chains;

    fn chain(name: &str, hook: Option<(&str, u32, i32)>, policy: Option<u32>) -> CurrentChain {
        CurrentChain {
            name: name.into(),
            base: hook.is_some(),
            rules: vec![],
            hook: hook.map(|(k, h, p)| (k.to_string(), h, p)),
            policy,
        }
    }

    #[test]
    fn rules_holding_what_iptables_never_writes_are_named() {
        use super::super::decode_rule::MAY_ACT;
        use super::acting;
        use crate::netfilter::Family;
        use crate::xtables::rule::{Chain, Rule, Table, Target};
        let plain = Rule {
            target: Target::Accept,
            ..Rule::any()
        };
        let odd = Rule {
            target: Target::Other(format!("{MAY_ACT}; then no verdict)")),
            ..Rule::any()
        };
        let t = Table {
            name: "filter".into(),
            chains: vec![Chain {
                name: "INPUT".into(),
                rules: vec![plain.clone(), odd],
            }],
        };
        let found = acting(Family::V4, &[t]);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].starts_with("-t filter INPUT rule 2: ")
                && found[0].ends_with("which its -save does not print as it is)"),
            "{found:?}"
        );
        let fine = Table {
            name: "raw".into(),
            chains: vec![Chain {
                name: "OUTPUT".into(),
                rules: vec![plain],
            }],
        };
        assert!(acting(Family::V4, &[fine]).is_empty());
    }

    #[test]
    fn only_what_iptables_nft_would_not_make_is_named() {
        let t = |chains| CurrentTable {
            name: "nat".into(),
            dormant: false,
            chains,
        };
        let fine = t(vec![
            chain("OUTPUT", Some(("nat", 3, -100)), Some(1)),
            chain("PREROUTING", Some(("nat", 0, -100)), Some(1)),
            chain("ISTIO_OUTPUT", None, None),
        ]);
        assert_eq!(chains("ip", &[fine]), Vec::<String>::new());
        let odd = t(vec![
            chain("OUTPUT", Some(("nat", 3, -200)), Some(1)),
            chain("PREROUTING", Some(("nat", 0, -100)), Some(0)),
            chain("POSTROUTING", None, None),
            chain("MINE", Some(("filter", 0, -100)), Some(1)),
        ]);
        assert_eq!(
            chains("ip", &[odd]),
            [
                "chain OUTPUT of table ip nat is hooked as type nat hook 3 priority -200, not as \
                 iptables-nft hooks it (type nat hook 3 priority -100)",
                "chain PREROUTING of table ip nat has policy DROP",
                "chain POSTROUTING of table ip nat is not a base chain",
                "chain MINE of table ip nat is a base chain (type filter hook 0 priority -100) iptables \
                 does not know",
            ]
        );
    }
}
