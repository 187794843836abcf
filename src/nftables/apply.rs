//! Programs and verifies a pod's namespace in nftables mode (spec nftables.md §3.4, §5): read our tables,
//! send nothing when they already match (a re-ADD is a no-op and keeps counters), otherwise one convergent
//! batch guarded by the generation id; a fresh namespace that held tables not ours, or legacy x_tables
//! tables, is read after its batch for what can take traffic past our tables, as a re-ADD is
//! (`fresh_bypass`). Then `::6/128` on lo and the TPROXY policy routing through the
//! existing rtnetlink code. Runs on a thread inside the pod's namespace ([`crate::netns::run_in`]).

use super::batch::{self, Batch};
use super::contention::{backoff, namespace_lock};
use super::model::{rule_text, Ruleset};
use super::observe;
use super::reader::{self, Reader};
use super::socket::{Failure, Socket};
use super::state;
use crate::error::{Context, Error, Result};
use crate::netfilter::{bypass, Outcome, FAMILIES};
use crate::redirect::{CaptureConfig, TproxyRoute};
use std::net::IpAddr;
use std::time::Instant;

/// Resolves a group name through the host's NSS (what nft does while parsing).
pub fn resolve_group(name: &str) -> Result<u32> {
    crate::netfilter::owner::id(crate::netfilter::owner::Owner::Group, name)
}

fn rule_text_at(rs: &Ruleset, table: &str, chain: &str, i: usize) -> String {
    rs.tables
        .iter()
        .filter(|t| t.table.name() == table)
        .flat_map(|t| t.chains.iter())
        .find(|c| c.name == chain)
        .and_then(|c| c.rules.get(i))
        .map(|r| format!("inet {table} {chain} {}", rule_text(r)))
        .unwrap_or_else(|| format!("inet {table} {chain} rule {i}"))
}

/// The operator's message for failed batch messages: the operation in nft syntax, the kernel's error and,
/// for `ENOENT`, the modules the message's expressions need.
fn failure_text(b: &Batch, rs: &Ruleset, failures: &[Failure]) -> String {
    let first = b.what.first().map(|w| w.seq);
    let parts: Vec<String> = failures
        .iter()
        .map(|f| {
            let err = std::io::Error::from_raw_os_error(f.errno);
            let Some(w) = b.what.iter().find(|w| w.seq == f.seq) else {
                return format!("batch: {err}");
            };
            if f.errno == 0 {
                return format!("the kernel did not acknowledge {}", w.op(rs));
            }
            let mut s = format!("{}: {err}", w.op(rs));
            if f.errno == nix::errno::Errno::ENOENT as i32 && !w.modules.is_empty() {
                let m: Vec<String> = w
                    .modules
                    .iter()
                    .map(|(e, m)| format!("{e} needs kernel module {m}"))
                    .collect();
                s.push_str(&format!(" (if the kernel lacks support: {})", m.join(", ")));
            }
            if Some(f.seq) == first {
                // The kernel reports errors found only at commit against the first message.
                s.push_str(" (or found at commit: it may concern any message of the batch)");
            }
            s
        })
        .collect();
    format!("nftables run failed: {}", parts.join("; "))
}

/// How many times a batch is sent when the ruleset keeps changing under us (`ERESTART`: another program,
/// or a concurrent ADD into the same namespace, committed between our read and our batch).
const ATTEMPTS: u32 = 8;

