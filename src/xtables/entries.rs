//! The binary form of one legacy x_tables table as `IPT_SO_GET_INFO` / `IPT_SO_GET_ENTRIES` (and the
//! IPv6 twins) return it (pure): `ipt_getinfo` (hook entry points and policies), then the entries back to
//! back, each `ipt_entry` (or `ip6t_entry`) + matches + one target. A built-in chain starts at its hook's
//! entry point and ends with its policy entry; a user chain starts after an `ERROR` entry naming it and
//! ends with a `RETURN` entry; a final `ERROR` entry ends the table. Standard targets carry a verdict: a
//! negative one is `-NF_x - 1` (`RETURN` is `-NF_REPEAT - 1`), a positive one the offset jumped to.
//! Malformed input is an error, never a panic (layouts of `linux/netfilter_ipv{4,6}/ip{,6}_tables.h`,
//! 64-bit).

use super::{Chains, Rule, Target};
use crate::error::{Error, Result};
use crate::netfilter::{BUILTIN_CHAINS, NF_ACCEPT, NF_DROP, NF_QUEUE, NF_REPEAT};
use std::collections::BTreeMap;

/// Where the fields we read sit in an entry.
#[derive(Debug, Clone, Copy)]
pub struct Layout {
    /// `sizeof(struct ipt_entry)`: matches start here.
    pub entry_size: usize,
    /// Offset of `target_offset` (u16); `next_offset` (u16) follows it.
    pub target_offset_at: usize,
}

/// `struct ipt_entry`: `ipt_ip` (84) + nfcache (4) + target_offset, next_offset + comefrom + counters.
pub const IPV4: Layout = Layout {
    entry_size: 112,
    target_offset_at: 88,
};
/// `struct ip6t_entry`: `ip6t_ip6` (136) + nfcache (4) + target_offset, next_offset + comefrom + counters.
pub const IPV6: Layout = Layout {
    entry_size: 168,
    target_offset_at: 140,
};

/// `sizeof(struct ipt_getinfo)`: `name[32]`, valid_hooks, `hook_entry[5]`, `underflow[5]`, num_entries, size.
pub const INFO_LEN: usize = 84;
/// `sizeof(struct ipt_get_entries)` without its entries: `name[32]`, size, padding to 8.
pub const ENTRIES_HEADER: usize = 40;
/// `xt_entry_match` / `xt_entry_target` header: size (u16), name[29], revision.
const EXT_HEADER: usize = 32;

/// `ipt_getinfo`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Info {
    pub valid_hooks: u32,
    pub hook_entry: [u32; 5],
    /// Offset of each hook's policy entry.
    pub underflow: [u32; 5],
    pub num_entries: u32,
    pub size: u32,
}

fn bad(what: &str) -> Error {
    Error::other(format!("malformed x_tables table from the kernel: {what}"))
}

fn u16_at(b: &[u8], i: usize) -> Result<u16> {
    b.get(i..i + 2)
        .and_then(|s| s.try_into().ok())
        .map(u16::from_ne_bytes)
        .ok_or_else(|| bad("truncated"))
}

fn u32_at(b: &[u8], i: usize) -> Result<u32> {
    b.get(i..i + 4)
        .and_then(|s| s.try_into().ok())
        .map(u32::from_ne_bytes)
        .ok_or_else(|| bad("truncated"))
}

/// A NUL-terminated name of at most `max` bytes at `i`.
fn name_at(b: &[u8], i: usize, max: usize) -> Result<String> {
    let s = b.get(i..).ok_or_else(|| bad("truncated name"))?;
    let s = &s[..s.len().min(max)];
    let end = s.iter().position(|&c| c == 0).unwrap_or(s.len());
    Ok(String::from_utf8_lossy(&s[..end]).into_owned())
}

pub fn info(b: &[u8]) -> Result<Info> {
    let mut hook_entry = [0u32; 5];
    let mut underflow = [0u32; 5];
    for h in 0..5 {
        hook_entry[h] = u32_at(b, 36 + 4 * h)?;
        underflow[h] = u32_at(b, 56 + 4 * h)?;
    }
    Ok(Info {
        valid_hooks: u32_at(b, 32)?,
        hook_entry,
        underflow,
        num_entries: u32_at(b, 76)?,
        size: u32_at(b, 80)?,
    })
}

/// One entry as laid out: offset, length, target name and data, match names.
struct Raw {
    off: usize,
    next: usize,
    target: String,
    data: Vec<u8>,
    matches: Vec<String>,
}

fn raw_entries(l: Layout, blob: &[u8]) -> Result<Vec<Raw>> {
    let mut out = Vec::new();
    let mut off = 0;
    while off < blob.len() {
        let e = &blob[off..];
        let toff = usize::from(u16_at(e, l.target_offset_at)?);
        let next = usize::from(u16_at(e, l.target_offset_at + 2)?);
        if toff < l.entry_size || toff + EXT_HEADER > next || next > e.len() {
            return Err(bad("entry offsets out of range"));
        }
        let mut matches = Vec::new();
        let mut m = l.entry_size;
        while m < toff {
            let size = usize::from(u16_at(e, m)?);
            if size < EXT_HEADER || m + size > toff {
                return Err(bad("match size out of range"));
            }
            matches.push(name_at(e, m + 2, 29)?);
            m += size;
        }
        let tsize = usize::from(u16_at(e, toff)?).clamp(EXT_HEADER, next - toff);
        out.push(Raw {
            off,
            next,
            target: name_at(e, toff + 2, 29)?,
            data: e[toff + EXT_HEADER..toff + tsize].to_vec(),
            matches,
        });
        off += next;
    }
    Ok(out)
}

