//! The pod cache tests' part of the support tree: `install-cni` run as the node's agent against the API
//! double (its pod watch fills the cache it serves on `<run dir>/pod-cache.sock`), its metrics, and the
//! double's record of pod GETs.

use super::install::{agent_dir::AgentDir, node::get, set_env, Proc};
use super::{free_port, poll_until};
use kube_double::Server;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The node name the e2e pods carry (`spec.nodeName`).
pub const NODE: &str = "node1";

pub const PRIMARY: &str =
    r#"{"cniVersion":"1.0.0","name":"k8s-pod-network","plugins":[{"type":"ptp"}]}"#;

/// `install-cni` as the DaemonSet runs it, pointed at `srv`, with `run` as its run dir.
pub struct Agent {
    pub proc: Proc,
    pub dir: AgentDir,
    pub run: PathBuf,
    pub health: u16,
    pub metrics: u16,
}

impl Agent {
    /// Starts the agent for `node` with the extra environment `extra` (e.g. `POD_CACHE_ENABLED=false`).
    pub fn start(srv: &Server, run: &Path, node: &str, extra: &[(&str, &str)]) -> Agent {
        std::fs::create_dir_all(run).unwrap();
        let dir = AgentDir::new("agent", srv.token(), srv.ca_pem());
        dir.write("conf/10-primary.conflist", PRIMARY);
        let (health, metrics) = (free_port(), free_port());
        let mut env = dir.env(
            run,
            Some(srv.addr()),
            (health, metrics),
            &[
                ("NODE_NAME", node),
                ("REPAIR_ENABLED", "false"),
                ("FORCE_IPTABLES_BINARY", "iptables-nft"),
            ],
        );
        set_env(&mut env, extra);
        let proc = dir.spawn(&env);
        Agent {
            proc,
            dir,
            run: run.to_path_buf(),
            health,
            metrics,
        }
    }

    pub fn log(&self) -> String {
        self.proc.stderr()
    }

    pub fn socket(&self) -> PathBuf {
        self.run.join("pod-cache.sock")
    }

    /// Waits until the cache holds the node's pods (its first list is done) and the watch is open.
    pub fn wait_synced(&self) {
        let t = std::time::Instant::now();
        while !(self.log().contains("pod cache: synced")
            && self.metric("istio_cni_pod_cache_pods").is_some())
        {
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "timed out waiting for the pod cache to sync:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(2));
        }
        // The watch opens right after the list.
        std::thread::sleep(Duration::from_millis(100));
    }

    /// Waits until the cache holds `n` pods.
    pub fn wait_pods(&self, n: u64) {
        poll_until(
            &format!("{n} pods in the cache"),
            Duration::from_secs(30),
            || self.metric("istio_cni_pod_cache_pods") == Some(n),
        );
    }

    /// The agent's whole `/metrics` text.
    pub fn metrics_text(&self) -> String {
        get(self.metrics, "/metrics")
            .map(|(_, b)| b)
            .unwrap_or_default()
    }

    /// One series' value (`name` with its labels, as printed).
    pub fn metric(&self, series: &str) -> Option<u64> {
        let text = self.metrics_text();
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .map(|v| v as u64)
    }

    pub fn lookups(&self, result: &str) -> u64 {
        self.metric(&format!(
            "istio_cni_pod_cache_lookups_total{{result=\"{result}\"}}"
        ))
        .unwrap_or(0)
    }

    pub fn ready(&self) -> bool {
        get(self.health, "/readyz").is_some_and(|(c, _)| c == 200)
    }
}

/// GETs of single pods the double answered (`GET /api/v1/namespaces/<ns>/pods/<name>`), by pod name.
pub fn pod_gets(srv: &Server) -> Vec<String> {
    srv.requests()
        .into_iter()
        .filter(|r| r.method == "GET")
        .filter_map(|r| {
            let rest = r.path.strip_prefix("/api/v1/namespaces/")?;
            let mut parts = rest.split('/');
            match (parts.next(), parts.next(), parts.next(), parts.next()) {
                (Some(_), Some("pods"), Some(name), None) => Some(name.to_string()),
                _ => None,
            }
        })
        .collect()
}
