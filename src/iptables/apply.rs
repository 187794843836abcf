//! Programs a pod's network namespace, fail-closed and idempotent.
//!
//! Fast path (a fresh pod): one `iptables-restore --noflush` per IP family, and before it one look at
//! whether the namespace holds any table at all (`holds_tables`: the legacy table names, one nf_tables
//! table dump); a fresh pod's namespace holds none. When it does (something before us in the CNI chain
//! left rules), the fresh ADD then reads everything CHECK reads and fails naming any rule that can take
//! traffic past ours, as a re-ADD does, our rules left in place. The document
//! declares our chains with `-N`, so on a namespace that already has them the restore fails atomically; only
//! then do we take the slow path: dump the namespace, compare with the desired rules (as `iptables-save` prints
//! them, rendered purely by [`crate::xtables::spec`]), and either do nothing (same rules: a re-ADD is a no-op) or converge in one atomic
//! restore (upstream fails here instead). Before answering "in place" or "converged", the slow path also
//! looks wherever else the kernel looks before our redirect (other programs' raw/mangle rules in our
//! backend, the other x_tables backend, native nf_tables base chains; [`elsewhere`]) and fails naming any
//! rule there that can take traffic past it.

use super::{foreign, save, state, Io};
use crate::error::{Context, Error, Result};
use crate::netfilter::{bypass, is_builtin, is_our_chain, Family, OurHook, Outcome, OUR_HOOKS};
use crate::netns;
use std::net::IpAddr;
use std::time::Instant;

/// What to program in one namespace.
#[derive(Debug, Clone)]
pub struct Plan {
    /// `(family, iptables-restore document)`; IPv4 first.
    pub docs: Vec<(Family, String)>,
    /// TPROXY policy routing `(mark, table)`, added for every family in `docs`.
    pub tproxy: Option<(u32, u32)>,
    /// Add `::6/128` to `lo` (Envoy's IPv6 inbound-passthrough source) when IPv6 is programmed.
    pub ipv6_passthrough: bool,
}

/// What was programmed, for the decision log.
#[derive(Debug, Clone)]
pub struct Report {
    pub ipv6: bool,
    pub tproxy: bool,
    /// Microseconds to read the namespace's addresses and build the rules.
    pub plan_us: u128,
    /// Per family: outcome and microseconds.
    pub families: Vec<(Family, Outcome, u128)>,
}

/// The namespace's addresses as `(interface index, address)` in the kernel's dump order: what a planner
/// decides IPv6 from (upstream decides it inside the pod's namespace, plugin.md §4.3).
pub type Addresses = [(u32, IpAddr)];

/// Enters the namespace at `netns_path` once: reads its addresses, asks `planner` (pure) what to program,
/// and applies that.
pub fn apply<F>(netns_path: &str, io: Io, planner: F) -> Result<Report>
where
    F: FnOnce(&Addresses) -> Result<Plan> + Send + 'static,
{
    netns::run_in(netns_path, move || {
        let t = Instant::now();
        let plan = planner(&crate::netlink::addresses()?)?;
        let plan_us = t.elapsed().as_micros();
        let fams: Vec<Family> = plan.docs.iter().map(|(f, _)| *f).collect();
        // Read before writing: afterwards our own tables would be there too.
        let held = holds_tables(&fams)?;
        let mut families = Vec::new();
        let mut found = Vec::new();
        let mut ours = Vec::new();
        for (family, doc) in &plan.docs {
            let t = Instant::now();
            let (outcome, f, legacy) = apply_family(io, *family, doc)?;
            found.extend(f);
            ours.push((*family, legacy));
            families.push((*family, outcome, t.elapsed().as_micros()));
        }
        let applied = |o: &Outcome| *o == Outcome::Applied;
        if held && families.iter().any(|(_, o, _)| applied(o)) {
            // A family written fresh (its first restore applied) into a namespace that held tables:
            // something before us in the CNI chain, or our other family (a pod that gained IPv6). Read
            // everything CHECK reads, now with ours in place: our rules as written (a dormant table
            // included), then what can take traffic past them.
            let f = findings_here(io, &plan)?;
            bypass::not_as_expected(&f.ours, "")?;
            bypass::refuse(&f.bypass, "")?;
        } else {
            if !families.iter().all(|(_, o, _)| applied(o)) {
                found.extend(elsewhere(&ours)?);
            }
            bypass::refuse(&found, "")?;
        }
        let ipv6 = plan.docs.iter().any(|(f, _)| *f == Family::V6);
        crate::netlink::program_pod_routing(plan.ipv6_passthrough && ipv6, plan.tproxy, ipv6)?;
        Ok(Report {
            ipv6,
            tproxy: plan.tproxy.is_some(),
            plan_us,
            families,
        })
    })
}

