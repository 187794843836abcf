//! A whole legacy table in memory and as the kernel's blob (pure): [`build`] lays a table out exactly as
//! libiptc does for `IPT_SO_SET_REPLACE` (research in issue 40 §3.3): built-in chains in hook order, each its
//! rules then its policy entry; user chains sorted by name (strcmp), each an `ERROR` head naming it, its
//! rules and a `RETURN` tail; a final `ERROR` entry. Jumps are byte offsets of the target chain's first
//! entry after its head; a rule without target falls through to the next entry.
//!
//! An entry is ours when it decodes to a [`Rule`] that encodes back to exactly its bytes
//! ([`super::parse`]); anything else is foreign and kept byte for byte, only its jump moved with the
//! chain it jumps to.

use super::entry::{self, Layout};
use super::exts::{self, VERDICT_RETURN};
use crate::error::{Error, Result};
use crate::netfilter::{Family, BUILTIN_CHAINS};
use crate::xtables::rule::{Rule, Target};

/// Where a standard target's verdict goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Link {
    /// A verdict of its own (or not a standard target): left as it is.
    Fixed,
    /// The first entry of this user chain.
    Chain(String),
    /// The next entry.
    Next,
}

/// One rule of a chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// What it does, as far as the model can say ([`Match::Other`](crate::xtables::rule::Match::Other)
    /// where it cannot).
    pub rule: Rule,
    /// Foreign: its bytes (counters and `comefrom` zeroed) and where its verdict goes; ours: `None`,
    /// built from `rule`.
    pub raw: Option<(Vec<u8>, Link)>,
    /// Its index in the table it was read from (to hand its counters back), `None` for a new rule.
    pub old: Option<usize>,
}

impl Entry {
    pub fn ours(rule: Rule) -> Entry {
        Entry {
            rule,
            raw: None,
            old: None,
        }
    }
}

/// A chain: built-in ones carry their policy verdict and its old index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chain {
    pub name: String,
    pub policy: Option<(i32, Option<usize>)>,
    pub entries: Vec<Entry>,
}

/// One table as read, or as it will be written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Table {
    pub family: Family,
    pub name: String,
    pub valid_hooks: u32,
    /// Built-ins in hook order, then user chains (in any order: [`build`] sorts them).
    pub chains: Vec<Chain>,
}

/// What `IPT_SO_SET_REPLACE` takes besides the name and counters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Built {
    pub valid_hooks: u32,
    pub num_entries: u32,
    pub hook_entry: [u32; 5],
    pub underflow: [u32; 5],
    pub entries: Vec<u8>,
    /// For each new entry, the index of the old entry whose counters it keeps.
    pub old: Vec<Option<usize>>,
}

/// The hooks a table has, as the kernel's tables register them (for a table built from nothing).
pub fn valid_hooks(table: &str) -> Option<u32> {
    Some(match table {
        "nat" => 0x1b,
        "mangle" => 0x1f,
        "raw" => 0x09,
        "filter" | "security" => 0x0e,
        _ => return None,
    })
}

/// An empty table: the built-in chains of its hooks with policy ACCEPT.
pub fn empty(family: Family, name: &str) -> Result<Table> {
    let hooks = valid_hooks(name)
        .ok_or_else(|| Error::Rules(format!("unknown legacy iptables table {name:?}")))?;
    let chains = BUILTIN_CHAINS
        .iter()
        .enumerate()
        .filter(|(h, _)| hooks & (1 << h) != 0)
        .map(|(_, c)| Chain {
            name: c.to_string(),
            policy: Some((exts::VERDICT_ACCEPT, None)),
            entries: Vec::new(),
        })
        .collect();
    Ok(Table {
        family,
        name: name.to_string(),
        valid_hooks: hooks,
        chains,
    })
}

/// The chains in the order the blob holds them: built-ins in hook order, then user chains by name.
pub fn ordered(t: &Table) -> Vec<&Chain> {
    let mut builtin: Vec<&Chain> = Vec::new();
    for c in BUILTIN_CHAINS {
        builtin.extend(
            t.chains
                .iter()
                .filter(|x| x.policy.is_some() && x.name == c),
        );
    }
    let mut user: Vec<&Chain> = t.chains.iter().filter(|x| x.policy.is_none()).collect();
    user.sort_by(|a, b| a.name.as_bytes().cmp(b.name.as_bytes()));
    builtin.extend(user);
    builtin
}

/// `t` as `IPT_SO_SET_REPLACE` takes it: its entries laid out (`lay_out`), then the jumps filled in
/// (`link`).
pub fn build(t: &Table) -> Result<Built> {
    let l = entry::layout(t.family);
    let chains = ordered(t);
    for (h, c) in BUILTIN_CHAINS.iter().enumerate() {
        if t.valid_hooks & (1 << h) != 0
            && !chains.iter().any(|x| x.name == *c && x.policy.is_some())
        {
            return Err(Error::Rules(format!(
                "table {} lacks its built-in chain {c}",
                t.name
            )));
        }
    }
    let laid = lay_out(t, &l, &chains)?;
    let (entries, old) = link(t, &l, laid.items, &laid.firsts, laid.size)?;
    Ok(Built {
        valid_hooks: t.valid_hooks,
        num_entries: old.len() as u32,
        hook_entry: laid.hook_entry,
        underflow: laid.underflow,
        entries,
        old,
    })
}

/// One entry of the blob being laid out: its bytes, where its verdict goes, and the index of the entry it
/// keeps from the table read (for the counters' hand-back).
type Item = (Vec<u8>, Link, Option<usize>);

