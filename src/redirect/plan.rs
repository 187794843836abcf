//! The one pure plan for a sidecar pod, used by ADD, CHECK, repair in place, `explain` and the conformance
//! tests: shortcut ([`shortcut`], no pod object needed) → decision and redirect configuration
//! ([`decide_pod`]) → IPv6 from the pod's addresses, the node environment and the capture configuration
//! ([`capture`]) → the `iptables-restore` documents ([`plan`]). ADD runs the first two steps before it
//! enters the pod's namespace and the last inside it, where the addresses are read; `explain` and the
//! conformance tests run the same steps with the addresses a pod object names ([`plan_pod`]).

use super::capture::{enable_ipv6, ipv6_left_out, kernel_address_order, CaptureConfig, ENV_VARS};
use super::decide::{decide, Decision};
use super::rules::{render, Documents};
use super::{PodInfo, Redirect};
use crate::cni::{K8sArgs, NetConf};
use crate::error::{Context, Error, Result};
use std::net::IpAddr;

/// Prefix of our own DaemonSet's pods (upstream `isCNIPod`).
const AGENT_POD_PREFIX: &str = "istio-cni-node-";

/// Why a pod needs no work before any API call.
#[derive(Debug, PartialEq, Eq)]
pub enum Shortcut {
    OwnAgent,
    NotKubernetes,
    ExcludedNamespace,
}

impl Shortcut {
    pub fn reason(&self) -> &'static str {
        match self {
            Shortcut::OwnAgent => "the istio-cni agent's own pod",
            Shortcut::NotKubernetes => "not a Kubernetes pod (no K8S_POD_NAME/K8S_POD_NAMESPACE)",
            Shortcut::ExcludedNamespace => "namespace is in exclude_namespaces",
        }
    }
}

/// The decisions that need no API call, in our order: own agent pod, not a Kubernetes pod, excluded
/// namespace. (Upstream master builds the kube client before the namespace check, so a missing kubeconfig
/// fails even excluded pods; we check exclusions first so they never depend on the kubeconfig.)
pub fn shortcut(conf: &NetConf, args: &K8sArgs) -> Option<Shortcut> {
    if args.pod_name.starts_with(AGENT_POD_PREFIX) && args.pod_namespace == conf.pod_namespace {
        return Some(Shortcut::OwnAgent);
    }
    if !args.is_pod() {
        return Some(Shortcut::NotKubernetes);
    }
    if conf.exclude_namespaces.contains(&args.pod_namespace) {
        return Some(Shortcut::ExcludedNamespace);
    }
    None
}

/// Past the shortcuts, a configuration with `ambient_enabled: true` (upstream's ambient mode, not
/// implemented here) refuses the pod: upstream hands a pod its enablement selectors pick to the ambient node
/// agent (and fails ADD when the agent cannot be reached), so deciding it as a sidecar pod would skip it as
/// "no istio-proxy" and start it uncaptured.
pub fn refuse_ambient(conf: &NetConf, args: &K8sArgs) -> Result<()> {
    if !conf.ambient_enabled {
        return Ok(());
    }
    Err(Error::UnsupportedField {
        field: "ambient_enabled".into(),
        value: "true".into(),
    })
    .with_context(|| {
        format!(
            "pod {}/{} may need ambient capture, which this plugin does not implement; refusing to start \
             it uncaptured (set ambient_enabled to false in the istio-cni entry)",
            args.pod_namespace, args.pod_name
        )
    })
}

/// What a pod needs, from the pod object alone.
#[derive(Debug, Clone, PartialEq)]
pub enum PodPlan {
    /// No redirection, and why.
    Skip(String),
    /// Redirect with this configuration; the rules depend on the pod's addresses ([`plan`]).
    Redirect(Redirect),
}

/// The pod's facts → skip or the redirect configuration (invalid annotations fail here).
pub fn decide_pod(info: &PodInfo) -> Result<PodPlan> {
    if let Decision::Skip(reason) = decide(info) {
        return Ok(PodPlan::Skip(reason));
    }
    Ok(PodPlan::Redirect(Redirect::from_pod(info)?))
}

