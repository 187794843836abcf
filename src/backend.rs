//! The seam below the plugin's ADD/CHECK and the repair agent: one rule backend per mode, both fed by the
//! same pure plan ([`crate::redirect::plan`]: decision → redirect → [`CaptureConfig`] from the addresses read
//! inside the pod's namespace). iptables applies the rendered `iptables-restore` documents (with its host
//! backend probe record); nftables applies one netlink batch built from the same configuration (no host
//! binary, no record).

use crate::cni::NetConf;
use crate::error::{Context, Result};
use crate::iptables::apply::{self as ipt, Addresses, Plan};
use crate::netfilter::bypass::Findings;
use crate::netfilter::Family;
use crate::redirect::plan::{self, NodeEnv};
use crate::redirect::{CaptureConfig, Documents, Redirect};
use std::net::IpAddr;
use std::path::Path;
use std::sync::{Arc, OnceLock};

/// Programs and verifies a pod's namespace. Both methods enter the namespace once, read its addresses
/// there (the IPv6 decision, plugin.md §4.3) and plan from `redirect` and `env`.
pub trait RuleBackend {
    /// `iptables (iptables-nft)`, … or `nftables`, for logs.
    fn name(&self) -> String;
    /// Applies the plan in the namespace at `netns_path`; returns the decision-log text. `decide_us` is
    /// the time already spent deciding, for that text.
    fn apply(
        &self,
        netns_path: &str,
        redirect: Redirect,
        env: NodeEnv,
        decide_us: u128,
    ) -> Result<String>;
    /// CHECK: the namespace holds exactly our rules and nothing is hooked before them.
    fn verify(&self, netns_path: &str, redirect: Redirect, env: NodeEnv) -> Result<()>;
    /// What [`RuleBackend::verify`] reads, split: our rules' problems, and what bypasses them (the audit).
    fn inspect(&self, netns_path: &str, redirect: Redirect, env: NodeEnv) -> Result<Findings>;
}

/// iptables mode: the backend the installer probed (from the run dir), written directly or, when asked,
/// through the node's binaries ([`crate::iptables::Io`]).
pub struct Iptables(pub crate::iptables::Io);

/// nf_tables over `NETLINK_NETFILTER` (`native_nftables: true`).
pub struct Nftables;

/// The backend the configuration selects, for the plugin: in iptables mode the node's binaries are run
/// when the installer recorded IPTABLES_NODE_BINARIES.
pub fn for_conf(conf: &NetConf) -> Result<Box<dyn RuleBackend>> {
    if conf.native_nftables {
        return Ok(Box::new(Nftables));
    }
    let run_dir = Path::new(&conf.cni_agent_run_dir);
    let backend = crate::iptables::backend::for_plugin(run_dir)?;
    let node_binaries = crate::iptables::backend::node_binaries(run_dir);
    Ok(Box::new(Iptables(crate::iptables::Io {
        backend,
        node_binaries,
    })))
}

/// [`for_conf`] for the node's agents (repair in place, the audit): always the kernel's interfaces, so
/// they never need the node's root or its binaries.
pub fn for_agent(conf: &NetConf) -> Result<Box<dyn RuleBackend>> {
    if conf.native_nftables {
        return Ok(Box::new(Nftables));
    }
    let b = crate::iptables::backend::for_agent(Path::new(&conf.cni_agent_run_dir))?;
    Ok(Box::new(Iptables(crate::iptables::Io::kernel(b))))
}

/// The capture configuration for the namespace whose addresses are `addrs`.
fn capture(redirect: &Redirect, env: &NodeEnv, addrs: &Addresses) -> Result<CaptureConfig> {
    plan::capture(redirect, plan::Addresses::Netns(addrs), env)
}

/// The documents in the shape the iptables backend applies.
fn to_apply(docs: Documents) -> Plan {
    let ipv6 = docs.v6.is_some();
    let mut list = vec![(Family::V4, docs.v4)];
    if let Some(d) = docs.v6 {
        list.push((Family::V6, d));
    }
    Plan {
        docs: list,
        tproxy: docs.tproxy_route.as_ref().map(|r| (r.mark, r.table)),
        ipv6_passthrough: ipv6,
    }
}

/// The iptables planner run inside the pod's namespace.
fn ipt_planner(
    redirect: Redirect,
    env: NodeEnv,
) -> impl FnOnce(&Addresses) -> Result<Plan> + Send + 'static {
    move |addrs| {
        Ok(to_apply(crate::redirect::render(&capture(
            &redirect, &env, addrs,
        )?)?))
    }
}