/// A table's entries in blob order, jumps not yet filled in.
struct Laid {
    items: Vec<Item>,
    /// Each user chain's first entry after its head, as a byte offset: where a jump to it goes.
    firsts: Vec<(String, usize)>,
    hook_entry: [u32; 5],
    underflow: [u32; 5],
    /// The bytes laid out so far.
    size: usize,
}

impl Laid {
    /// Appends an entry; its offset.
    fn push(&mut self, b: Vec<u8>, link: Link, old: Option<usize>) -> usize {
        let at = self.size;
        self.size += b.len();
        self.items.push((b, link, old));
        at
    }
}

/// Lays `chains` (in blob order) out: each user chain's `ERROR` head, every chain's entries (foreign ones
/// byte for byte, ours encoded), each chain's tail (the policy of a built-in chain, `RETURN` for a user
/// chain), the final `ERROR` entry; and where each built-in chain starts and ends for its hook.
fn lay_out(t: &Table, l: &Layout, chains: &[&Chain]) -> Result<Laid> {
    let any = || entry::encode(l, &Rule::any());
    let head = |name: &str| -> Result<Vec<u8>> {
        let mut b = any()?;
        b.truncate(l.size);
        b.extend(exts::error(name));
        set_offsets(l, &mut b);
        Ok(b)
    };
    let mut laid = Laid {
        items: Vec::new(),
        firsts: Vec::new(),
        hook_entry: [0; 5],
        underflow: [0; 5],
        size: 0,
    };
    for c in chains {
        let hook = BUILTIN_CHAINS
            .iter()
            .position(|b| *b == c.name)
            .filter(|_| c.policy.is_some());
        if hook.is_none() {
            laid.push(head(&c.name)?, Link::Fixed, None);
            laid.firsts.push((c.name.clone(), laid.size));
        }
        let first = laid.size;
        for e in &c.entries {
            let (b, link) = match &e.raw {
                Some((raw, link)) => (raw.clone(), link.clone()),
                None => {
                    let link = match &e.rule.target {
                        Target::Jump(to) => Link::Chain(to.clone()),
                        Target::None => Link::Next,
                        _ => Link::Fixed,
                    };
                    let b = entry::encode(l, &e.rule).map_err(|err| err_in(t, &c.name, err))?;
                    (b, link)
                }
            };
            laid.push(b, link, e.old);
        }
        let mut tail = any()?;
        let (verdict, old) = match (hook, c.policy) {
            (Some(_), Some((v, old))) => (v, old),
            _ => (VERDICT_RETURN, None),
        };
        let vat = tail.len() - exts::STANDARD_SIZE + exts::EXT_HEADER;
        tail[vat..vat + 4].copy_from_slice(&verdict.to_ne_bytes());
        let at = laid.push(tail, Link::Fixed, old);
        if let Some(h) = hook {
            if t.valid_hooks & (1 << h) == 0 {
                return Err(Error::Rules(format!(
                    "table {} has no chain {}",
                    t.name, c.name
                )));
            }
            laid.hook_entry[h] = first as u32;
            laid.underflow[h] = at as u32;
        }
    }
    laid.push(head("ERROR")?, Link::Fixed, None);
    Ok(laid)
}

/// The blob's bytes with every jump and fall-through pointing at its entry's offset, and the old index
/// of each entry.
fn link(
    t: &Table,
    l: &Layout,
    items: Vec<Item>,
    firsts: &[(String, usize)],
    size: usize,
) -> Result<(Vec<u8>, Vec<Option<usize>>)> {
    let mut entries = Vec::with_capacity(size);
    let mut old = Vec::with_capacity(items.len());
    for (mut b, link, o) in items {
        let here = entries.len();
        let to = match &link {
            Link::Fixed => None,
            Link::Next => Some(here + b.len()),
            Link::Chain(name) => Some(
                firsts
                    .iter()
                    .find(|(n, _)| n == name)
                    .map(|(_, f)| *f)
                    .ok_or_else(|| {
                        Error::Rules(format!(
                            "table {}: a rule jumps to chain {name}, which does not exist",
                            t.name
                        ))
                    })?,
            ),
        };
        if let Some(to) = to {
            let toff = usize::from(u16::from_ne_bytes([
                b[l.target_offset_at],
                b[l.target_offset_at + 1],
            ]));
            let at = toff + exts::EXT_HEADER;
            let to = i32::try_from(to)
                .map_err(|_| Error::Rules(format!("table {} is too large", t.name)))?;
            b[at..at + 4].copy_from_slice(&to.to_ne_bytes());
        }
        entries.extend(b);
        old.push(o);
    }
    Ok((entries, old))
}

fn err_in(t: &Table, chain: &str, e: Error) -> Error {
    Error::Rules(format!(
        "legacy iptables table {} chain {chain}: {e}",
        t.name
    ))
}

/// Sets target_offset/next_offset of an entry made of a bare header and a target.
fn set_offsets(l: &Layout, e: &mut [u8]) {
    let toff = l.size as u16;
    let next = e.len() as u16;
    e[l.target_offset_at..l.target_offset_at + 2].copy_from_slice(&toff.to_ne_bytes());
    e[l.target_offset_at + 2..l.target_offset_at + 4].copy_from_slice(&next.to_ne_bytes());
}

/// The model of `t` as `iptables-legacy-save` lists it: built-ins in hook order, user chains by name.
pub fn model(t: &Table) -> crate::xtables::rule::Table {
    crate::xtables::rule::Table {
        name: t.name.clone(),
        chains: ordered(t)
            .into_iter()
            .map(|c| crate::xtables::rule::Chain {
                name: c.name.clone(),
                rules: c.entries.iter().map(|e| e.rule.clone()).collect(),
            })
            .collect(),
    }
}
