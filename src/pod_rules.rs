//! The sidecar path shared by the plugin's ADD and CHECK and the repair agent's repair in place: decide
//! from the pod object, then plan and program inside the pod's namespace, through the one pure plan
//! ([`crate::redirect::plan`]) and the rule backend the configuration selects ([`crate::backend`]). It sits
//! below both roles, so neither imports the other, and both apply exactly the same rules, decided the same
//! way. The `*_with` forms take the backend chooser, which the unit tests replace with a recording fake.

use crate::backend::{self, RuleBackend};
use crate::cni::NetConf;
use crate::error::Result;
use crate::json::Object;
use crate::netfilter::bypass::Findings;
use crate::redirect::plan::{decide_pod, decide_pod_in, NodeEnv, PodPlan};
use crate::redirect::{PodInfo, Redirect};
use std::time::Instant;

/// Chooses the rule backend; called only once the pod needs redirection.
pub type Chooser<'a> = &'a dyn Fn() -> Result<Box<dyn RuleBackend>>;

/// What programming a pod did: whether rules were applied, and the log line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Programmed {
    pub redirected: bool,
    pub message: String,
}

impl std::fmt::Display for Programmed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// Applies what `pod` needs inside `netns_path`, with the node environment `env`. Used by ADD and by
/// repair in place.
pub fn program_pod(
    pod: &Object,
    netns_path: &str,
    conf: &NetConf,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Programmed> {
    program_pod_with(pod, netns_path, &|| backend::for_conf(conf), env)
}

/// [`program_pod`] with the backend from `choose`.
pub fn program_pod_with(
    pod: &Object,
    netns_path: &str,
    choose: Chooser,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Programmed> {
    let t = Instant::now();
    let plan = decide_pod(&PodInfo::from_pod(pod)?)?;
    program_plan(plan, netns_path, choose, env, t.elapsed().as_micros())
}

/// A pod's plan decided once and kept with it instead of the pod object (the agents keep one per pod):
/// what to program or verify, or why it could not be decided (a bad annotation).
pub type Decided = std::result::Result<PodPlan, String>;

/// The plan for `pod`: the plugin's whole decision with `conf` ([`decide_pod_in`], as the audit admits a
/// pod), or the pod's own ([`decide_pod`], as ADD programs it once past its shortcuts).
pub fn decide(pod: &Object, conf: Option<&NetConf>) -> Decided {
    let info = PodInfo::from_pod(pod).map_err(|e| e.to_string())?;
    match conf {
        Some(conf) => decide_pod_in(conf, &info),
        None => decide_pod(&info),
    }
    .map_err(|e| e.to_string())
}

/// Applies `plan` inside `netns_path` (`decide_us`: the decision's time, for the log line).
pub fn program_plan(
    plan: PodPlan,
    netns_path: &str,
    choose: Chooser,
    env: &dyn Fn(&str) -> Option<String>,
    decide_us: u128,
) -> Result<Programmed> {
    let redirect = match plan {
        PodPlan::Skip(reason) => {
            return Ok(Programmed {
                redirected: false,
                message: format!("no redirection: {reason}"),
            })
        }
        PodPlan::Redirect(r) => r,
    };
    let message = choose()?.apply(netns_path, redirect, NodeEnv::take(env), decide_us)?;
    Ok(Programmed {
        redirected: true,
        message,
    })
}

/// CHECK: the rules the pod needs are all in its namespace, and nothing bypasses them.
pub fn check_pod(
    pod: &Object,
    netns_path: &str,
    conf: &NetConf,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<()> {
    check_pod_with(pod, netns_path, &|| backend::for_conf(conf), env)
}

/// [`check_pod`] with the backend from `choose`.
pub fn check_pod_with(
    pod: &Object,
    netns_path: &str,
    choose: Chooser,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<()> {
    check_plan(
        decide_pod(&PodInfo::from_pod(pod)?)?,
        netns_path,
        choose,
        env,
    )
}

/// CHECK of a decided `plan`.
pub fn check_plan(
    plan: PodPlan,
    netns_path: &str,
    choose: Chooser,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<()> {
    match plan {
        PodPlan::Skip(_) => Ok(()),
        PodPlan::Redirect(redirect) => choose()?.verify(netns_path, redirect, NodeEnv::take(env)),
    }
}

/// The audit's CHECK: what [`check_pod`] reads for the pod's `redirect`, split ([`Findings`]).
pub fn inspect(
    redirect: &Redirect,
    netns_path: &str,
    conf: &NetConf,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Findings> {
    backend::for_agent(conf)?.inspect(netns_path, redirect.clone(), NodeEnv::take(env))
}

#[cfg(test)]
#[path = "pod_rules_tests.rs"]
mod tests;