/// The plugin's whole decision on a pod object, as ADD takes it: the shortcuts first (the agent's own pod,
/// not a pod, a namespace in `exclude_namespaces`), then the pod's own decision ([`decide_pod`]). What the
/// audit admits a pod by and verifies it against: a pod ADD leaves alone is never audited as a sidecar pod.
pub fn decide_pod_in(conf: &NetConf, info: &PodInfo) -> Result<PodPlan> {
    let args = K8sArgs {
        pod_name: info.name.clone(),
        pod_namespace: info.namespace.clone(),
        ..K8sArgs::default()
    };
    if let Some(s) = shortcut(conf, &args) {
        return Ok(PodPlan::Skip(s.reason().to_string()));
    }
    decide_pod(info)
}

/// Where the addresses IPv6 is decided from come from.
#[derive(Debug, Clone, Copy)]
pub enum Addresses<'a> {
    /// Read inside the pod's namespace: `(interface index, address)` in the kernel's dump order (ADD,
    /// CHECK, repair).
    Netns(&'a [(u32, IpAddr)]),
    /// A pod object's `status.podIPs`, which all sit on the pod's one interface (`explain`, conformance).
    PodIps(&'a [IpAddr]),
    /// None known: IPv4 only (`explain` of a pod without `status.podIPs`).
    Ipv4Only,
}

impl Addresses<'_> {
    /// Whether the pod gets the IPv6 document, as upstream's `getLocalIP` decides it (plugin.md §4.3): the
    /// addresses in the order Go's `net.InterfaceAddrs` lists them.
    pub fn enable_ipv6(&self, dual_stack: bool) -> Result<bool> {
        match self {
            Addresses::Netns(a) => enable_ipv6(&kernel_address_order(a), dual_stack)
                .context("decide IPv6 from the pod's network namespace addresses"),
            Addresses::PodIps(ips) => {
                let on_one_interface: Vec<(u32, IpAddr)> = ips.iter().map(|a| (0, *a)).collect();
                enable_ipv6(&kernel_address_order(&on_one_interface), dual_stack)
                    .context("pod status.podIPs")
            }
            Addresses::Ipv4Only => Ok(false),
        }
    }

    /// A global IPv6 address of the namespace that gets no rules ([`ipv6_left_out`]): its IPv6 traffic
    /// bypasses the proxy. Only the namespace's own addresses are judged.
    pub fn ipv6_left_out(&self, dual_stack: bool) -> Option<IpAddr> {
        match self {
            Addresses::Netns(a) => ipv6_left_out(&kernel_address_order(a), dual_stack),
            Addresses::PodIps(_) | Addresses::Ipv4Only => None,
        }
    }
}

/// The node environment as far as the plan reads it, taken once so that it can travel into the thread
/// that runs inside the pod's namespace.
#[derive(Debug, Clone, Default)]
pub struct NodeEnv(Vec<(&'static str, String)>);

impl NodeEnv {
    /// The variables the plan reads ([`ENV_VARS`]), from `env`.
    pub fn take(env: &dyn Fn(&str) -> Option<String>) -> NodeEnv {
        NodeEnv(
            ENV_VARS
                .iter()
                .filter_map(|k| env(k).map(|v| (*k, v)))
                .collect(),
        )
    }
    pub fn get(&self, key: &str) -> Option<String> {
        self.0
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v.clone())
    }
}

/// The redirect configuration, the pod's addresses and the node environment → the capture configuration.
pub fn capture(redirect: &Redirect, addrs: Addresses, env: &NodeEnv) -> Result<CaptureConfig> {
    let v6 = addrs.enable_ipv6(redirect.dual_stack)?;
    CaptureConfig::from_redirect(redirect, &|k| env.get(k), v6)
}

/// The redirect configuration, the pod's addresses and the node environment → the documents to restore.
pub fn plan(redirect: &Redirect, addrs: Addresses, env: &NodeEnv) -> Result<Documents> {
    render(&capture(redirect, addrs, env)?)
}

/// What [`plan_pod`] found.
#[derive(Debug)]
pub enum Planned {
    /// No redirection, and why.
    Skip(String),
    Rules(Documents),
}

/// The chain after the pod lookup, composed in ADD's order ([`decide_pod`], then [`plan`]).
pub fn plan_pod(info: &PodInfo, addrs: Addresses, env: &NodeEnv) -> Result<Planned> {
    match decide_pod(info)? {
        PodPlan::Skip(why) => Ok(Planned::Skip(why)),
        PodPlan::Redirect(r) => Ok(Planned::Rules(plan(&r, addrs, env)?)),
    }
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
