//! The audit's end-to-end tests' common parts (root): a pod the audit can find ([`Audited`]: ADD done, a
//! pause process in its namespace and its pod cgroup), the audit's series and Events, waits on the agent's
//! metrics and log, and the operators' one-shot run as its container runs it.

use super::e2e::*;
use super::repair::{scrape, wait_until, Agent, Pause, PodCgroup, BIN};
use super::*;
use istio_cni::json;
use std::process::Command;

/// A generous bound for a condition that takes a round or two (1 s each) on an idle machine.
pub const BOUND: u64 = 120;

/// A redirected pod the audit can find: ADD done, a pause process in its namespace and its cgroup.
pub struct Audited<'a> {
    pub pod: Pod<'a>,
    // Dropped after the pause process: the cgroup is emptied and removed last.
    _pause: Pause,
    _cgroup: PodCgroup,
}

impl<'a> Audited<'a> {
    pub fn new(node: &'a Node, name: &str, nft: bool) -> Audited<'a> {
        Audited::in_namespace(node, "default", name, nft)
    }

    /// A pod of namespace `namespace`, ADD run on it as the node's configuration decides.
    pub fn in_namespace(node: &'a Node, namespace: &str, name: &str, nft: bool) -> Audited<'a> {
        Audited::annotated(node, namespace, name, "", nft)
    }

    /// [`Audited::in_namespace`] with the pod's `annotations` (JSON members).
    pub fn annotated(
        node: &'a Node,
        namespace: &str,
        name: &str,
        annotations: &str,
        nft: bool,
    ) -> Audited<'a> {
        let mut pod = node.pod_in_namespace(namespace, name, annotations, "", false);
        if nft {
            pod = pod.with_native_nftables();
        }
        pod.add().assert_success();
        let cgroup = PodCgroup::new(&pod.uid);
        let pause = Pause::start(&pod.ns);
        cgroup.add(pause.pid());
        Audited {
            pod,
            _pause: pause,
            _cgroup: cgroup,
        }
    }

    pub fn sh(&self, cmd: &str) {
        self.pod.ns.exec_ok(&["sh", "-c", cmd]);
    }

    /// The namespace's nf_tables ruleset with rule handles (any rewrite changes them).
    pub fn ruleset(&self) -> String {
        String::from_utf8_lossy(&self.pod.ns.exec(&["nft", "-a", "list", "ruleset"]).stdout).into()
    }
}

/// A sample's value in a metrics text.
pub fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

pub fn pods_in(text: &str, state: &str) -> Option<f64> {
    sample(text, &format!("istio_cni_audit_pods{{state=\"{state}\"}}"))
}

pub fn rounds(text: &str) -> f64 {
    sample(text, "istio_cni_audit_rounds_total").unwrap_or(0.0)
}

/// The Events on pod `name` with `reason`.
pub fn events(node: &Node, name: &str, reason: &str) -> Vec<json::Object> {
    node.srv
        .events()
        .into_iter()
        .filter(|e| {
            json::str_of(e, "reason") == Some(reason)
                && json::obj_of(e, "involvedObject").and_then(|o| json::str_of(o, "name"))
                    == Some(name)
        })
        .collect()
}

/// Waits until `f` holds on the agent's metrics, or fails with its metrics and log.
pub fn wait_metrics(agent: &Agent, what: &str, f: impl Fn(&str) -> bool) {
    let ok = wait_until(BOUND, || f(&scrape(agent.port)));
    assert!(
        ok,
        "{what}; metrics:\n{}\nlog:\n{}",
        scrape(agent.port),
        agent.log()
    );
}

pub fn wait_log(agent: &Agent, needle: &str) {
    let ok = wait_until(BOUND, || agent.log().contains(needle));
    assert!(ok, "no {needle:?} in the agent's log:\n{}", agent.log());
}

/// The API requests other than reads and Event posts.
pub fn pod_writes(node: &Node) -> Vec<String> {
    node.srv
        .requests()
        .into_iter()
        .filter(|r| r.method != "GET" && !r.path.ends_with("/events"))
        .map(|r| format!("{} {}", r.method, r.path))
        .collect()
}

/// The one-shot (`install-cni audit`) with the agent's settings as its container has them.
pub fn one_shot(
    node: &Node,
    sa: &std::path::Path,
    extra: &[&str],
    nft: bool,
) -> std::process::Output {
    one_shot_with(node, sa, extra, nft, &[])
}

/// [`one_shot`] with more of the container's environment.
pub fn one_shot_with(
    node: &Node,
    sa: &std::path::Path,
    extra: &[&str],
    nft: bool,
    env: &[(&str, &str)],
) -> std::process::Output {
    let addr = node.srv.addr();
    Command::new(BIN)
        .args(["install-cni", "audit", "--host-proc=/proc"])
        .args(extra)
        .env_clear()
        .env("PATH", PLUGIN_PATH_ENV)
        .env("NODE_NAME", "node1")
        .env("CNI_AGENT_RUN_DIR", node.dir.join("run"))
        .env("SERVICE_ACCOUNT_DIR", sa)
        .env("KUBERNETES_SERVICE_HOST", addr.ip().to_string())
        .env("KUBERNETES_SERVICE_PORT", addr.port().to_string())
        .env("NATIVE_NFTABLES", nft.to_string())
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

/// The service account files the one-shot reads in its container.
pub fn service_account(node: &Node) -> std::path::PathBuf {
    let sa = node.dir.join("sa");
    std::fs::create_dir_all(&sa).unwrap();
    std::fs::write(sa.join("token"), node.srv.token()).unwrap();
    std::fs::write(sa.join("ca.crt"), node.srv.ca_pem()).unwrap();
    sa
}