/// Whether the current thread's namespace holds any table, legacy x_tables of `families` or nf_tables of
/// any family: two reads (the legacy table names, one nf_tables table dump). A fresh pod's namespace
/// normally holds none, and then a fresh ADD reads nothing more.
fn holds_tables(families: &[Family]) -> Result<bool> {
    for f in families {
        if !crate::xtables::table_names(*f)?.is_empty() {
            return Ok(true);
        }
    }
    crate::nftables::observe::any_table()
}

/// Applies one family's document: the outcome, other programs' rules in our backend's raw and mangle
/// tables that can take traffic past ours (read only on the slow path), and where ours are
/// ([`super::io::Inspection::legacy`]; on the fast path as far as the backend alone says).
fn apply_family(io: Io, family: Family, doc: &str) -> Result<(Outcome, Vec<String>, Option<bool>)> {
    let first = match io.restore(family, doc) {
        Ok(()) => return Ok((Outcome::Applied, Vec::new(), io.ours_legacy())),
        Err(e) => e,
    };
    // Not a fresh namespace? Only then inspect; otherwise the restore error is the answer.
    let read = io.inspect(family)?;
    let actual = save::parse(&read.text);
    let has_ours = actual
        .values()
        .any(|t| t.chains.keys().any(|c| is_our_chain(c)));
    if !has_ours {
        return Err(first).context(format!("apply {} redirection rules", family.name()));
    }
    // A chain name iptables refuses, or text unlike the kernel's tables: the text does not say what the
    // kernel holds, so neither "in place" nor a converge computed from it can be trusted. Named with what
    // our read saw that the text cannot show (often the same rule: a write `-save` prints as a match).
    if !read.refused_names.is_empty() {
        bypass::refuse(
            &[&read.refused_names[..], &read.incompatible[..]].concat(),
            "",
        )?;
    }
    let expected = normalized(family, doc)?;
    let mut found = foreign::findings(io.backend, family, &expected, &actual);
    found.extend(read.incompatible);
    if state::diff(&expected, &actual).is_empty() && read.dormant.is_empty() {
        return Ok((Outcome::AlreadyInPlace, found, read.legacy));
    }
    // The converging document names every table holding our chains: its batch wakes a dormant one.
    let converge = state::converge_document(doc, &expected, &actual);
    log::info!(
        "{}: existing Istio rules differ from the desired ones or a table of ours is dormant; converging",
        family.name()
    );
    io.restore(family, &converge)
        .context(format!("converge {} redirection rules", family.name()))?;
    let after = io.inspect(family)?;
    let d = state::diff(&expected, &save::parse(&after.text));
    if !d.is_empty() || !after.dormant.is_empty() {
        return Err(Error::Rules(format!(
            "{} rules still differ after converging: missing {:?}, unexpected {:?}, dormant {:?}",
            family.name(),
            d.missing,
            [&d.unexpected[..], &d.before[..]].concat(),
            after.dormant
        )));
    }
    Ok((Outcome::Converged, found, after.legacy))
}

