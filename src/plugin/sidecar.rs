//! The sidecar path of ADD and CHECK: fetch the pod, decide, build the rules, program the pod's namespace.
//! [`plan`] is pure; [`program_pod`] is shared with the repair agent so both apply exactly the same rules.

use crate::backend::{self, PodRules};
use crate::cni::NetConf;
use crate::error::{Error, Result};
use crate::iptables::apply::Plan;
use crate::iptables::Family;
use crate::json::Object;
use crate::redirect::{decide, enable_ipv6, render, CaptureConfig, Decision, PodInfo, Redirect};
use std::net::IpAddr;
use std::time::Instant;

/// What a pod needs.
#[derive(Debug)]
pub enum PodPlan {
    /// No redirection, and why.
    Skip(String),
    /// Program these rules (through the backend the configuration selects).
    Program(Box<PodRules>),
}

/// Pure: the pod object, the pod's own addresses and the plugin's environment → what to program.
pub fn plan(
    pod: &Object,
    addrs: &[IpAddr],
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<PodPlan> {
    let info = PodInfo::from_pod(pod)?;
    if let Decision::Skip(reason) = decide(&info) {
        return Ok(PodPlan::Skip(reason));
    }
    let redirect = Redirect::from_pod(&info)?;
    let v6 = enable_ipv6(addrs, redirect.dual_stack)?;
    let cfg = CaptureConfig::from_redirect(&redirect, env, v6)?;
    let docs = render(&cfg)?;
    let mut list = vec![(Family::V4, docs.v4)];
    if let Some(d) = docs.v6 {
        list.push((Family::V6, d));
    }
    let tproxy = docs.tproxy_route.as_ref().map(|r| (r.mark, r.table));
    let summary = format!(
        "{} mode, {}",
        if tproxy.is_some() {
            "TPROXY"
        } else {
            "REDIRECT"
        },
        if v6 { "IPv4+IPv6" } else { "IPv4" }
    );
    Ok(PodPlan::Program(Box::new(PodRules {
        plan: Plan {
            docs: list,
            tproxy,
            ipv6_passthrough: v6,
        },
        summary,
        capture: cfg,
    })))
}

/// The addresses of the pod: from the previous plugin's result, else read inside the namespace.
pub fn pod_addresses(prev_ips: &[IpAddr], netns_path: &str) -> Result<Vec<IpAddr>> {
    if !prev_ips.is_empty() {
        return Ok(prev_ips.to_vec());
    }
    crate::netns::run_in(netns_path, || {
        let addrs = nix::ifaddrs::getifaddrs()
            .map_err(|e| Error::io("list the pod's addresses", std::io::Error::from(e)))?;
        Ok(addrs
            .filter_map(|a| a.address)
            .filter_map(|s| {
                if let Some(v4) = s.as_sockaddr_in() {
                    Some(IpAddr::V4(v4.ip()))
                } else {
                    s.as_sockaddr_in6().map(|v6| IpAddr::V6(v6.ip()))
                }
            })
            .collect())
    })
}

/// Applies what `pod` needs inside `netns_path`; returns the log line. Used by ADD and by repair in place.
pub fn program_pod(
    pod: &Object,
    netns_path: &str,
    addrs: &[IpAddr],
    conf: &NetConf,
) -> Result<String> {
    let t = Instant::now();
    let env = |k: &str| std::env::var(k).ok();
    match plan(pod, addrs, &env)? {
        PodPlan::Skip(reason) => Ok(format!("no redirection: {reason}")),
        PodPlan::Program(rules) => {
            let built_us = t.elapsed().as_micros();
            backend::for_conf(conf)?.apply(netns_path, *rules, built_us)
        }
    }
}

/// CHECK: the rules the pod needs are all in its namespace.
pub fn check_pod(pod: &Object, netns_path: &str, addrs: &[IpAddr], conf: &NetConf) -> Result<()> {
    let env = |k: &str| std::env::var(k).ok();
    match plan(pod, addrs, &env)? {
        PodPlan::Skip(_) => Ok(()),
        PodPlan::Program(rules) => backend::for_conf(conf)?.verify(netns_path, *rules),
    }
}
