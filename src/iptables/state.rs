//! Comparing a namespace's rules with the desired ones, and building the one atomic document that converges
//! them (pure). Both sides are `iptables-save` dumps: the desired document is rendered as the tools print it
//! ([`crate::xtables::spec`]), so options come out in the same canonical form (`-m tcp`, hex marks, ...).

use super::save::{target, Dump, Table};
use crate::netfilter::{is_builtin, is_our_chain};

/// Is this rule in a built-in chain one of ours? It jumps to an `ISTIO_*` chain, or is one of the desired
/// rules, or has the shape only our generator writes there (interface RETURNs, the TPROXY marks 1337/1338).
pub(super) fn builtin_rule_is_ours(table: &str, chain: &str, spec: &str, expected: &Dump) -> bool {
    if target(spec).is_some_and(is_our_chain) {
        return true;
    }
    if expected
        .get(table)
        .and_then(|t| t.chains.get(chain))
        .is_some_and(|r| r.iter().any(|x| x == spec))
    {
        return true;
    }
    let toks: Vec<&str> = spec.split_whitespace().collect();
    let iface_return =
        toks.len() == 4 && (toks[0] == "-i" || toks[0] == "-o") && toks[2..] == ["-j", "RETURN"];
    let tproxy_mark = table == "mangle" && (spec.contains("0x539") || spec.contains("0x53a"));
    (iface_return && matches!(table, "nat" | "mangle")) || tproxy_mark
}

/// Our part of a table: every `ISTIO_*` chain, and our rules in built-in chains (in order).
fn ours(name: &str, t: &Table, expected: &Dump) -> Vec<(String, Vec<String>)> {
    t.chains
        .iter()
        .filter_map(|(chain, rules)| {
            if is_our_chain(chain) {
                Some((chain.clone(), rules.clone()))
            } else if is_builtin(chain) {
                let mine: Vec<String> = rules
                    .iter()
                    .filter(|r| builtin_rule_is_ours(name, chain, r, expected))
                    .cloned()
                    .collect();
                (!mine.is_empty()).then(|| (chain.clone(), mine))
            } else {
                None
            }
        })
        .collect()
}

/// Rules of a built-in chain we hook that are not ours and come before our last rule there: whatever they
/// accept or return never reaches our jump (`iptables -t nat -I OUTPUT 1 -j ACCEPT` disables redirection,
/// and so does `-I OUTPUT 2 -j ACCEPT` between an interface RETURN of ours and our jump). With nothing of
/// ours there, every rule of the chain.
fn bypasses(table: &str, chain: &str, t: &Table, expected: &Dump) -> Vec<String> {
    let rules = match t.chains.get(chain) {
        Some(r) => r,
        None => return Vec::new(),
    };
    let is_ours = |r: &String| builtin_rule_is_ours(table, chain, r, expected);
    let end = rules.iter().rposition(is_ours).unwrap_or(rules.len());
    rules[..end]
        .iter()
        .filter(|r| !is_ours(r))
        .cloned()
        .collect()
}

/// What differs between the desired and the actual state, as lines an operator can read.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Diff {
    pub missing: Vec<String>,
    pub unexpected: Vec<String>,
    /// Foreign rules before (or between) our rules in a built-in chain we hook: they bypass ours.
    pub before: Vec<String>,
}

impl Diff {
    pub fn is_empty(&self) -> bool {
        self.missing.is_empty() && self.unexpected.is_empty() && self.before.is_empty()
    }
}

