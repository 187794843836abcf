//! ADD and CHECK: decide whether the pod gets redirection and, if so, program it in the pod's netns.

use crate::cni::{result, CmdEnv, K8sArgs, NetConf};
use crate::error::{Context, Error, Result};

/// Prefix of our own DaemonSet's pods (upstream `isCNIPod`).
const AGENT_POD_PREFIX: &str = "istio-cni-node-";

/// Why a pod needs no work before any API call.
#[derive(Debug, PartialEq, Eq)]
pub enum Shortcut {
    OwnAgent,
    NotKubernetes,
    ExcludedNamespace,
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
    if conf
        .exclude_namespaces
        .iter()
        .any(|n| *n == args.pod_namespace)
    {
        return Some(Shortcut::ExcludedNamespace);
    }
    None
}

pub fn add(conf: &NetConf, env: &CmdEnv) -> Result<String> {
    let args = K8sArgs::parse(&env.args).context("failed to load args")?;
    // Parse prevResult first: a result we cannot pass on fails ADD before anything is programmed.
    let output = result::passthrough(conf.prev_result.as_ref(), &conf.cni_version)?;
    if let Some(s) = shortcut(conf, &args) {
        log::info!(
            "ADD {}/{} ({}): no redirection: {}",
            args.pod_namespace,
            args.pod_name,
            env.container_id,
            match s {
                Shortcut::OwnAgent => "the istio-cni agent's own pod",
                Shortcut::NotKubernetes =>
                    "not a Kubernetes pod (no K8S_POD_NAME/K8S_POD_NAMESPACE)",
                Shortcut::ExcludedNamespace => "namespace is in exclude_namespaces",
            }
        );
        return Ok(output);
    }
    // Fail closed: a pod that may need a sidecar must never start unredirected.
    Err(Error::other(format!(
        "pod {}/{}: sidecar redirection is not available in this build; refusing to start the pod unredirected",
        args.pod_namespace, args.pod_name
    )))
}

pub fn check(conf: &NetConf, env: &CmdEnv) -> Result<()> {
    let args = K8sArgs::parse(&env.args).context("failed to load args")?;
    result::passthrough(conf.prev_result.as_ref(), &conf.cni_version)?;
    if shortcut(conf, &args).is_some() {
        return Ok(());
    }
    Err(Error::other(format!(
        "pod {}/{}: CHECK of sidecar redirection is not available in this build",
        args.pod_namespace, args.pod_name
    )))
}