/// Sends the batch for `rs`, replacing our tables if `replace`. When the kernel refuses it because the
/// ruleset changed since `genid`, takes the namespace lock ([`contention::namespace_lock`]), reads the new generation
/// and sends the replacing batch again, after a short growing pause ([`contention::backoff`]), at most [`ATTEMPTS`]
/// times in all. A first attempt takes no lock: a fresh pod's ADD costs nothing more.
fn send(s: &mut Socket, rs: &Ruleset, mut genid: u32, mut replace: bool) -> Result<()> {
    let mut held = None;
    for attempt in 1..=ATTEMPTS {
        let seq0 = s.next_seq(0);
        let b = batch::batch(rs, &resolve_group, Some(genid), seq0, replace)?;
        s.next_seq(b.what.len() as u32 + 2);
        let failures = s.run_batch(&b)?;
        if failures.is_empty() {
            return Ok(());
        }
        let restart = failures
            .iter()
            .any(|f| f.errno == nix::errno::Errno::ERESTART as i32 && f.seq == b.begin_seq);
        if !restart {
            return Err(Error::Rules(failure_text(&b, rs, &failures)));
        }
        if attempt < ATTEMPTS {
            if held.is_none() {
                held = namespace_lock();
            }
            std::thread::sleep(backoff(attempt));
            genid = reader::genid(s)?;
            replace = true;
        }
    }
    Err(Error::Rules(format!(
        "nftables run failed: the ruleset changed under us {ATTEMPTS} times in a row (another program, \
         or a concurrent ADD, keeps changing this namespace's nftables rules); nothing was applied"
    )))
}

/// Applies `rs` (plus `::6` and TPROXY routing) in the current thread's namespace.
pub fn apply_here(rs: &Ruleset, ipv6: bool, tproxy: Option<TproxyRoute>) -> Result<Outcome> {
    let mut s = Socket::open()?;
    // A fresh namespace costs two round trips here (generation id, tables).
    let mut r = Reader::new(&mut s);
    let head = observe::head(&mut r)?;
    let outcome = if head.ours.is_empty() {
        send(&mut s, rs, head.genid, false)?;
        fresh_bypass(&mut s, rs, head.others > 0)?;
        Outcome::Applied
    } else {
        // Our tables exist: before calling them "in place", read them and whatever runs before them, in
        // one generation (a foreign chain added between two dumps would be missed).
        let want = state::desired(rs, &resolve_group)?;
        let hooks = state::our_hooks(&want);
        let (head, seen) = observe::in_one_generation(&mut s, "read the rules", &mut |r, h| {
            observe::observe(r, h, &hooks)
        })?;
        let mut foreign = seen.foreign;
        foreign.extend(beyond_nf_tables(&mut s)?);
        bypass::refuse(&foreign, " (nftables)")?;
        let same = state::diff(&want, &seen.ours, &|_, _, _| String::new()).is_empty();
        // "In place" only for a state read in one generation; otherwise the guarded batch decides.
        if same && seen.dormant.is_empty() && reader::genid(&mut s)? == head.genid {
            Outcome::AlreadyInPlace
        } else {
            // Re-creating our tables also clears a dormant flag.
            send(&mut s, rs, head.genid, true)?;
            Outcome::Converged
        }
    };
    crate::netlink::program_pod_routing(
        ipv6,
        tproxy.map(|t| (t.mark, t.table)),
        tproxy.is_some_and(|t| t.ipv6),
    )?;
    Ok(outcome)
}

/// After a fresh namespace's batch: what something before us in the CNI chain left there that takes
/// traffic past our new tables fails the ADD as it fails a re-ADD, our tables left in place. A fresh pod's
/// namespace normally holds no table: then this costs the two reads of the legacy table names, and the
/// nf_tables rules are read only when [`observe::head`] counted a table not ours (`others`).
fn fresh_bypass(s: &mut Socket, rs: &Ruleset, others: bool) -> Result<()> {
    let mut foreign = Vec::new();
    if others {
        let want = state::desired(rs, &resolve_group)?;
        let hooks = state::our_hooks(&want);
        let (_, seen) = observe::in_one_generation(s, "read the rules", &mut |r, h| {
            observe::observe(r, h, &hooks)
        })?;
        foreign = seen.foreign;
    }
    foreign.extend(crate::xtables::findings(&FAMILIES)?);
    bypass::refuse(&foreign, " (nftables)")
}

/// What can take traffic past our tables beyond nf_tables' own chains, for CHECK and a re-ADD over our
/// tables: the x_tables tables of both backends, and the conntrack expectations ([`super::expect`]; a
/// fresh ADD reads only the first, [`fresh_bypass`]).
fn beyond_nf_tables(s: &mut Socket) -> Result<Vec<String>> {
    let mut found = crate::xtables::findings(&FAMILIES)?;
    found.extend(observe::expectation_findings(s)?);
    Ok(found)
}