/// Compares our part of `actual` with `expected`.
pub fn diff(expected: &Dump, actual: &Dump) -> Diff {
    let mut d = Diff::default();
    let empty = Table::default();
    let names: std::collections::BTreeSet<&String> = expected.keys().chain(actual.keys()).collect();
    for name in names {
        let want: std::collections::BTreeMap<String, Vec<String>> =
            ours(name, expected.get(name).unwrap_or(&empty), expected)
                .into_iter()
                .collect();
        let have: std::collections::BTreeMap<String, Vec<String>> =
            ours(name, actual.get(name).unwrap_or(&empty), expected)
                .into_iter()
                .collect();
        for (chain, rules) in &want {
            let got = have.get(chain).cloned().unwrap_or_default();
            let mut pool = got.clone();
            for r in rules {
                match pool.iter().position(|x| x == r) {
                    Some(i) => {
                        pool.remove(i);
                    }
                    None => d.missing.push(format!("-t {name} -A {chain} {r}")),
                }
            }
            for r in pool {
                d.unexpected.push(format!("-t {name} -A {chain} {r}"));
            }
            if d.missing.is_empty() && d.unexpected.is_empty() && got != *rules {
                d.unexpected
                    .push(format!("-t {name} chain {chain}: rules out of order"));
            }
            if !is_builtin(chain) && !have.contains_key(chain) {
                d.missing.push(format!("-t {name} -N {chain}"));
            }
        }
        let actual_table = actual.get(name).unwrap_or(&empty);
        for chain in want.keys().filter(|c| is_builtin(c)) {
            d.before.extend(
                bypasses(name, chain, actual_table, expected)
                    .into_iter()
                    .map(|r| {
                        format!("-t {name} -A {chain} {r} (before our rules: it bypasses them)")
                    }),
            );
        }
        for (chain, rules) in &have {
            if !want.contains_key(chain) {
                if is_builtin(chain) {
                    for r in rules {
                        d.unexpected.push(format!("-t {name} -A {chain} {r}"));
                    }
                } else {
                    d.unexpected
                        .push(format!("-t {name} chain {chain} ({} rules)", rules.len()));
                }
            }
        }
    }
    d
}

/// Splits a restore document into `(table, body lines)` sections.
fn sections(doc: &str) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for line in doc.lines() {
        if let Some(t) = line.strip_prefix('*') {
            out.push((t.trim().to_string(), Vec::new()));
        } else if line == "COMMIT" || line.trim().is_empty() || line.starts_with('#') {
            continue;
        } else if let Some((_, body)) = out.last_mut() {
            body.push(line.to_string());
        }
    }
    out
}

/// One `iptables-restore --noflush` document that takes `actual` to the desired `doc` atomically: delete our
/// rules from built-in chains, flush our chains, delete the ones no longer wanted, create the new ones, add
/// every desired rule of our chains, then insert our built-in-chain rules (as `expected` has them) at the
/// top of those chains, so nothing another program inserted there runs before them.
pub fn converge_document(doc: &str, expected: &Dump, actual: &Dump) -> String {
    let empty = Table::default();
    let desired = sections(doc);
    let mut tables: Vec<String> = desired.iter().map(|(t, _)| t.clone()).collect();
    for (name, t) in actual {
        if !tables.contains(name) && !ours(name, t, expected).is_empty() {
            tables.push(name.clone());
        }
    }
    tables.sort();
    let mut out = String::new();
    for name in tables {
        let have = actual.get(&name).unwrap_or(&empty);
        let body: &[String] = desired
            .iter()
            .find(|(t, _)| *t == name)
            .map(|(_, b)| b.as_slice())
            .unwrap_or(&[]);
        out.push_str(&format!("* {name}\n"));
        for (chain, rules) in &have.chains {
            if is_builtin(chain) {
                for r in rules
                    .iter()
                    .filter(|r| builtin_rule_is_ours(&name, chain, r, expected))
                {
                    out.push_str(&format!("-D {chain} {r}\n"));
                }
            }
        }
        let existing: Vec<&String> = have.chains.keys().filter(|c| is_our_chain(c)).collect();
        for c in &existing {
            out.push_str(&format!("-F {c}\n"));
        }
        let wanted = |c: &str| {
            body.iter()
                .any(|l| l.strip_prefix("-N ").map(str::trim) == Some(c))
        };
        for c in existing.iter().filter(|c| !wanted(c)) {
            out.push_str(&format!("-X {c}\n"));
        }
        for line in body {
            if let Some(c) = line.strip_prefix("-N ") {
                if have.chains.contains_key(c.trim()) {
                    continue;
                }
            }
            let mut toks = line.split_whitespace();
            if matches!(toks.next(), Some("-A" | "-I")) && toks.next().is_some_and(is_builtin) {
                continue;
            }
            out.push_str(line);
            out.push('\n');
        }
        // Our rules in built-in chains go first, in the desired order, ahead of anything else there.
        if let Some(want) = expected.get(&name) {
            for (chain, rules) in want.chains.iter().filter(|(c, _)| is_builtin(c)) {
                for (i, r) in rules.iter().enumerate() {
                    out.push_str(&format!("-I {chain} {} {r}\n", i + 1));
                }
            }
        }
        out.push_str("COMMIT\n");
    }
    out
}

#[cfg(test)]
#[path = "state_tests.rs"]
mod tests;