/// Where an iptables-mode ADD's planner, run inside the pod's namespace, leaves the pod's global IPv6
/// address that gets no rules ([`plan::Addresses::ipv6_left_out`]), for the decision line.
type LeftOut = Arc<OnceLock<IpAddr>>;

/// Notes in `left` what `redirect` leaves out of the namespace whose addresses are `addrs`.
fn note_left_out(left: &LeftOut, redirect: &Redirect, addrs: &Addresses) {
    if let Some(a) = plan::Addresses::Netns(addrs).ipv6_left_out(redirect.dual_stack) {
        let _ = left.set(a);
    }
}

fn mode(tproxy: bool, ipv6: bool, left_out: Option<&IpAddr>) -> String {
    let family = match (ipv6, left_out) {
        (true, _) => "IPv4+IPv6".to_string(),
        (false, None) => "IPv4".to_string(),
        (false, Some(a)) => format!(
            "IPv4 only: IPv6 address {a} gets no rules and its IPv6 traffic bypasses the proxy, as \
             upstream's; set ISTIO_DUAL_STACK=true on the proxy to capture it"
        ),
    };
    format!(
        "{} mode, {family}",
        if tproxy { "TPROXY" } else { "REDIRECT" }
    )
}

impl RuleBackend for Iptables {
    fn name(&self) -> String {
        format!("iptables ({})", self.0.name())
    }

    fn apply(&self, netns: &str, r: Redirect, env: NodeEnv, decide_us: u128) -> Result<String> {
        let (left, noted) = (LeftOut::default(), r.clone());
        let planner = ipt_planner(r, env);
        let note = left.clone();
        let report = ipt::apply(netns, self.0, move |addrs| {
            note_left_out(&note, &noted, addrs);
            planner(addrs)
        })
        .context("program the pod's network namespace")?;
        let steps: Vec<String> = report
            .families
            .iter()
            .map(|(f, o, us)| format!("{} {:?} in {:.1} ms", f.name(), o, *us as f64 / 1000.0))
            .collect();
        Ok(format!(
            "redirected ({}, iptables backend {}): rules built in {:.2} ms, {}",
            mode(report.tproxy, report.ipv6, left.get()),
            self.0.backend.name(),
            (decide_us + report.plan_us) as f64 / 1000.0,
            steps.join(", ")
        ))
    }

    fn verify(&self, netns_path: &str, redirect: Redirect, env: NodeEnv) -> Result<()> {
        ipt::check(netns_path, self.0, ipt_planner(redirect, env))
    }

    fn inspect(&self, netns_path: &str, redirect: Redirect, env: NodeEnv) -> Result<Findings> {
        ipt::inspect(netns_path, self.0, ipt_planner(redirect, env))
    }
}

impl RuleBackend for Nftables {
    fn name(&self) -> String {
        "nftables".into()
    }

    fn apply(&self, netns: &str, r: Redirect, env: NodeEnv, decide_us: u128) -> Result<String> {
        // No note of an IPv6 address left out: nftables mode's family-agnostic rules (inet tables) take
        // IPv6 too (nftables.md §1.5).
        let r =
            crate::nftables::apply::apply_planned(netns, move |addrs| capture(&r, &env, addrs))?;
        Ok(format!(
            "redirected ({}, nftables): rules built in {:.2} ms, {:?} in {:.1} ms",
            mode(r.tproxy, r.ipv6, None),
            (decide_us + r.plan_us) as f64 / 1000.0,
            r.outcome,
            r.apply_us as f64 / 1000.0
        ))
    }

    fn verify(&self, netns_path: &str, redirect: Redirect, env: NodeEnv) -> Result<()> {
        self.inspect(netns_path, redirect, env)?
            .check(" (nftables)")
    }

    fn inspect(&self, netns_path: &str, redirect: Redirect, env: NodeEnv) -> Result<Findings> {
        crate::nftables::apply::inspect_planned(netns_path, move |addrs| {
            capture(&redirect, &env, addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn native_nftables_selects_the_netlink_backend_without_probing_iptables() {
        // The run dir does not exist: the iptables backend would have to probe, nftables never looks.
        let conf = crate::cni::conf::parse(
            r#"{"cniVersion":"1.0.0","name":"n","type":"istio-cni","native_nftables":true,
                "cni_agent_run_dir":"/nonexistent/istio-cni-run"}"#,
        )
        .unwrap();
        assert_eq!(for_conf(&conf).unwrap().name(), "nftables");
    }
}
