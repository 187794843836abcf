//! What `IPT_SO_GET_ENTRIES` returned, read into a [`Table`] of chains and entries (pure). An entry is
//! ours when it decodes to a [`crate::xtables::rule::Rule`] that encodes back to exactly its bytes (counters and `comefrom`
//! aside, which the kernel owns); anything else is foreign: its bytes are kept, and where its standard
//! verdict goes (a user chain, the next entry) is remembered so [`super::blob::build`] can move it.
//! Malformed input is an error, never a panic.

use super::blob::{Chain, Entry, Link, Table};
use super::entry::{self, Layout};
use super::exts::{self, VERDICT_RETURN};
use crate::error::{Error, Result};
use crate::netfilter::{Family, BUILTIN_CHAINS};
use crate::xtables::rule::{Match, Target};

fn bad(what: impl std::fmt::Display) -> Error {
    Error::other(format!("malformed x_tables table from the kernel: {what}"))
}

struct Slot<'a> {
    off: usize,
    bytes: &'a [u8],
    parts: entry::Parts<'a>,
    target: String,
    verdict: Option<i32>,
}

fn slots<'a>(l: &Layout, blob: &'a [u8]) -> Result<Vec<Slot<'a>>> {
    let mut out = Vec::new();
    let mut off = 0;
    while off < blob.len() {
        let e = &blob[off..];
        let at = l.target_offset_at + 2;
        let next = e
            .get(at..at + 2)
            .map(|b| usize::from(u16::from_ne_bytes([b[0], b[1]])));
        let next = next
            .filter(|&n| n >= l.size && n <= e.len())
            .ok_or_else(|| bad(format!("entry at {off} out of range")))?;
        let bytes = &e[..next];
        let parts = entry::parts(l, bytes)
            .ok_or_else(|| bad(format!("entry at {off}: bad match or target size")))?;
        let tsize = usize::from(u16::from_ne_bytes([
            bytes[parts.target_at],
            bytes[parts.target_at + 1],
        ]));
        let (target, _, data) = entry::ext_at(bytes, parts.target_at, tsize);
        let verdict = (target.is_empty() && data.len() >= 4)
            .then(|| i32::from_ne_bytes([data[0], data[1], data[2], data[3]]));
        out.push(Slot {
            off,
            bytes,
            parts,
            target,
            verdict,
        });
        off += next;
    }
    Ok(out)
}

/// The table `IPT_SO_GET_INFO` (`valid_hooks`, `hook_entry`, `underflow`) and `IPT_SO_GET_ENTRIES`
/// (`blob`) describe. Errors on anything libiptc would refuse too (a jump into the middle of a chain, an
/// entry outside any chain).
pub fn parse(
    family: Family,
    name: &str,
    valid_hooks: u32,
    hook_entry: &[u32; 5],
    underflow: &[u32; 5],
    blob: &[u8],
) -> Result<Table> {
    let l = entry::layout(family);
    let slots = slots(&l, blob)?;
    // The first entry of each chain, by offset, and the hook of a built-in one.
    let mut starts: Vec<(usize, String, Option<usize>)> = Vec::new();
    for (h, c) in BUILTIN_CHAINS.iter().enumerate() {
        if valid_hooks & (1 << h) != 0 {
            starts.push((hook_entry[h] as usize, c.to_string(), Some(h)));
        }
    }
    for s in slots.iter().filter(|s| s.target == "ERROR") {
        let (_, _, d) = entry::ext_at(
            s.bytes,
            s.parts.target_at,
            s.bytes.len() - s.parts.target_at,
        );
        let end = d.iter().position(|&c| c == 0).unwrap_or(d.len());
        let chain = String::from_utf8_lossy(&d[..end]).into_owned();
        if chain != "ERROR" {
            starts.push((s.off + s.bytes.len(), chain, None));
        }
    }
    let start_at = |off: usize| starts.iter().find(|(o, _, _)| *o == off);
    let mut chains: Vec<Chain> = Vec::new();
    // The hook of the chain being read (`Some(None)`: a user chain), `None` between chains.
    let mut open: Option<Option<usize>> = None;
    for (i, s) in slots.iter().enumerate() {
        if s.target == "ERROR" {
            open = None;
            continue;
        }
        if let Some((_, name, hook)) = start_at(s.off) {
            chains.push(Chain {
                name: name.clone(),
                policy: None,
                entries: Vec::new(),
            });
            open = Some(*hook);
        }
        let (Some(hook), Some(chain)) = (open, chains.last_mut()) else {
            return Err(bad(format!("entry at {} outside any chain", s.off)));
        };
        if let Some(h) = hook.filter(|&h| underflow[h] as usize == s.off) {
            let v = s
                .verdict
                .filter(|&v| v < 0)
                .ok_or_else(|| bad(format!("policy of {} is not a verdict", BUILTIN_CHAINS[h])))?;
            // libiptc (1.8.9) hands back the counters of the rules it keeps but starts the policies'
            // at zero: so do we (the tool's `-c` output is the contract).
            chain.policy = Some((v, None));
            open = None;
            continue;
        }
        if hook.is_none() && slots.get(i + 1).is_some_and(|n| n.target == "ERROR") {
            if s.verdict != Some(VERDICT_RETURN) {
                return Err(bad(format!(
                    "user chain {} does not end with RETURN",
                    chain.name
                )));
            }
            open = None;
            continue;
        }
        let link = match s.verdict {
            Some(v) if v >= 0 => {
                let to = v as usize;
                if to == s.off + s.bytes.len() {
                    Link::Next
                } else {
                    match start_at(to) {
                        Some((_, c, None)) => Link::Chain(c.clone()),
                        _ => {
                            return Err(bad(format!(
                                "entry at {} jumps to {to}, not the start of a user chain",
                                s.off
                            )))
                        }
                    }
                }
            }
            _ => Link::Fixed,
        };
        let as_target = match &link {
            Link::Fixed => None,
            Link::Chain(c) => Some(Target::Jump(c.clone())),
            Link::Next => Some(Target::None),
        };
        let mut rule = entry::decode(&l, &s.parts, as_target);
        let raw = entry::normalized(&l, s.bytes);
        let ours = !entry::has_other(&rule)
            && entry::encode(&l, &rule).ok().is_some_and(|mut b| {
                // The verdict of a jump or fall-through depends on the layout, not on the rule.
                let at = s.parts.target_at + exts::EXT_HEADER;
                if link != Link::Fixed && b.len() >= at + 4 {
                    b[at..at + 4].copy_from_slice(&raw[at..at + 4]);
                }
                b == raw
            });
        if !ours && !entry::has_other(&rule) {
            rule.matches
                .push(Match::Other("fields this decoder does not model".into()));
        }
        chain.entries.push(Entry {
            rule,
            raw: (!ours).then_some((raw, link)),
            old: Some(i),
        });
    }
    for (h, c) in BUILTIN_CHAINS.iter().enumerate() {
        if valid_hooks & (1 << h) != 0 && !chains.iter().any(|x| x.name == *c && x.policy.is_some())
        {
            return Err(bad(format!("built-in chain {c} without its policy")));
        }
    }
    for (i, c) in chains.iter().enumerate() {
        if chains[..i].iter().any(|x| x.name == c.name) {
            return Err(bad(format!("two chains named {}", c.name)));
        }
    }
    Ok(Table {
        family,
        name: name.to_string(),
        valid_hooks,
        chains,
    })
}
