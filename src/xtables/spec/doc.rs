//! Whole documents (pure): an `iptables-restore --noflush` document into its tables' operations, and
//! tables back into the text `iptables-save` prints.

use super::{parse_rule, render, Names};
use crate::error::{Error, Result};
use crate::netfilter::Family;
use crate::xtables::rule::*;

/// Parses an `iptables-restore --noflush` document (`*table`, `-N`, `-A`, `-I C n`, `-D`, `-F`, `-X`,
/// `COMMIT`; comments and blank lines skipped) into its tables' operations, in order.
pub fn parse_doc(family: Family, doc: &str, names: Names) -> Result<Vec<TableOps>> {
    let mut out: Vec<TableOps> = Vec::new();
    let mut open = false;
    for (n, line) in doc.lines().enumerate() {
        let line = line.trim();
        let at =
            |why: String| Error::Rules(format!("restore document line {}: {why}: {line:?}", n + 1));
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(t) = line.strip_prefix('*') {
            if open {
                return Err(at("table opened before COMMIT".into()));
            }
            out.push(TableOps {
                table: t.trim().to_string(),
                ops: Vec::new(),
            });
            open = true;
            continue;
        }
        if line == "COMMIT" {
            if !open {
                return Err(at("COMMIT outside a table".into()));
            }
            open = false;
            continue;
        }
        let ops = match out.last_mut() {
            Some(t) if open => &mut t.ops,
            _ => return Err(at("outside a table".into())),
        };
        let (verb, rest) = line.split_once(' ').unwrap_or((line, ""));
        let (chain, rest) = rest.trim().split_once(' ').unwrap_or((rest.trim(), ""));
        if chain.is_empty() {
            return Err(at(format!("{verb} needs a chain")));
        }
        let c = chain.to_string();
        let rule = |s: &str| parse_rule(family, s, names).map_err(|e| at(e.to_string()));
        ops.push(match verb {
            "-N" if rest.is_empty() => Op::NewChain(c),
            "-F" if rest.is_empty() => Op::Flush(c),
            "-X" if rest.is_empty() => Op::DeleteChain(c),
            "-A" => Op::Append(c, rule(rest)?),
            "-D" => Op::Delete(c, rule(rest)?),
            "-I" => {
                let (pos, spec) = rest.split_once(' ').unwrap_or((rest, ""));
                match pos.parse::<usize>() {
                    Ok(p) if p >= 1 => Op::Insert(c, p, rule(spec)?),
                    _ => Op::Insert(c, 1, rule(rest)?),
                }
            }
            _ => return Err(at("unsupported line".into())),
        });
    }
    if open {
        return Err(Error::Rules(
            "restore document: the last table has no COMMIT".into(),
        ));
    }
    Ok(out)
}

/// Built-in chains of a table in hook order.
pub fn builtins(table: &str) -> &'static [&'static str] {
    match table {
        "nat" => &["PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"],
        "mangle" => &["PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"],
        "raw" => &["PREROUTING", "OUTPUT"],
        "filter" | "security" => &["INPUT", "FORWARD", "OUTPUT"],
        _ => &[],
    }
}

/// Tables as `iptables-save` prints them (counters zero, no comment lines): what
/// [`crate::iptables::save::parse`] reads.
pub fn save_text(family: Family, tables: &[Table]) -> String {
    let mut out = String::new();
    for t in tables {
        out.push_str(&format!("*{}\n", t.name));
        for c in &t.chains {
            let policy = if builtins(&t.name).contains(&c.name.as_str()) {
                "ACCEPT"
            } else {
                "-"
            };
            out.push_str(&format!(":{} {policy} [0:0]\n", c.name));
        }
        for c in &t.chains {
            for r in &c.rules {
                out.push_str(
                    &format!("-A {} {}\n", c.name, render(family, r)).replace(" \n", "\n"),
                );
            }
        }
        out.push_str("COMMIT\n");
    }
    out
}
