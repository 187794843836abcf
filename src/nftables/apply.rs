//! Programs and verifies a pod's namespace in nftables mode (spec nftables.md §3.4, §5): read our tables,
//! send nothing when they already match (a re-ADD is a no-op and keeps counters), otherwise one convergent
//! batch guarded by the generation id. Then `::6/128` on lo and the TPROXY policy routing through the
//! existing rtnetlink code. Runs on a thread inside the pod's namespace ([`crate::netns::run_in`]).

use super::decode;
use super::encode::{self, Attrs};
use super::model::{rule_text, Ruleset};
use super::socket::{view, Failure, Socket};
use super::state::{self, ChainState, Foreign, Tables};
use crate::error::{Context, Error, Result};
use crate::redirect::{CaptureConfig, TproxyRoute};
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Instant;

/// What ADD did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Applied,
    AlreadyInPlace,
    Converged,
}

/// Resolves a group name through the host's NSS (what nft does while parsing).
pub fn resolve_group(name: &str) -> Result<u32> {
    match nix::unistd::Group::from_name(name) {
        Ok(Some(g)) => Ok(g.gid.as_raw()),
        Ok(None) => Err(Error::Rules(format!(
            "owner group {name:?} does not exist on this node (nftables needs its numeric GID)"
        ))),
        Err(e) => Err(Error::io(
            format!("look up group {name:?}"),
            std::io::Error::from(e),
        )),
    }
}

/// What the namespace holds: generation id, our tables, foreign base chains.
pub struct Observed {
    pub genid: u32,
    pub ours: Tables,
    pub foreign: Vec<Foreign>,
}

fn is_ours(family: Option<u8>, table: &str) -> bool {
    family == Some(encode::NFPROTO_INET) && super::model::Table::from_name(table).is_some()
}

/// Reads the state; `full` also reads foreign chains' rules (CHECK). Without Istio tables and without
/// `full` this is two round trips.
pub fn observe(s: &mut Socket, full: bool) -> Result<Observed> {
    let seq = s.next_seq(1);
    let gen = s.request("read the ruleset generation", &encode::getgen_request(seq))?;
    let genid = gen
        .iter()
        .find(|(k, _)| *k == encode::nft_type(encode::NFT_MSG_NEWGEN))
        .map(|(k, b)| decode::gen_id(&view(*k, b)))
        .transpose()?
        .ok_or_else(|| Error::other("nftables: no generation id in the reply"))?;
    let seq = s.next_seq(1);
    let req = encode::dump_request(
        encode::NFT_MSG_GETTABLE,
        encode::NFPROTO_INET,
        seq,
        &Attrs::default(),
    );
    let mut names = Vec::new();
    for (k, b) in s.request("list tables", &req)? {
        names.push(decode::table_name(&view(k, &b))?);
    }
    let mut ours: Tables = BTreeMap::new();
    for n in names
        .iter()
        .filter(|n| super::model::Table::from_name(n).is_some())
    {
        ours.insert(n.clone(), Vec::new());
    }
    if ours.is_empty() && !full {
        return Ok(Observed {
            genid,
            ours,
            foreign: Vec::new(),
        });
    }
    let seq = s.next_seq(1);
    let req = encode::dump_request(
        encode::NFT_MSG_GETCHAIN,
        encode::NFPROTO_UNSPEC,
        seq,
        &Attrs::default(),
    );
    let mut foreign = Vec::new();
    for (k, b) in s.request("list chains", &req)? {
        let m = view(k, &b);
        let c = decode::chain(&m)?;
        if is_ours(decode::family(&m), &c.table) {
            if let Some(t) = ours.get_mut(&c.table) {
                t.push(ChainState {
                    name: c.name,
                    base: c.base,
                    rules: Vec::new(),
                });
            }
        } else if let Some((_, hooknum, priority)) = c.base {
            foreign.push(Foreign {
                family: decode::family(&m).unwrap_or(0),
                table: c.table,
                chain: c.name,
                hooknum,
                priority,
                rules: 0,
            });
        }
    }
    let seq = s.next_seq(1);
    let fam = if full {
        encode::NFPROTO_UNSPEC
    } else {
        encode::NFPROTO_INET
    };
    let req = encode::dump_request(encode::NFT_MSG_GETRULE, fam, seq, &Attrs::default());
    let mut rules = Vec::new();
    for (k, b) in s.request("list rules", &req)? {
        let m = view(k, &b);
        rules.push((decode::family(&m), decode::rule(&m)?));
    }
    let mut sets: BTreeMap<(String, String), String> = BTreeMap::new();
    for (family, r) in rules {
        if is_ours(family, &r.table) {
            let mut exprs = Vec::new();
            for e in r.exprs {
                exprs.push(match e {
                    super::expr::Expr::Lookup {
                        sreg, set, flags, ..
                    } => {
                        let key = (r.table.clone(), set.clone());
                        let elems = match sets.get(&key) {
                            Some(v) => v.clone(),
                            None => {
                                let v = set_elements(s, &r.table, &set)?;
                                sets.insert(key, v.clone());
                                v
                            }
                        };
                        super::expr::Expr::Lookup {
                            sreg,
                            set: elems,
                            set_id: None,
                            flags,
                        }
                    }
                    e => e,
                });
            }
            if let Some(c) = ours
                .get_mut(&r.table)
                .and_then(|t| t.iter_mut().find(|c| c.name == r.chain))
            {
                c.rules.push(exprs);
            }
        } else if let Some(f) = foreign
            .iter_mut()
            .find(|f| Some(f.family) == family && f.table == r.table && f.chain == r.chain)
        {
            f.rules += 1;
        }
    }
    Ok(Observed {
        genid,
        ours,
        foreign,
    })
}

