//! The sidecar path of ADD and CHECK: decide from the pod object, then plan and program inside the pod's
//! namespace, through the one pure plan ([`crate::redirect::plan`]). [`program_pod`] is shared with the repair
//! agent so both apply exactly the same rules, decided the same way.

use crate::cni::NetConf;
use crate::error::{Context, Error, Result};
use crate::iptables::apply::{self, Addresses, Plan};
use crate::iptables::{backend, Family};
use crate::json::Object;
use crate::redirect::plan::{self, decide_pod, NodeEnv, PodPlan};
use crate::redirect::{Documents, PodInfo, Redirect};
use std::path::Path;
use std::time::Instant;

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

/// The planner run inside the pod's namespace: [`plan::plan`] on the addresses read there.
fn planner(
    redirect: Redirect,
    env: NodeEnv,
) -> impl FnOnce(&Addresses) -> Result<Plan> + Send + 'static {
    move |addrs| {
        Ok(to_apply(plan::plan(
            &redirect,
            plan::Addresses::Netns(addrs),
            &env,
        )?))
    }
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

/// Applies what `pod` needs inside `netns_path`, with the node environment `env`; returns the log line.
/// Used by ADD and by repair in place.
pub fn program_pod(
    pod: &Object,
    netns_path: &str,
    conf: &NetConf,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<String> {
    let t = Instant::now();
    let redirect = match decide_pod(&PodInfo::from_pod(pod)?)? {
        PodPlan::Skip(reason) => return Ok(format!("no redirection: {reason}")),
        PodPlan::Redirect(r) => r,
    };
    refuse_nftables(conf)?;
    let decide_us = t.elapsed().as_micros();
    let b = backend::for_plugin(Path::new(&conf.cni_agent_run_dir))?;
    let report = apply::apply(netns_path, b, planner(redirect, NodeEnv::take(env)))
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
pub fn check_pod(
    pod: &Object,
    netns_path: &str,
    conf: &NetConf,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<()> {
    match decide_pod(&PodInfo::from_pod(pod)?)? {
        PodPlan::Skip(_) => Ok(()),
        PodPlan::Redirect(redirect) => {
            refuse_nftables(conf)?;
            let b = backend::for_plugin(Path::new(&conf.cni_agent_run_dir))?;
            apply::check(netns_path, b, planner(redirect, NodeEnv::take(env)))
        }
    }
}
