//! Rules as data, and their `iptables-restore` text (upstream `buildRestore`, plugin.md §4.2): per family
//! one document; tables in sorted order, empty ones omitted; each `* <table>`, the `-N` declarations (every
//! non-builtin chain in the order of its first rule, then undeclared jump targets), the rules exactly as
//! built, then `COMMIT`.

use crate::netfilter::is_builtin;
use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Table {
    // Declaration order = sorted order of the names, the order of the document.
    Filter,
    Mangle,
    Nat,
    Raw,
}

impl Table {
    pub const ALL: [Table; 4] = [Table::Filter, Table::Mangle, Table::Nat, Table::Raw];

    pub fn as_str(self) -> &'static str {
        match self {
            Table::Filter => "filter",
            Table::Mangle => "mangle",
            Table::Nat => "nat",
            Table::Raw => "raw",
        }
    }
}

impl fmt::Display for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Append at the end of the chain, or insert at a 1-based position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Append,
    Insert(u32),
}

/// One rule: where it goes and its match/target tokens (each token is one argv word).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub table: Table,
    pub chain: &'static str,
    pub op: Op,
    pub params: Vec<String>,
}

impl Rule {
    /// The rule line as iptables-restore reads it: `-A CHAIN …` / `-I CHAIN N …`.
    pub fn line(&self) -> String {
        let mut s = match self.op {
            Op::Append => format!("-A {}", self.chain),
            Op::Insert(n) => format!("-I {} {n}", self.chain),
        };
        for p in &self.params {
            s.push(' ');
            s.push_str(p);
        }
        s
    }

    /// The target of a rule ending in `-j X`.
    pub fn jump_target(&self) -> Option<&str> {
        match self.params.as_slice() {
            [.., j, t] if j == "-j" => Some(t),
            _ => None,
        }
    }
}

/// Targets iptables provides; never declared with `-N` (nor are the built-in chains).
const STANDARD_TARGETS: [&str; 3] = ["ACCEPT", "RETURN", "DROP"];

/// The `iptables-restore --noflush` input for one family's rules.
pub fn restore_text(rules: &[Rule]) -> String {
    let mut out = String::new();
    for table in Table::ALL {
        let in_table: Vec<&Rule> = rules.iter().filter(|r| r.table == table).collect();
        if in_table.is_empty() {
            continue;
        }
        let mut declared: Vec<&str> = Vec::new();
        let chains = in_table
            .iter()
            .map(|r| r.chain)
            .chain(in_table.iter().filter_map(|r| r.jump_target()));
        for chain in chains {
            if !declared.contains(&chain) {
                declared.push(chain);
            }
        }
        out.push_str(&format!("* {table}\n"));
        for chain in declared
            .iter()
            .filter(|c| !is_builtin(c) && !STANDARD_TARGETS.contains(c))
        {
            out.push_str(&format!("-N {chain}\n"));
        }
        for r in in_table {
            out.push_str(&r.line());
            out.push('\n');
        }
        out.push_str("COMMIT\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(table: Table, chain: &'static str, op: Op, p: &[&str]) -> Rule {
        Rule {
            table,
            chain,
            op,
            params: p.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn declarations_tables_and_inserts() {
        let rules = vec![
            rule(
                Table::Raw,
                "OUTPUT",
                Op::Append,
                &["-j", "ISTIO_OUTPUT_DNS"],
            ),
            rule(
                Table::Nat,
                "PREROUTING",
                Op::Insert(1),
                &["-i", "eth0", "-j", "RETURN"],
            ),
            rule(
                Table::Nat,
                "ISTIO_INBOUND",
                Op::Append,
                &["-p", "tcp", "-j", "ISTIO_X"],
            ),
            rule(
                Table::Nat,
                "ISTIO_OUTPUT",
                Op::Append,
                &["-j", "ISTIO_INBOUND"],
            ),
            rule(Table::Mangle, "ISTIO_DROP", Op::Append, &["-j", "DROP"]),
        ];
        assert_eq!(
            restore_text(&rules),
            "* mangle\n-N ISTIO_DROP\n-A ISTIO_DROP -j DROP\nCOMMIT\n\
             * nat\n-N ISTIO_INBOUND\n-N ISTIO_OUTPUT\n-N ISTIO_X\n-I PREROUTING 1 -i eth0 -j RETURN\n\
             -A ISTIO_INBOUND -p tcp -j ISTIO_X\n-A ISTIO_OUTPUT -j ISTIO_INBOUND\nCOMMIT\n\
             * raw\n-N ISTIO_OUTPUT_DNS\n-A OUTPUT -j ISTIO_OUTPUT_DNS\nCOMMIT\n"
        );
        assert_eq!(restore_text(&[]), "");
    }
}
