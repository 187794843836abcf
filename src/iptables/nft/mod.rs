//! iptables-nft without exec: a restore document written as the nf_tables objects iptables-nft itself
//! writes (its `ip`/`ip6` tables `nat`, `mangle`, `raw`, their base chains, rules encoded as iptables-nft
//! 1.8.7 encodes them: the one encoding iptables-nft 1.8.7, 1.8.9 and 1.8.11 all print back exactly), in one
//! batch with one ack, and iptables-nft's tables read back into the model, whichever of those versions
//! wrote them (research for issue 40).
//!
//! Pure: [`builtin`] (tables, base chains), [`compat`] (x_tables extension payloads), [`xexpr`] (the
//! expression list codec), [`encode_rule`] / [`decode_rule`] (rule ⇄ expressions), [`plan`] (document →
//! steps, following the chains' rules), [`batch`] (steps → bytes), [`read::assemble`]. Effects: [`restore`]
//! and [`save`] on one `NETLINK_NETFILTER` socket in the calling thread's namespace.

pub mod batch;
pub mod builtin;
pub mod compat;
pub mod decode_rule;
pub mod encode_rule;
pub mod incompatible;
pub mod plan;
pub mod read;
pub mod xexpr;

use crate::error::{Error, Result};
use crate::netfilter::Family;
use crate::nftables::socket::Socket;
use crate::xtables::rule::{Rule, Table, TableOps};
use nix::errno::Errno;

/// How many times a batch is sent when the ruleset changed between reading it and the batch (`ERESTART`).
const ATTEMPTS: u32 = 3;

/// A rule as an error message names it: as iptables-save prints it.
pub fn describe(family: Family, r: &Rule) -> String {
    crate::xtables::spec::render(family, r)
}

/// Applies `doc` in the current thread's network namespace with `iptables-restore --noflush` semantics,
/// every table in one batch: all or nothing. `-N` of an existing chain fails (`NLM_F_EXCL`), and with it
/// the whole document.
pub fn restore(family: Family, doc: &[TableOps]) -> Result<()> {
    let mut s = Socket::open()?;
    for attempt in 1..=ATTEMPTS {
        let (genid, current) = match plan::needs_current(doc) {
            true => {
                let (g, c) = read::read(&mut s, family)?;
                (Some(g), Some(c))
            }
            false => (None, None),
        };
        let steps = plan::plan(family, doc, current.as_deref())?;
        if steps.is_empty() {
            return Ok(());
        }
        let seq0 = s.next_seq(steps.len() as u32 + 2);
        let b = batch::encode(family, &steps, genid, seq0);
        let failures = s.run_raw(&b.bytes, b.ack_seq)?;
        if failures.is_empty() {
            return Ok(());
        }
        let restart = failures
            .iter()
            .any(|f| f.errno == Errno::ERESTART as i32 && f.seq == b.begin_seq);
        if restart && attempt < ATTEMPTS {
            continue;
        }
        let text: Vec<String> = failures
            .iter()
            .map(|f| {
                let what = b.what.iter().find(|w| w.0 == f.seq).map(|w| w.1.as_str());
                let what = what.unwrap_or("the batch");
                match f.errno {
                    0 => format!("{what}: the kernel did not answer"),
                    e if e == Errno::EEXIST as i32 => format!("{what}: it already exists"),
                    e => format!("{what}: {}", std::io::Error::from_raw_os_error(e)),
                }
            })
            .collect();
        return Err(Error::Rules(format!(
            "iptables-nft ({}) restore failed, nothing was changed: {}",
            family.name(),
            text.join("; ")
        )));
    }
    Err(Error::Rules(format!(
        "iptables-nft ({}) restore failed: the ruleset changed under us {ATTEMPTS} times in a row; \
         nothing was changed",
        family.name()
    )))
}

/// iptables-nft's tables of `family` in the current thread's namespace, as iptables-nft-save lists them.
pub fn save(family: Family) -> Result<Vec<Table>> {
    Ok(read::tables(&read_with_handles(family)?))
}