/// Applies in the namespace at `netns_path`.
pub fn apply(
    netns_path: &str,
    rs: Ruleset,
    ipv6: bool,
    tproxy: Option<TproxyRoute>,
) -> Result<Outcome> {
    crate::netns::run_in(netns_path, move || apply_here(&rs, ipv6, tproxy))
        .context("program the pod's network namespace (nftables)")
}

/// What [`apply_planned`] did, for the decision log.
#[derive(Debug, Clone, Copy)]
pub struct Report {
    pub outcome: Outcome,
    pub ipv6: bool,
    pub tproxy: bool,
    /// Microseconds to read the namespace's addresses and build the ruleset.
    pub plan_us: u128,
    /// Microseconds to apply it (state read, batch, acks, lo and routes).
    pub apply_us: u128,
}

/// Enters the namespace at `netns_path` once: reads its addresses, asks `planner` (pure) for the capture
/// configuration, generates the ruleset and applies it ([`apply_here`]). The plugin's and repair's path.
pub fn apply_planned<F>(netns_path: &str, planner: F) -> Result<Report>
where
    F: FnOnce(&[(u32, IpAddr)]) -> Result<CaptureConfig> + Send + 'static,
{
    crate::netns::run_in(netns_path, move || {
        let t = Instant::now();
        let cfg = planner(&crate::netlink::addresses()?)?;
        let rs = super::generate(&cfg)?.ruleset();
        let plan_us = t.elapsed().as_micros();
        let t = Instant::now();
        let outcome = apply_here(&rs, cfg.enable_ipv6, cfg.tproxy_route())?;
        Ok(Report {
            outcome,
            ipv6: cfg.enable_ipv6,
            tproxy: cfg.tproxy_route().is_some(),
            plan_us,
            apply_us: t.elapsed().as_micros(),
        })
    })
    .context("program the pod's network namespace (nftables)")
}

/// CHECK with the plan made inside the namespace (as for [`apply_planned`]), its findings split into our
/// tables' problems and what bypasses them.
pub fn inspect_planned<F>(netns_path: &str, planner: F) -> Result<bypass::Findings>
where
    F: FnOnce(&[(u32, IpAddr)]) -> Result<CaptureConfig> + Send + 'static,
{
    crate::netns::run_in(netns_path, move || {
        let rs = super::generate(&planner(&crate::netlink::addresses()?)?)?.ruleset();
        findings_here(&rs)
    })
}

/// CHECK: our tables equal `rs`, none is dormant, and nothing before them can move traffic past them.
pub fn check(netns_path: &str, rs: Ruleset) -> Result<()> {
    crate::netns::run_in(netns_path, move || findings_here(&rs))?.check(" (nftables)")
}

/// What CHECK finds in the current thread's namespace against `rs`: our tables as they should be and not
/// dormant, and nothing before them (native nftables or legacy x_tables) that can move traffic past them,
/// nor a conntrack expectation ([`super::expect`]).
fn findings_here(rs: &Ruleset) -> Result<bypass::Findings> {
    let mut s = Socket::open()?;
    let want = state::desired(rs, &resolve_group)?;
    let hooks = state::our_hooks(&want);
    let (_, seen) = observe::in_one_generation(&mut s, "read the rules", &mut |r, h| {
        observe::observe(r, h, &hooks)
    })?;
    let mut ours = state::diff(&want, &seen.ours, &|t, c, i| rule_text_at(rs, t, c, i));
    ours.extend(seen.dormant.iter().map(|t| {
        format!(
            "table inet {t} is dormant (none of its chains is hooked: traffic is not redirected)"
        )
    }));
    let mut bypass = seen.foreign;
    bypass.extend(beyond_nf_tables(&mut s)?);
    Ok(bypass::Findings { ours, bypass })
}

#[cfg(test)]
#[path = "apply_tests.rs"]
mod tests;
