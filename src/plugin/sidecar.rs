//! The sidecar path of ADD and CHECK: decide from the pod object, then plan and program inside the pod's
//! namespace. [`decide_pod`] and [`plan`] are pure; [`program_pod`] is shared with the repair agent so both
//! apply exactly the same rules, decided the same way.

use crate::cni::NetConf;
use crate::error::{Context, Error, Result};
use crate::iptables::apply::{self, Addresses, Plan};
use crate::iptables::{backend, Family};
use crate::json::Object;
use crate::redirect::{
    decide, enable_ipv6, kernel_address_order, render, CaptureConfig, Decision, PodInfo, Redirect,
};
use std::path::Path;
use std::time::Instant;

/// What a pod needs, from the pod object alone.
#[derive(Debug)]
pub enum PodPlan {
    /// No redirection, and why.
    Skip(String),
    /// Redirect with this configuration; the rules depend on the namespace's addresses ([`plan`]).
    Redirect(Redirect),
}

/// Pure: the pod object → skip or the redirect configuration (invalid annotations fail here).
pub fn decide_pod(pod: &Object) -> Result<PodPlan> {
    let info = PodInfo::from_pod(pod)?;
    if let Decision::Skip(reason) = decide(&info) {
        return Ok(PodPlan::Skip(reason));
    }
    Ok(PodPlan::Redirect(Redirect::from_pod(&info)?))
}

/// Pure: the redirect configuration, the pod namespace's addresses (kernel dump order) and the plugin's
/// environment → what to program. IPv6 is decided as upstream's `getLocalIP` does (plugin.md §4.3).
pub fn plan(
    redirect: &Redirect,
    addrs: &Addresses,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Plan> {
    let v6 = enable_ipv6(&kernel_address_order(addrs), redirect.dual_stack)
        .context("decide IPv6 from the pod's network namespace addresses")?;
    let cfg = CaptureConfig::from_redirect(redirect, env, v6)?;
    let docs = render(&cfg)?;
    let mut list = vec![(Family::V4, docs.v4)];
    if let Some(d) = docs.v6 {
        list.push((Family::V6, d));
    }
    Ok(Plan {
        docs: list,
        tproxy: docs.tproxy_route.as_ref().map(|r| (r.mark, r.table)),
        ipv6_passthrough: v6,
    })
}

/// The planner run inside the pod's namespace, with the plugin process's environment.
fn planner(redirect: Redirect) -> impl FnOnce(&Addresses) -> Result<Plan> + Send + 'static {
    move |addrs| plan(&redirect, addrs, &|k| std::env::var(k).ok())
}

fn refuse_nftables(conf: &NetConf) -> Result<()> {
    if conf.native_nftables {
        return Err(Error::UnsupportedField {
            field: "native_nftables".into(),
            value: "true (this build programs iptables only; set native_nftables to false)".into(),
        });
    }
    Ok(())
}

/// Applies what `pod` needs inside `netns_path`; returns the log line. Used by ADD and by repair in place.
pub fn program_pod(pod: &Object, netns_path: &str, conf: &NetConf) -> Result<String> {
    let t = Instant::now();
    let redirect = match decide_pod(pod)? {
        PodPlan::Skip(reason) => return Ok(format!("no redirection: {reason}")),
        PodPlan::Redirect(r) => r,
    };
    refuse_nftables(conf)?;
    let decide_us = t.elapsed().as_micros();
    let b = backend::for_plugin(Path::new(&conf.cni_agent_run_dir))?;
    let report = apply::apply(netns_path, b, planner(redirect))
        .context("program the pod's network namespace")?;
    let steps: Vec<String> = report
        .families
        .iter()
        .map(|(f, o, us)| format!("{} {:?} in {:.1} ms", f.name(), o, *us as f64 / 1000.0))
        .collect();
    Ok(format!(
        "redirected ({} mode, {}, iptables backend {}): rules built in {:.2} ms, {}",
        if report.tproxy { "TPROXY" } else { "REDIRECT" },
        if report.ipv6 { "IPv4+IPv6" } else { "IPv4" },
        b.name(),
        (decide_us + report.plan_us) as f64 / 1000.0,
        steps.join(", ")
    ))
}

/// CHECK: the rules the pod needs are all in its namespace, and nothing bypasses them.
pub fn check_pod(pod: &Object, netns_path: &str, conf: &NetConf) -> Result<()> {
    match decide_pod(pod)? {
        PodPlan::Skip(_) => Ok(()),
        PodPlan::Redirect(redirect) => {
            refuse_nftables(conf)?;
            let b = backend::for_plugin(Path::new(&conf.cni_agent_run_dir))?;
            apply::check(netns_path, b, planner(redirect))
        }
    }
}