/// The chains of iptables-nft's tables of `family` that iptables-nft would not have made
/// ([`incompatible::chains`]): nothing [`save`] can show.
pub fn incompatible_chains(family: Family) -> Result<Vec<String>> {
    Ok(inspect(family)?.incompatible)
}

/// What [`inspect`] read: iptables-nft's tables of a family as [`save`] lists them, and what the rule
/// model cannot show: the chains [`incompatible_chains`] names, and our tables that are dormant
/// ([`incompatible::dormant`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inspection {
    pub tables: Vec<Table>,
    pub incompatible: Vec<String>,
    pub dormant: Vec<String>,
    /// [`incompatible::acting`]: what the node's `-save` would not show (our own text shows it).
    pub acting: Vec<String>,
}

/// The family's name as nft lists its tables: `ip`, `ip6`.
fn nft_family(family: Family) -> &'static str {
    crate::netfilter::family_name(family.nfproto())
}

/// [`save`], [`incompatible_chains`] and our dormant tables from one read of the kernel's tables.
pub fn inspect(family: Family) -> Result<Inspection> {
    Ok(inspection(family, &read_with_handles(family)?))
}

/// The [`Inspection`] of one read.
fn inspection(family: Family, current: &[plan::CurrentTable]) -> Inspection {
    let name = nft_family(family);
    let tables = read::tables(current);
    Inspection {
        acting: incompatible::acting(family, &tables),
        tables,
        incompatible: incompatible::chains(name, current),
        dormant: incompatible::dormant(name, current),
    }
}

/// [`inspect`] for the node's iptables (which need not be iptables-nft): a kernel without nf_tables
/// holds no table. What the node's `-save` cannot show is read here: table flags, chains' hooks.
pub fn inspect_if_any(family: Family) -> Result<Inspection> {
    Ok(inspection(family, &read_if_any(family)?))
}

/// [`read_with_handles`], for the node's iptables (which need not be iptables-nft): a kernel without
/// nf_tables holds no table ([`crate::nftables::observe::no_nf_tables`]).
fn read_if_any(family: Family) -> Result<Vec<plan::CurrentTable>> {
    match read_with_handles(family) {
        Err(e) if crate::nftables::observe::no_nf_tables(&e) => Ok(Vec::new()),
        r => r,
    }
}

/// Wakes those of `tables` that hold one of our chains and are flagged dormant, as the batch of
/// [`restore`] ends (its [`plan::Step::Wake`]): for the node's `iptables-nft-restore`, which sends no table
/// flags, so a table flagged dormant before it wrote our rules would run none of them. One read, and a
/// batch only when there is a table to wake. The lines [`incompatible::dormant`] named for the tables woken.
pub fn wake_dormant(family: Family, tables: &[String]) -> Result<Vec<String>> {
    let asleep: Vec<plan::CurrentTable> = read_if_any(family)?
        .into_iter()
        .filter(|t| tables.contains(&t.name) && incompatible::ours_dormant(t))
        .collect();
    if asleep.is_empty() {
        return Ok(Vec::new());
    }
    let wake: Vec<TableOps> = asleep
        .iter()
        .map(|t| TableOps {
            table: t.name.clone(),
            ops: Vec::new(),
        })
        .collect();
    restore(family, &wake)?;
    Ok(incompatible::dormant(nft_family(family), &asleep))
}

/// [`save`] with every rule's handle.
pub fn read_with_handles(family: Family) -> Result<Vec<plan::CurrentTable>> {
    let mut s = Socket::open()?;
    Ok(read::read(&mut s, family)?.1)
}

#[cfg(test)]
mod encode_tests;
#[cfg(test)]
mod ext_forms;
#[cfg(test)]
mod header_forms;
#[cfg(test)]
mod plan_tests;
#[cfg(test)]
mod test_exprs;
