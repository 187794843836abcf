//! The sidecar path of ADD and CHECK: decide from the pod object, then plan and program inside the pod's
//! namespace, through the one pure plan ([`crate::redirect::plan`]) and the rule backend the configuration
//! selects ([`crate::backend`]). [`program_pod`] is shared with the repair agent so both apply exactly the
//! same rules, decided the same way.

use crate::backend;
use crate::cni::NetConf;
use crate::error::Result;
use crate::json::Object;
use crate::redirect::plan::{decide_pod, NodeEnv, PodPlan};
use crate::redirect::PodInfo;
use std::time::Instant;

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
    let decide_us = t.elapsed().as_micros();
    backend::for_conf(conf)?.apply(netns_path, redirect, NodeEnv::take(env), decide_us)
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
            backend::for_conf(conf)?.verify(netns_path, redirect, NodeEnv::take(env))
        }
    }
}
