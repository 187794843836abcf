//! A restore document's operations applied to a table in memory (pure), with `iptables-legacy-restore
//! --noflush` semantics: the first operation that fails fails the whole table, which is then left as it
//! was (the caller writes nothing).

use super::blob::{Chain, Entry, Link, Table};
use crate::error::{Error, Result};
use crate::netfilter::BUILTIN_CHAINS;
use crate::xtables::rule::{Op, Target};
use crate::xtables::spec::render;

/// `XT_EXTENSION_MAXNAMELEN`: a chain name is at most 28 characters (it is an `ERROR` target's name).
const CHAIN_NAME_MAX: usize = 28;

fn fail(t: &Table, what: String) -> Error {
    Error::Rules(format!(
        "legacy iptables ({}) table {}: {what}",
        t.family.name(),
        t.name
    ))
}

fn chain_mut<'a>(t: &'a mut Table, name: &str) -> Result<&'a mut Chain> {
    if !t.chains.iter().any(|c| c.name == name) {
        return Err(fail(t, format!("chain {name} does not exist")));
    }
    t.chains
        .iter_mut()
        .find(|c| c.name == name)
        .ok_or_else(|| Error::other("chain vanished"))
}

/// Whether an entry jumps to chain `name`.
fn jumps_to(e: &Entry, name: &str) -> bool {
    match &e.raw {
        Some((_, Link::Chain(c))) => c == name,
        Some(_) => false,
        None => e.rule.target == Target::Jump(name.to_string()),
    }
}

/// Applies `ops` in order; on error `t` may be half changed (the caller drops it).
pub fn apply(t: &mut Table, ops: &[Op]) -> Result<()> {
    for op in ops {
        match op {
            Op::NewChain(name) => {
                if t.chains.iter().any(|c| c.name == *name)
                    || BUILTIN_CHAINS.contains(&name.as_str())
                {
                    return Err(fail(t, format!("chain {name} already exists")));
                }
                if name.is_empty() || name.len() > CHAIN_NAME_MAX || name.starts_with('-') {
                    return Err(fail(t, format!("invalid chain name {name:?}")));
                }
                t.chains.push(Chain {
                    name: name.clone(),
                    policy: None,
                    entries: Vec::new(),
                });
            }
            Op::Flush(name) => chain_mut(t, name)?.entries.clear(),
            Op::DeleteChain(name) => {
                let c = chain_mut(t, name)?;
                if c.policy.is_some() {
                    return Err(fail(t, format!("cannot delete built-in chain {name}")));
                }
                if !c.entries.is_empty() {
                    return Err(fail(
                        t,
                        format!("cannot delete chain {name}: it is not empty"),
                    ));
                }
                if t.chains
                    .iter()
                    .flat_map(|c| &c.entries)
                    .any(|e| jumps_to(e, name))
                {
                    return Err(fail(
                        t,
                        format!("cannot delete chain {name}: a rule jumps to it"),
                    ));
                }
                t.chains.retain(|c| c.name != *name);
            }
            Op::Append(name, rule) => chain_mut(t, name)?.entries.push(Entry::ours(rule.clone())),
            Op::Insert(name, n, rule) => {
                let c = chain_mut(t, name)?;
                let len = c.entries.len();
                if *n == 0 || *n > len + 1 {
                    return Err(fail(
                        t,
                        format!("cannot insert at {n} in chain {name}, which has {len} rules"),
                    ));
                }
                c.entries.insert(n - 1, Entry::ours(rule.clone()));
            }
            Op::Delete(name, rule) => {
                // As the tool: the first rule that is the same (ours only: a foreign rule holds
                // something we do not model, so it is never the same as one of ours).
                let family = t.family;
                let text = render(family, rule);
                let missing = fail(t, format!("-D {name} {text}: no such rule"));
                let c = chain_mut(t, name)?;
                let same = |e: &Entry| {
                    e.raw.is_none() && (e.rule == *rule || render(family, &e.rule) == text)
                };
                match c.entries.iter().position(same) {
                    Some(i) => {
                        c.entries.remove(i);
                    }
                    None => return Err(missing),
                }
            }
        }
    }
    Ok(())
}
