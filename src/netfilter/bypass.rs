//! What the kernel runs before our redirect that can take traffic past it, walked one way for both rule
//! types (pure). A rule is a sequence of steps: an nf_tables rule's expressions, an x_tables rule's one
//! target. A step cannot move traffic (a match, a counter, a log, `accept` or `return`: they end at most
//! this chain, and the kernel's next hook, ours, still runs), or jumps to another chain of the same table,
//! or can move traffic (NAT set up first, notrack, a mark, a drop, a queue, a rewrite; anything unknown).
//! The walk follows jumps, each chain once, and stops at the first rule that can move traffic. A chain it
//! reaches whose rules were not read counts as one (fail closed): what it holds cannot be known harmless.
//! [`finding`] is the one text every reader reports such a rule in; [`refuse`] and [`not_as_expected`]
//! are the errors re-ADD and CHECK give.

use crate::error::{Error, Result};

/// What one step of a rule can do to a packet our redirect should catch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    Harmless,
    /// Jump or goto a chain of the same table.
    Jump(String),
    Moves,
}

/// A rule as the walk sees it.
pub trait Steps {
    /// Its steps in order.
    fn effects(&self) -> impl Iterator<Item = Effect> + '_;
    /// How a finding names it.
    fn text(&self) -> String;
}

/// The first rule that can move traffic: the chain it is in, its 1-based index there (0: the chain could
/// not be read) and its text.
struct Mover {
    chain: String,
    index: usize,
    text: String,
}

/// A table's rules by chain name, `None` for a chain whose rules were not read.
pub type Lookup<'a, 'r, R> = &'a dyn Fn(&str) -> Option<&'r [R]>;

/// The first rule reachable from chain `start` (following jumps, each chain once) that can move traffic.
fn first_mover<R: Steps>(start: &str, rules: Lookup<R>) -> Option<Mover> {
    fn walk<R: Steps>(chain: &str, rules: Lookup<R>, seen: &mut Vec<String>) -> Option<Mover> {
        if seen.iter().any(|c| c == chain) {
            return None;
        }
        seen.push(chain.to_string());
        let at = |index, text| {
            Some(Mover {
                chain: chain.to_string(),
                index,
                text,
            })
        };
        let Some(list) = rules(chain) else {
            return at(0, "the chain could not be read".into());
        };
        for (i, r) in list.iter().enumerate() {
            for e in r.effects() {
                match e {
                    Effect::Harmless => {}
                    Effect::Moves => return at(i + 1, r.text()),
                    Effect::Jump(c) => {
                        if let Some(m) = walk(&c, rules, seen) {
                            return Some(m);
                        }
                    }
                }
            }
        }
        None
    }
    walk(start, rules, &mut Vec::new())
}

/// The one text of a hooked chain from which a rule that can move traffic is reached:
/// `{hooked}[ {place}:] rule {index}[ (via {chain})]: {text}` (`place` e.g. "runs before …"), the chain
/// named by `via` when the rule is not in `start` itself. `None` when nothing reachable can move traffic.
pub fn finding<R: Steps>(
    hooked: &str,
    place: Option<&str>,
    start: &str,
    rules: Lookup<R>,
    via: &dyn Fn(&str) -> String,
) -> Option<String> {
    let m = first_mover(start, rules)?;
    let place = place.map_or(String::new(), |p| format!(" {p}:"));
    let via = if m.chain == start {
        String::new()
    } else {
        format!(" (via {})", via(&m.chain))
    };
    Some(format!("{hooked}{place} rule {}{via}: {}", m.index, m.text))
}

/// Re-ADD's answer to `found` (none: go on). `backend` follows "redirection" in the text (e.g.
/// " (nftables)").
pub fn refuse(found: &[String], backend: &str) -> Result<()> {
    if found.is_empty() {
        return Ok(());
    }
    Err(Error::Rules(format!(
        "traffic can bypass the redirection{backend}: {}; remove these rules from the pod's network \
         namespace, then retry",
        found.join("; ")
    )))
}

/// What CHECK read in a pod's namespace, split by what it means: `ours`, our rules not as the pod needs them
/// (missing, unexpected, out of order, a dormant table of ours); `bypass`, rules the kernel runs before our
/// redirect that can take traffic past it (each one [`finding`]'s text, or a foreign rule before our jump).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Findings {
    pub ours: Vec<String>,
    pub bypass: Vec<String>,
}

impl Findings {
    /// CHECK's answer: ours first, then what bypasses them ([`not_as_expected`]).
    pub fn check(&self, backend: &str) -> Result<()> {
        not_as_expected(&[&self.ours[..], &self.bypass[..]].concat(), backend)
    }
}

/// CHECK's answer to `problems` (none: the rules are as expected).
pub fn not_as_expected(problems: &[String], backend: &str) -> Result<()> {
    if problems.is_empty() {
        return Ok(());
    }
    Err(Error::Rules(format!(
        "redirection rules are not as expected{backend}: {}",
        problems.join("; ")
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The text of `r`'s error and its CNI code; `None` when it passed.
    fn failed(r: Result<()>) -> Option<(u32, String)> {
        r.err().map(|e| (e.cni_code(), e.to_string()))
    }

    /// Re-ADD goes on only when nothing was found; any finding refuses it with code 103, every finding
    /// named: a bypass found never reads as fine.
    #[test]
    fn re_add_refuses_on_any_finding_naming_each() {
        assert_eq!(failed(refuse(&[], " (nftables)")), None);
        let found = [
            "raw PREROUTING rule 1: -j CT --notrack".to_string(),
            "b".into(),
        ];
        assert_eq!(
            failed(refuse(&found, " (nftables)")),
            Some((
                103,
                "traffic can bypass the redirection (nftables): raw PREROUTING rule 1: -j CT --notrack; \
                 b; remove these rules from the pod's network namespace, then retry"
                    .into()
            ))
        );
        assert_eq!(failed(refuse(&found[1..], "")).map(|(c, _)| c), Some(103));
    }

    /// CHECK passes only when neither our rules' problems nor a bypass were found; either alone fails it
    /// with code 103, ours named first.
    #[test]
    fn check_fails_on_our_problems_or_a_bypass_alone() {
        let f = |ours: &[&str], bypass: &[&str]| Findings {
            ours: ours.iter().map(|s| s.to_string()).collect(),
            bypass: bypass.iter().map(|s| s.to_string()).collect(),
        };
        assert_eq!(failed(f(&[], &[]).check("")), None);
        assert_eq!(failed(not_as_expected(&[], "")), None);
        let says = |s: &str| Some((103, format!("redirection rules are not as expected{s}")));
        assert_eq!(
            failed(f(&["missing x"], &[]).check("")),
            says(": missing x")
        );
        assert_eq!(
            failed(f(&[], &["raw OUTPUT rule 1: -j CT --notrack"]).check(" (nftables)")),
            says(" (nftables): raw OUTPUT rule 1: -j CT --notrack")
        );
        assert_eq!(
            failed(f(&["missing x"], &["y"]).check("")),
            says(": missing x; y")
        );
        assert_eq!(failed(not_as_expected(&["z".into()], "")), says(": z"));
    }
}
