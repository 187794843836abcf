//! Programs a pod's network namespace, fail-closed and idempotent.
//!
//! Fast path (a fresh pod): one `iptables-restore --noflush` per IP family, nothing else. The document
//! declares our chains with `-N`, so on a namespace that already has them the restore fails atomically; only
//! then do we take the slow path: dump the namespace, compare with the desired rules (normalised through a
//! scratch namespace), and either do nothing (same rules: a re-ADD is a no-op) or converge in one atomic
//! restore (upstream fails here instead).

use super::{exec, save, state, Backend, Family};
use crate::error::{Context, Error, Result};
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

/// What happened per family, for the decision log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Applied,
    AlreadyInPlace,
    Converged,
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
pub fn apply<F>(netns_path: &str, backend: Backend, planner: F) -> Result<Report>
where
    F: FnOnce(&Addresses) -> Result<Plan> + Send + 'static,
{
    netns::run_in(netns_path, move || {
        let t = Instant::now();
        let plan = planner(&crate::netlink::addresses()?)?;
        let plan_us = t.elapsed().as_micros();
        let mut families = Vec::new();
        for (family, doc) in &plan.docs {
            let t = Instant::now();
            let outcome = apply_family(backend, *family, doc)?;
            families.push((*family, outcome, t.elapsed().as_micros()));
        }
        let ipv6 = plan.docs.iter().any(|(f, _)| *f == Family::V6);
        let v6_docs = plan.docs.iter().any(|(f, _)| *f == Family::V6);
        crate::netlink::program_pod_routing(plan.ipv6_passthrough && ipv6, plan.tproxy, v6_docs)?;
        Ok(Report {
            ipv6,
            tproxy: plan.tproxy.is_some(),
            plan_us,
            families,
        })
    })
}

fn apply_family(b: Backend, family: Family, doc: &str) -> Result<Outcome> {
    let first = match exec::restore(b, family, doc) {
        Ok(()) => return Ok(Outcome::Applied),
        Err(e) => e,
    };
    // Not a fresh namespace? Only then inspect; otherwise the restore error is the answer.
    let actual = save::parse(&exec::save(b, family)?);
    let has_ours = actual
        .values()
        .any(|t| t.chains.keys().any(|c| save::is_ours(c)));
    if !has_ours {
        return Err(first).context(format!("apply {} redirection rules", family.name()));
    }
    let expected = normalize(b, family, doc)?;
    if state::diff(&expected, &actual).is_empty() {
        return Ok(Outcome::AlreadyInPlace);
    }
    let converge = state::converge_document(doc, &expected, &actual);
    log::info!(
        "{}: existing Istio rules differ from the desired ones; converging",
        family.name()
    );
    exec::restore(b, family, &converge)
        .context(format!("converge {} redirection rules", family.name()))?;
    let after = save::parse(&exec::save(b, family)?);
    let d = state::diff(&expected, &after);
    if !d.is_empty() {
        return Err(Error::Rules(format!(
            "{} rules still differ after converging: missing {:?}, unexpected {:?}",
            family.name(),
            d.missing,
            d.unexpected
        )));
    }
    Ok(Outcome::Converged)
}

/// The desired document as `iptables-save` prints it, by restoring it into a scratch namespace.
fn normalize(b: Backend, family: Family, doc: &str) -> Result<save::Dump> {
    let doc = doc.to_string();
    let text = netns::run_in_scratch(move || {
        exec::restore(b, family, &doc)?;
        exec::save(b, family)
    })
    .context(format!("normalise the desired {} rules", family.name()))?;
    Ok(save::parse(&text))
}

/// CHECK: every desired rule is present in the namespace and nothing of ours is extra. The plan comes from
/// `planner` inside the namespace, as for [`apply`].
pub fn check<F>(netns_path: &str, backend: Backend, planner: F) -> Result<()>
where
    F: FnOnce(&Addresses) -> Result<Plan> + Send + 'static,
{
    let problems = netns::run_in(netns_path, move || {
        let plan = planner(&crate::netlink::addresses()?)?;
        let mut problems = Vec::new();
        for (family, doc) in &plan.docs {
            let expected = normalize(backend, *family, doc)?;
            let actual = save::parse(&exec::save(backend, *family)?);
            let d = state::diff(&expected, &actual);
            problems.extend(
                d.missing
                    .iter()
                    .map(|m| format!("{}: missing {m}", family.name())),
            );
            problems.extend(
                d.unexpected
                    .iter()
                    .map(|m| format!("{}: unexpected {m}", family.name())),
            );
        }
        Ok(problems)
    })?;
    if problems.is_empty() {
        Ok(())
    } else {
        Err(Error::Rules(format!(
            "redirection rules are not as expected: {}",
            problems.join("; ")
        )))
    }
}
