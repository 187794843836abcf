//! The comparable form of our tables (spec nftables.md §5) and the pure diff CHECK and re-ADD use: chains
//! with their base definitions and rules as kernel expressions, lookups resolved to their sorted elements,
//! handles and counter values ignored. What runs before our tables is [`super::foreign`]'s.

use super::expr::Expr;
use super::expr_text::describe;
use super::lower::{lower, GroupResolver};
use super::model::{Ruleset, TABLES};
use crate::error::Result;
use crate::netfilter::{OurHook, NF_ACCEPT, NF_DROP};
use std::collections::BTreeMap;

/// One chain of ours as the kernel holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainState {
    pub name: String,
    /// `(type, hooknum, priority)` for a base chain.
    pub base: Option<(String, u32, i32)>,
    /// A base chain's policy (`NF_ACCEPT`, `NF_DROP`); a regular chain has none.
    pub policy: Option<u32>,
    pub rules: Vec<Vec<Expr>>,
}

/// Our tables (family inet, `istio-proxy-*`), by name, chains in creation order.
pub type Tables = BTreeMap<String, Vec<ChainState>>;

/// A lookup's set reference replaced by its elements, so sent and dumped rules compare equal.
pub fn resolved(set_elems: &[Vec<u8>]) -> String {
    let mut v: Vec<String> = set_elems
        .iter()
        .map(|e| e.iter().map(|b| format!("{b:02x}")).collect())
        .collect();
    v.sort();
    format!("{{{}}}", v.join(","))
}

/// The tables `rs` gives, in comparable form.
pub fn desired(rs: &Ruleset, groups: GroupResolver) -> Result<Tables> {
    let mut out = Tables::new();
    for ts in &rs.tables {
        let mut chains = Vec::new();
        for c in &ts.chains {
            let base = ts
                .table
                .hook(c.name)
                .map(|h| (h.kind.to_string(), h.hooknum, h.priority));
            let mut rules = Vec::new();
            for items in &c.rules {
                let low = lower(items, groups)?;
                let exprs = low
                    .exprs
                    .into_iter()
                    .map(|e| match e {
                        Expr::Lookup {
                            sreg,
                            set_id: Some(i),
                            flags,
                            ..
                        } => Expr::Lookup {
                            sreg,
                            set: resolved(
                                low.sets.get(i as usize).map(Vec::as_slice).unwrap_or(&[]),
                            ),
                            set_id: None,
                            flags,
                        },
                        e => e,
                    })
                    .collect();
                rules.push(exprs);
            }
            chains.push(ChainState {
                name: c.name.to_string(),
                // Ours accept what they do not redirect (the kernel's default, which the batch keeps).
                policy: base.as_ref().map(|_| NF_ACCEPT as u32),
                base,
                rules,
            });
        }
        out.insert(ts.table.name().to_string(), chains);
    }
    Ok(out)
}

/// What differs, one line per problem; empty = equal. `text` renders a desired rule (table, chain, index).
pub fn diff(
    want: &Tables,
    have: &Tables,
    text: &dyn Fn(&str, &str, usize) -> String,
) -> Vec<String> {
    let mut out = Vec::new();
    for t in TABLES {
        let tn = t.name();
        match (want.get(tn), have.get(tn)) {
            (None, None) => {}
            (Some(_), None) => out.push(format!("missing table inet {tn}")),
            (None, Some(_)) => out.push(format!("unexpected table inet {tn}")),
            (Some(w), Some(h)) => {
                for wc in w {
                    let Some(hc) = h.iter().find(|c| c.name == wc.name) else {
                        out.push(format!("missing chain inet {tn} {}", wc.name));
                        continue;
                    };
                    if wc.base != hc.base {
                        out.push(format!(
                            "chain inet {tn} {} is {:?}, want {:?}",
                            wc.name, hc.base, wc.base
                        ));
                    }
                    if wc.policy != hc.policy {
                        out.push(format!(
                            "chain inet {tn} {} has policy {}, want {}",
                            wc.name,
                            policy_name(hc.policy),
                            policy_name(wc.policy)
                        ));
                    }
                    if wc.rules == hc.rules {
                        continue;
                    }
                    let mut any = false;
                    for (i, r) in wc.rules.iter().enumerate() {
                        if !hc.rules.contains(r) {
                            out.push(format!("missing rule: {}", text(tn, &wc.name, i)));
                            any = true;
                        }
                    }
                    for r in &hc.rules {
                        if !wc.rules.contains(r) {
                            out.push(format!(
                                "unexpected rule in inet {tn} {}: {}",
                                wc.name,
                                describe(r)
                            ));
                            any = true;
                        }
                    }
                    if !any {
                        out.push(format!(
                            "rules of inet {tn} {} are out of order or duplicated",
                            wc.name
                        ));
                    }
                }
                for hc in h {
                    if !w.iter().any(|c| c.name == hc.name) {
                        out.push(format!("unexpected chain inet {tn} {}", hc.name));
                    }
                }
                let order_w: Vec<&str> = w.iter().map(|c| c.name.as_str()).collect();
                let order_h: Vec<&str> = h.iter().map(|c| c.name.as_str()).collect();
                if order_w.len() == order_h.len() && order_w != order_h {
                    out.push(format!(
                        "chains of inet {tn} were created in a different order"
                    ));
                }
            }
        }
    }
    out
}

/// How nft names a chain policy.
fn policy_name(p: Option<u32>) -> String {
    match p {
        None => "none".into(),
        Some(p) if p == NF_DROP as u32 => "drop".into(),
        Some(p) if p == NF_ACCEPT as u32 => "accept".into(),
        Some(p) => format!("{p}"),
    }
}

/// Where our base chains run, for [`super::foreign::position`].
pub fn our_hooks(want: &Tables) -> Vec<OurHook> {
    want.iter()
        .flat_map(|(tn, chains)| {
            chains.iter().filter_map(move |c| {
                c.base.as_ref().map(|(_, hooknum, priority)| OurHook {
                    hooknum: *hooknum,
                    priority: *priority,
                    label: format!("inet {tn} {} (priority {priority})", c.name),
                })
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tables(policy: Option<u32>) -> Tables {
        let chain = ChainState {
            name: "output".into(),
            base: Some(("nat".into(), 3, -100)),
            policy,
            rules: vec![vec![Expr::Counter]],
        };
        [("istio-proxy-nat".to_string(), vec![chain])].into()
    }

    #[test]
    fn a_base_chain_policy_other_than_ours_is_a_difference() {
        let text = |_: &str, _: &str, _: usize| String::new();
        let want = tables(Some(NF_ACCEPT as u32));
        assert!(diff(&want, &want, &text).is_empty());
        assert_eq!(
            diff(&want, &tables(Some(NF_DROP as u32)), &text),
            vec!["chain inet istio-proxy-nat output has policy drop, want accept"]
        );
        assert_eq!(
            diff(&want, &tables(None), &text),
            vec!["chain inet istio-proxy-nat output has policy none, want accept"]
        );
    }
}
