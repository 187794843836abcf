//! A burst of concurrent ADDs against a running `install-cni`: every ADD's record reaches `/metrics` and
//! every ADD's log line its log, however full the relay socket's queue gets (the kernel queues at most
//! `net.unix.max_dgram_qlen` datagrams, 10 by default, per receiving socket: a burst overflows it at once).
//!
//! The plugins are real (the built binary exec'd as a runtime does, on the node's run dir and its relay
//! socket), their ADDs the cheapest there are (a pod in an excluded namespace: no API call, no rules), so
//! the burst is as dense as it gets; busy threads beside them stand for a loaded node. Nothing is timed:
//! the test waits for the count to reach the number of ADDs, and fails if it never does.

use crate::support::install::node::get;
use crate::support::install::{agent_dir::AgentDir, binary};
use crate::support::*;
use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

const ADDS: usize = 50;
const SKIPPED: &str =
    "istio_cni_plugin_add_duration_seconds_count{backend=\"none\",result=\"skipped\"} ";

/// CPU-bound threads until dropped: a loaded node.
struct Busy(Arc<AtomicBool>, Vec<std::thread::JoinHandle<()>>);

impl Busy {
    fn start(n: usize) -> Busy {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..n)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        std::hint::spin_loop();
                    }
                })
            })
            .collect();
        Busy(stop, threads)
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
        for t in self.1.drain(..) {
            let _ = t.join();
        }
    }
}

#[test]
fn every_add_of_a_burst_is_counted_and_logged() {
    if !require_root() {
        return;
    }
    // A CA the plugin could use (the installer refuses to write a kubeconfig without one).
    let ca = std::fs::read(conformance_dir().join("kubeconfig/master-tls-verify/ca.crt")).unwrap();
    let root = AgentDir::new("burst", "token", ca);
    root.write(
        "conf/10-ptp.conflist",
        r#"{"cniVersion":"1.0.0","name":"k8s-pod-network","plugins":[{"type":"ptp"}]}"#,
    );
    let (health, metrics) = (free_port(), free_port());
    let run = root.join("run");
    std::fs::create_dir_all(&run).unwrap();
    let env = root.env(
        &run,
        None,
        (health, metrics),
        &[("REPAIR_ENABLED", "false"), ("POD_CACHE_ENABLED", "false")],
    );
    let agent = root.spawn(&env);
    let text = || get(metrics, "/metrics").map(|(_, b)| b).unwrap_or_default();
    poll_until("ready", Duration::from_secs(20), || {
        get(health, "/readyz").is_some_and(|(c, _)| c == 200) && run.join("log.sock").exists()
    });
    let counted = || -> usize {
        text()
            .lines()
            .find_map(|l| l.strip_prefix(SKIPPED)?.parse().ok())
            .unwrap_or(0)
    };
    let before = counted();

    let ns = Netns::new("burst");
    let conf = format!(
        r#"{{"cniVersion":"1.0.0","name":"burst","type":"istio-cni","cni_agent_run_dir":"{}",
           "exclude_namespaces":["kube-system"],"prevResult":{{"cniVersion":"1.0.0"}}}}"#,
        run.display()
    );
    let busy = Busy::start(8);
    // Every plugin started and waiting for its configuration on stdin, then all given it at once.
    let mut children: Vec<_> = (0..ADDS)
        .map(|i| {
            let env = CniEnv::new("ADD", &format!("c{i}"), &ns.path(), "/nonexistent").with_args(
                &format!("K8S_POD_NAMESPACE=kube-system;K8S_POD_NAME=burst-{i}"),
            );
            Command::new(binary())
                .arg("istio-cni")
                .env_clear()
                .env("PATH", PLUGIN_PATH_ENV)
                .envs(env.vars())
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .expect("exec the plugin")
        })
        .collect();
    for child in &mut children {
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(conf.as_bytes()).unwrap();
    }
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{out:?}");
    }
    drop(busy);

    // Every record counted, every line relayed (no timing: a lost one never comes).
    let lines = || {
        (0..ADDS)
            .filter(|i| {
                agent
                    .stderr()
                    .contains(&format!("ADD kube-system/burst-{i} (c{i})"))
            })
            .count()
    };
    let all = || counted() - before == ADDS && lines() == ADDS;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !all() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        (counted() - before, lines()),
        (ADDS, ADDS),
        "records counted and log lines relayed for {ADDS} ADDs\n{}",
        agent.stderr()
    );
}
