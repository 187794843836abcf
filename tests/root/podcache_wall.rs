//! Measurement, not a test (ignored; root): wall time of the plugin's ADD (nftables mode), exec'd like a
//! runtime, with the pod from the node's cache while the API double answers, hangs, and is gone; how long an
//! uncached pod takes to fail closed meanwhile (its lookup deadline is the e2e node's 2 s); and what a
//! SIGKILLed agent's socket adds to the API fallback against no socket at all. `ADD_BIN=<path>` measures
//! another build of the plugin, `INSTALLER_BINARY_UNDER_TEST=<path>` another agent (use the release build
//! for the figures):
//!   cargo test --test root podcache_wall -- --ignored --nocapture

use crate::support::e2e::*;
use crate::support::podcache::{Agent, NODE};
use crate::support::*;
use kube_double::Fault;
use std::time::Duration;

const N: usize = 20;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Median ms of ADD over `pods` (each must succeed).
fn adds(pods: &[Pod]) -> f64 {
    median(
        pods.iter()
            .map(|p| {
                let (code, took) = p.add_timed();
                assert_eq!(code, 0, "ADD of {} failed", p.name);
                took.as_secs_f64() * 1e3
            })
            .collect(),
    )
}

#[test]
#[ignore = "measurement (root)"]
fn measure_adds_through_an_api_outage_and_after_the_agent_is_killed() {
    if !require_root() {
        return;
    }
    let node = Node::new(78);
    node.plugin_from_env();
    let run = node.dir.join("run");
    let mut agent = Agent::start(&node.srv, &run, NODE, &[]);
    let batch = |tag: &str, first: usize| -> Vec<Pod> {
        (0..N)
            .map(|i| {
                node.bare_pod(&format!("{tag}-{i}"), (first + i) as u8)
                    .with_native_nftables()
            })
            .collect()
    };
    let (healthy, hung, stopped_api, killed, gone) = (
        batch("healthy", 0),
        batch("hung", 20),
        batch("stopped", 40),
        batch("killed", 60),
        batch("gone", 80),
    );
    agent.wait_synced();
    agent.wait_pods(5 * N as u64);
    let m_healthy = adds(&healthy);

    // After the agent is SIGKILLed (its socket left), and with no socket at all: both read the API.
    agent.proc.child.kill().unwrap();
    agent.proc.child.wait().unwrap();
    let m_killed = adds(&killed);
    std::fs::remove_file(agent.socket()).unwrap();
    let m_gone = adds(&gone);

    // A fresh agent for the outage.
    let agent = Agent::start(&node.srv, &run, NODE, &[]);
    agent.wait_synced();
    agent.wait_pods(5 * N as u64);
    node.srv.set_fault(Fault::Hang, None);
    let m_hung = adds(&hung);
    let uncached = node
        .pod_without_api_object("uncached")
        .with_native_nftables();
    let (code, fail_hung) = uncached.add_timed();
    assert_ne!(code, 0);
    node.srv.stop();
    let m_stopped = adds(&stopped_api);
    println!(
        "\nMEASURE nftables ADD, median of {N} each, ms: cache (API healthy) {m_healthy:.2}; cache, API hung {m_hung:.2}; \
         cache, API stopped {m_stopped:.2}; uncached pod with the API hung fails closed after {:.2} s (deadline {:?}); \
         API fallback after SIGKILL (socket left) {m_killed:.2} vs no socket {m_gone:.2}: {:+.2} ms",
        fail_hung.as_secs_f64(),
        Duration::from_secs(2),
        m_killed - m_gone
    );
}