fn target(r: &Raw, starts: &BTreeMap<usize, String>) -> Result<Target> {
    if !r.target.is_empty() {
        return Ok(Target::Ext(r.target.clone()));
    }
    let v = i32::from_ne_bytes(
        r.data
            .get(..4)
            .and_then(|s| s.try_into().ok())
            .ok_or_else(|| bad("standard target without a verdict"))?,
    );
    if v >= 0 {
        let to = v as usize;
        return Ok(if to == r.off + r.next {
            Target::Fall
        } else {
            match starts.get(&to) {
                Some(c) => Target::Jump(c.clone()),
                None => Target::Ext(format!("jump to offset {to}")),
            }
        });
    }
    Ok(match v.checked_neg().map(|n| n - 1) {
        Some(NF_DROP) => Target::Drop,
        Some(NF_ACCEPT) => Target::Accept,
        Some(NF_QUEUE) => Target::Queue,
        Some(NF_REPEAT) => Target::Return,
        _ => Target::Ext(format!("verdict {v}")),
    })
}

/// The table's chains, each with its rules in order (policies and user-chain tails left out), read as the
/// kernel runs them: a hook starts at its `hook_entry` offset and its policy is the entry at its
/// `underflow` offset, whatever `ERROR` headers (names libiptc gives its user chains) or the layout say.
/// Chains starting at one offset share their rules under every name: raw `OUTPUT` hooked at the first rule
/// of a chain an `ERROR` header names `FOO` runs those rules at `OUTPUT` (a table any program with
/// `NET_ADMIN` can hand the kernel, measured), and two hooks may share an entry point. A rule after
/// another hook's entry point still runs at the first hook when it falls through to it: the walk of the
/// first hook follows on into the shared rules ([`Target::Jump`] to the next chain's first name).
pub fn chains(l: Layout, info: &Info, blob: &[u8]) -> Result<Chains> {
    let raws = raw_entries(l, blob)?;
    let mut starts: BTreeMap<usize, Vec<String>> = BTreeMap::new();
    let mut policies = std::collections::BTreeSet::new();
    for (h, name) in BUILTIN_CHAINS.iter().enumerate() {
        if info.valid_hooks & (1 << h) != 0 {
            starts
                .entry(info.hook_entry[h] as usize)
                .or_default()
                .push(name.to_string());
            policies.insert(info.underflow[h] as usize);
        }
    }
    for r in raws.iter().filter(|r| r.target == "ERROR") {
        let name = name_at(&r.data, 0, 32)?;
        if name != "ERROR" {
            starts.entry(r.off + r.next).or_default().push(name);
        }
    }
    // Jumps name a chain by its first name (a hook's, when one starts there).
    let first: BTreeMap<usize, String> = starts
        .iter()
        .filter_map(|(o, n)| n.first().map(|n| (*o, n.clone())))
        .collect();
    let mut out = Chains::new();
    let mut current: Option<&Vec<String>> = None;
    // Whether the current chain has passed a policy: nothing falls through from there.
    let mut ended = false;
    for (i, r) in raws.iter().enumerate() {
        if let Some(names) = starts.get(&r.off) {
            // Falling through into another chain's entry point: the rules after it run here too.
            if let (Some(prev), Some(to), false) = (current, first.get(&r.off), ended) {
                for c in prev {
                    out.entry(c.clone()).or_default().push(Rule {
                        text: format!("on into chain {to}"),
                        target: Target::Jump(to.clone()),
                    });
                }
            }
            current = Some(names);
            ended = false;
            for c in names {
                out.entry(c.clone()).or_default();
            }
        }
        if r.target == "ERROR" {
            current = None;
            continue;
        }
        let Some(names) = current else {
            return Err(bad("an entry outside any chain"));
        };
        if policies.contains(&r.off) {
            // A policy ends the hook's traversal. Entries after it that no chain starts at run from no
            // hook; they stay in this chain's list (walked: fail closed).
            ended = true;
            continue;
        }
        let t = target(r, &first)?;
        // A user chain's tail: a RETURN that the next chain's header follows (harmless either way).
        if t == Target::Return && raws.get(i + 1).is_some_and(|n| n.target == "ERROR") {
            continue;
        }
        let mut text = t.text();
        if !r.matches.is_empty() {
            text.push_str(&format!(" (matches {})", r.matches.join(", ")));
        }
        for c in names {
            out.entry(c.clone()).or_default().push(Rule {
                text: text.clone(),
                target: t.clone(),
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
#[path = "entries_tests.rs"]
mod tests;
