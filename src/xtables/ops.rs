//! A restore document's operations applied to tables in memory (pure), with `iptables-restore --noflush`'s
//! rules: what the desired state is (CHECK compares the kernel with this, no scratch namespace), and what
//! a writer that replaces whole tables builds.

use super::rule::{Chain, Op, Rule, Table, TableOps};
use super::spec::{builtins, render};
use crate::error::{Error, Result};
use crate::netfilter::Family;

fn chain<'a>(t: &'a mut Table, name: &str) -> Option<&'a mut Chain> {
    t.chains.iter_mut().find(|c| c.name == name)
}

/// The chain, created when it is a built-in chain of the table the table does not have yet.
fn chain_or_builtin<'a>(t: &'a mut Table, name: &str) -> Result<&'a mut Chain> {
    if chain(t, name).is_none() {
        let order = builtins(&t.name);
        let Some(pos) = order.iter().position(|b| *b == name) else {
            return Err(Error::Rules(format!("-t {}: no chain {name}", t.name)));
        };
        // Built-ins in hook order, ahead of user chains.
        let at = t
            .chains
            .iter()
            .position(|c| {
                order
                    .iter()
                    .position(|b| *b == c.name)
                    .map_or(true, |p| p > pos)
            })
            .unwrap_or(t.chains.len());
        t.chains.insert(
            at,
            Chain {
                name: name.to_string(),
                rules: Vec::new(),
            },
        );
    }
    let table = t.name.clone();
    chain(t, name).ok_or_else(|| Error::Rules(format!("-t {table}: no chain {name}")))
}

/// Applies one table's operations to `tables` (the table is created when absent). On error `tables` may
/// be partly changed: callers apply to a copy, as the kernel applies a table's document all or nothing.
pub fn apply(family: Family, tables: &mut Vec<Table>, doc: &TableOps) -> Result<()> {
    if !tables.iter().any(|t| t.name == doc.table) {
        tables.push(Table {
            name: doc.table.clone(),
            chains: Vec::new(),
        });
    }
    let Some(t) = tables.iter_mut().find(|t| t.name == doc.table) else {
        return Err(Error::Rules(format!("no table {}", doc.table)));
    };
    let name = t.name.clone();
    let err = |what: String| Error::Rules(format!("-t {name}: {what}"));
    for op in &doc.ops {
        match op {
            Op::NewChain(c) => {
                if chain(t, c).is_some() || builtins(&name).contains(&c.as_str()) {
                    return Err(err(format!("-N {c}: chain already exists")));
                }
                let at = t
                    .chains
                    .iter()
                    .position(|x| {
                        !builtins(&name).contains(&x.name.as_str()) && x.name.as_str() > c.as_str()
                    })
                    .unwrap_or(t.chains.len());
                t.chains.insert(
                    at,
                    Chain {
                        name: c.clone(),
                        rules: Vec::new(),
                    },
                );
            }
            Op::Flush(c) => chain(t, c)
                .ok_or_else(|| err(format!("-F {c}: no such chain")))?
                .rules
                .clear(),
            Op::DeleteChain(c) => {
                let used = t
                    .chains
                    .iter()
                    .flat_map(|x| &x.rules)
                    .any(|r| jumps_to(r, c));
                let i = t.chains.iter().position(|x| x.name == *c);
                match i {
                    Some(i)
                        if !used
                            && t.chains[i].rules.is_empty()
                            && !builtins(&name).contains(&c.as_str()) =>
                    {
                        t.chains.remove(i);
                    }
                    _ => {
                        return Err(err(format!(
                            "-X {c}: no such chain, built in, not empty, or still jumped to"
                        )))
                    }
                }
            }
            Op::Append(c, r) => chain_or_builtin(t, c)?.rules.push(r.clone()),
            Op::Insert(c, n, r) => {
                let rules = &mut chain_or_builtin(t, c)?.rules;
                if *n == 0 || *n > rules.len() + 1 {
                    return Err(err(format!("-I {c} {n}: index out of range")));
                }
                rules.insert(n - 1, r.clone());
            }
            Op::Delete(c, r) => {
                let text = render(family, r);
                let rules = &mut chain(t, c)
                    .ok_or_else(|| err(format!("-D {c}: no such chain")))?
                    .rules;
                let i = rules.iter().position(|x| render(family, x) == text);
                let i = i.ok_or_else(|| err(format!("-D {c} {text}: no such rule")))?;
                rules.remove(i);
            }
        }
    }
    Ok(())
}

fn jumps_to(r: &Rule, chain: &str) -> bool {
    matches!(&r.target, super::rule::Target::Jump(c) if c == chain)
}

/// The tables a whole document makes of empty tables: the desired state as the kernel will hold it.
pub fn desired(family: Family, doc: &[TableOps]) -> Result<Vec<Table>> {
    let mut tables = Vec::new();
    for t in doc {
        apply(family, &mut tables, t)?;
    }
    Ok(tables)
}

#[cfg(test)]
#[path = "ops_tests.rs"]
mod tests;