/// Where else the kernel looks before our nat redirect (priority -100 at prerouting and output), on the
/// thread inside the pod's namespace, for each family with where its rules of ours are
/// ([`super::io::Inspection::legacy`]: the legacy x_tables, iptables-nft's tables, or not known, when
/// neither is taken for ours): the legacy x_tables tables unless they are ours, and native nf_tables base
/// chains (iptables-nft's own tables are ours, and the dump covers them, when we are nft), and the conntrack
/// expectations, whose connections skip our redirect ([`crate::nftables::expect`]). Never from what the
/// tables hold: the pod can make a chain named as ours in either backend.
pub fn elsewhere(ours: &[(Family, Option<bool>)]) -> Result<Vec<String>> {
    let mut out = Vec::new();
    let legacy_not_ours: Vec<Family> = ours
        .iter()
        .filter(|(_, legacy)| *legacy != Some(true))
        .map(|(f, _)| *f)
        .collect();
    if !legacy_not_ours.is_empty() {
        out.extend(crate::xtables::findings(&legacy_not_ours)?);
    }
    let hooks = OUR_HOOKS.map(|(h, c)| OurHook {
        hooknum: h,
        priority: -100,
        label: format!("our iptables nat {c} (priority -100)"),
    });
    let ours_in_nft = |family: u8, table: &str, chain: &str| {
        ours.iter()
            .any(|(f, legacy)| *legacy == Some(false) && f.nfproto() == family)
            && crate::xtables::TABLES.contains(&table)
            && is_builtin(chain)
    };
    // One socket for both reads: a kernel without one holds neither nf_tables chains nor expectations.
    if let Some(mut s) = crate::nftables::observe::socket_if_any()? {
        out.extend(crate::nftables::observe::foreign_only(
            &mut s,
            &hooks,
            &ours_in_nft,
        )?);
        out.extend(crate::nftables::observe::expectation_findings(&mut s)?);
    }
    Ok(out)
}

/// The desired document as `iptables-save` prints it (pure: [`crate::xtables::spec`] renders exactly what
/// the node's tools print for every form our generator writes; root test `xt_spec`). Owner names resolve
/// through this host's NSS, as the node's tools resolve them.
fn normalized(family: Family, doc: &str) -> Result<save::Dump> {
    use crate::xtables::{names, ops, spec};
    let tables = ops::desired(family, &spec::parse_doc(family, doc, &names::system)?)
        .context(format!("read the desired {} rules", family.name()))?;
    Ok(save::parse(&spec::save_text(family, &tables)))
}

/// CHECK: every desired rule is present in the namespace, nothing of ours is extra, and nothing the kernel
/// runs before our redirect can take traffic past it. The plan comes from `planner` inside the namespace,
/// as for [`apply`].
pub fn check<F>(netns_path: &str, io: Io, planner: F) -> Result<()>
where
    F: FnOnce(&Addresses) -> Result<Plan> + Send + 'static,
{
    inspect(netns_path, io, planner)?.check("")
}

/// What [`check`] reads, split into our rules' problems and what bypasses them.
pub fn inspect<F>(netns_path: &str, io: Io, planner: F) -> Result<bypass::Findings>
where
    F: FnOnce(&Addresses) -> Result<Plan> + Send + 'static,
{
    netns::run_in(netns_path, move || {
        findings_here(io, &planner(&crate::netlink::addresses()?)?)
    })
}

/// [`inspect`] on the thread already inside the namespace, for `plan`.
fn findings_here(io: Io, plan: &Plan) -> Result<bypass::Findings> {
    let mut f = bypass::Findings::default();
    let mut ours = Vec::new();
    for (family, doc) in &plan.docs {
        let expected = normalized(*family, doc)?;
        let read = io.inspect(*family)?;
        ours.push((*family, read.legacy));
        let actual = save::parse(&read.text);
        let d = state::diff(&expected, &actual);
        let fam = family.name();
        f.ours
            .extend(d.missing.iter().map(|m| format!("{fam}: missing {m}")));
        f.ours.extend(
            d.unexpected
                .iter()
                .map(|m| format!("{fam}: unexpected {m}")),
        );
        f.bypass
            .extend(d.before.iter().map(|m| format!("{fam}: unexpected {m}")));
        f.bypass
            .extend(foreign::findings(io.backend, *family, &expected, &actual));
        f.ours
            .extend(read.dormant.iter().map(|t| format!("{fam}: {t}")));
        f.bypass.extend(read.incompatible);
        f.bypass.extend(read.refused_names);
    }
    f.bypass.extend(elsewhere(&ours)?);
    Ok(f)
}