fn set_elements(s: &mut Socket, table: &str, set: &str) -> Result<String> {
    let seq = s.next_seq(1);
    let mut a = Attrs::default();
    a.str(encode::NFTA_SET_ELEM_LIST_TABLE, table)
        .str(encode::NFTA_SET_ELEM_LIST_SET, set);
    let req = encode::dump_request(encode::NFT_MSG_GETSETELEM, encode::NFPROTO_INET, seq, &a);
    let mut keys = Vec::new();
    for (k, b) in s.request("list set elements", &req)? {
        keys.extend(decode::set_elems(&view(k, &b))?.1);
    }
    Ok(state::resolved(&keys))
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
fn failure_text(b: &encode::Batch, rs: &Ruleset, failures: &[Failure]) -> String {
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

/// Sends the batch for `rs`, replacing our tables if `replace` (retrying once, replacing, if the ruleset
/// changed under us).
fn send(s: &mut Socket, rs: &Ruleset, mut genid: u32, mut replace: bool) -> Result<()> {
    for attempt in 0..2 {
        let seq0 = s.next_seq(0);
        let b = encode::batch(rs, &resolve_group, Some(genid), seq0, replace)?;
        s.next_seq(b.what.len() as u32 + 2);
        let failures = s.run_batch(&b)?;
        if failures.is_empty() {
            return Ok(());
        }
        let restart = failures
            .iter()
            .any(|f| f.errno == nix::errno::Errno::ERESTART as i32 && f.seq == b.begin_seq);
        if restart && attempt == 0 {
            genid = observe(s, false)?.genid;
            replace = true;
            continue;
        }
        return Err(Error::Rules(failure_text(&b, rs, &failures)));
    }
    Err(Error::Rules(
        "nftables run failed: the ruleset kept changing".into(),
    ))
}

/// Applies `rs` (plus `::6` and TPROXY routing) in the current thread's namespace.
pub fn apply_here(rs: &Ruleset, ipv6: bool, tproxy: Option<TproxyRoute>) -> Result<Outcome> {
    let mut s = Socket::open()?;
    // A fresh namespace costs two round trips here; with our tables present this reads them all.
    let seen = observe(&mut s, false)?;
    let outcome = if seen.ours.is_empty() {
        send(&mut s, rs, seen.genid, false)?;
        Outcome::Applied
    } else {
        let want = state::desired(rs, &resolve_group)?;
        if state::diff(&want, &seen.ours, &|_, _, _| String::new()).is_empty() {
            Outcome::AlreadyInPlace
        } else {
            send(&mut s, rs, seen.genid, true)?;
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

/// CHECK with the plan made inside the namespace, as for [`apply_planned`].
pub fn check_planned<F>(netns_path: &str, planner: F) -> Result<()>
where
    F: FnOnce(&[(u32, IpAddr)]) -> Result<CaptureConfig> + Send + 'static,
{
    let problems = crate::netns::run_in(netns_path, move || {
        let rs = super::generate(&planner(&crate::netlink::addresses()?)?)?.ruleset();
        problems_here(&rs)
    })?;
    report_problems(problems)
}

/// CHECK: our tables equal `rs` and no foreign chain with rules is hooked before ours.
pub fn check(netns_path: &str, rs: Ruleset) -> Result<()> {
    let problems = crate::netns::run_in(netns_path, move || problems_here(&rs))?;
    report_problems(problems)
}

fn report_problems(problems: Vec<String>) -> Result<()> {
    if problems.is_empty() {
        Ok(())
    } else {
        Err(Error::Rules(format!(
            "redirection rules are not as expected (nftables): {}",
            problems.join("; ")
        )))
    }
}

/// What CHECK finds in the current thread's namespace against `rs`.
fn problems_here(rs: &Ruleset) -> Result<Vec<String>> {
    {
        let mut s = Socket::open()?;
        let seen = observe(&mut s, true)?;
        let want = state::desired(rs, &resolve_group)?;
        let mut p = state::diff(&want, &seen.ours, &|t, c, i| rule_text_at(rs, t, c, i));
        p.extend(state::hooked_before(&want, &seen.foreign));
        Ok(p)
    }
}

#[cfg(test)]
#[path = "apply_tests.rs"]
mod tests;
