//! Measurement, not a test (ignored; root): wall time of the plugin's ADD (nftables mode), exec'd like a
//! runtime, with the pod from the node's cache while the API double answers, hangs, and is gone; how long an
//! uncached pod takes to fail closed meanwhile (its lookup deadline is the e2e node's 2 s); what a
//! SIGKILLed agent's socket adds to the API fallback against no socket at all; and what a stopped (hung)
//! agent costs while its heartbeat is fresh and once it is stale. `ADD_BIN=<path>` measures
//! another build of the plugin, `INSTALLER_BINARY_UNDER_TEST=<path>` another agent (use the release build
//! for the figures):
//!   cargo test --test root podcache_wall -- --ignored --nocapture

use crate::support::e2e::*;
use crate::support::podcache::{Agent, NODE};
use crate::support::*;
use istio_cni::podcache::client::HEARTBEAT_FRESH;
use kube_double::Fault;
use nix::sys::signal::Signal;
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
    let (healthy, hung, stopped_api, killed, gone, paused) = (
        batch("healthy", 0),
        batch("hung", 20),
        batch("stopped", 40),
        batch("killed", 60),
        batch("gone", 80),
        batch("paused", 100),
    );
    agent.wait_synced();
    agent.wait_pods(6 * N as u64);
    let m_healthy = adds(&healthy);

    // After the agent is SIGKILLed (its socket left), and with no socket at all: both read the API.
    agent.proc.child.kill().unwrap();
    agent.proc.child.wait().unwrap();
    let m_killed = adds(&killed);
    std::fs::remove_file(agent.socket()).unwrap();
    let m_gone = adds(&gone);

    // A fresh agent, stopped (SIGSTOP: its socket accepts, nothing answers): right after the stop its
    // heartbeat is fresh and an ADD waits the long bound; once stale, the short one. Both then read the API.
    let agent = Agent::start(&node.srv, &run, NODE, &[]);
    agent.wait_synced();
    agent.wait_pods(6 * N as u64);
    agent.proc.signal(Signal::SIGSTOP);
    let (code, paused_fresh) = paused[0].add_timed();
    assert_eq!(code, 0);
    std::thread::sleep(HEARTBEAT_FRESH + Duration::from_secs(1));
    let m_paused = adds(&paused[1..]);
    agent.proc.signal(Signal::SIGCONT);

    // The same agent for the outage.
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
         API fallback after SIGKILL (socket left) {m_killed:.2} vs no socket {m_gone:.2}: {:+.2} ms; \
         agent SIGSTOPped: first ADD {:.2} (heartbeat fresh), then {m_paused:.2} (stale)",
        fail_hung.as_secs_f64(),
        Duration::from_secs(2),
        m_killed - m_gone,
        paused_fresh.as_secs_f64() * 1e3
    );
}

/// Percentile `p` (0–100) of sorted `v`.
fn pct(v: &[f64], p: f64) -> f64 {
    v[((v.len() - 1) as f64 * p / 100.0).round() as usize]
}

/// Measurement, not a test (ignored; root): the pod cache's lookup as the plugin sees it in a storm of pod
/// starts (200 ADDs one after the other, then `STORM` at once, as `podcache_e2e` does), from each ADD's
/// own log line ("pod lookup X ms (cache)" or "(api: cache miss: …)" on the plugin's stderr). Run it on a
/// deliberately loaded machine (`stress-ng --cpu 4` on 2 vCPUs) with `ADD_BIN` and
/// `INSTALLER_BINARY_UNDER_TEST` naming the builds to compare (`ROUNDS`, default 3):
///   cargo test --test root podcache_wall::measure_cached_lookups_in_a_storm -- --ignored --nocapture
#[test]
#[ignore = "measurement (root)"]
fn measure_cached_lookups_in_a_storm() {
    if !require_root() {
        return;
    }
    const SEQUENTIAL: usize = 200;
    const STORM: usize = 50;
    let rounds: usize = std::env::var("ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(3);
    let (mut cached, mut storm, mut api) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        let node = Node::new(79);
        node.plugin_from_env();
        let agent = Agent::start(&node.srv, &node.dir.join("run"), NODE, &[]);
        let pods: Vec<Pod> = (0..SEQUENTIAL + STORM)
            .map(|i| node.bare_pod(&format!("r{round}-{i}"), (i % 250) as u8))
            .collect();
        agent.wait_synced();
        agent.wait_pods(pods.len() as u64);
        let mut outs: Vec<(bool, PluginOutput)> = pods[..SEQUENTIAL]
            .iter()
            .map(|p| (false, p.add()))
            .collect();
        std::thread::scope(|s| {
            let hs: Vec<_> = pods[SEQUENTIAL..]
                .iter()
                .map(|p| s.spawn(move || p.add()))
                .collect();
            outs.extend(hs.into_iter().map(|h| (true, h.join().unwrap())));
        });
        for (in_storm, out) in outs {
            out.assert_success();
            let Some(rest) = out.stderr.split("pod lookup ").nth(1) else {
                panic!("no lookup line: {out}");
            };
            let ms: f64 = rest
                .split(" ms")
                .next()
                .and_then(|m| m.parse().ok())
                .unwrap_or(f64::NAN);
            match rest.split(" ms (").nth(1).and_then(|s| s.split(')').next()) {
                Some("cache") if in_storm => storm.push(ms),
                Some("cache") => cached.push(ms),
                Some(why) => api.push((ms, why.to_string())),
                None => {}
            }
        }
    }
    let mut reasons: std::collections::BTreeMap<String, usize> = Default::default();
    for (_, why) in &api {
        *reasons.entry(why.clone()).or_default() += 1;
    }
    let api_ms: Vec<f64> = api.iter().map(|(m, _)| *m).collect();
    let dist = |v: &mut Vec<f64>| {
        v.sort_by(|a, b| a.total_cmp(b));
        if v.is_empty() {
            return "none".to_string();
        }
        format!(
            "{} (ms p50 {:.2}, p90 {:.2}, p99 {:.2}, max {:.2})",
            v.len(),
            pct(v, 50.0),
            pct(v, 90.0),
            pct(v, 99.0),
            v[v.len() - 1]
        )
    };
    println!(
        "\nMEASURE pod cache lookups, {rounds} rounds of {SEQUENTIAL} sequential + {STORM} concurrent ADDs (load average {}): \
         from the cache, sequential {}, concurrent {}; from the API server {} {reasons:?} (lookup ms {api_ms:.1?})",
        std::fs::read_to_string("/proc/loadavg").unwrap_or_default().trim(),
        dist(&mut cached),
        dist(&mut storm),
        api.len(),
    );
}
