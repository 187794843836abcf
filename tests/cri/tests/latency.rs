//! RunPodSandbox latency with and without istio-cni in the chain: a measurement, not an assertion (ignored
//! by default; `scripts/bench` style). Two private containerds, one chain each (ptp alone; ptp + istio-cni),
//! 20 paired rounds alternating which goes first; prints both medians and the median of the paired
//! differences.
//!
//!   cargo test --manifest-path tests/cri/Cargo.toml --target-dir target --test latency -- --ignored --nocapture

use cri_e2e::node::{Node, NodeOptions, NETNS_COUNT};
use cri_e2e::util::require_root;
use std::time::{Duration, Instant};

async fn one(node: &Node, name: &str) -> Duration {
    let pod = node.sidecar_pod("default", name, &[]);
    let t = Instant::now();
    let id = node.cri.run_pod(&pod).await.expect("RunPodSandbox");
    let d = t.elapsed();
    node.cri.stop(&id).await.expect("stop");
    node.cri.remove(&id).await.expect("remove");
    d
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement; run with --ignored --nocapture"]
async fn run_pod_sandbox_latency_with_and_without_istio_cni() {
    if !require_root() {
        return;
    }
    let _g = NETNS_COUNT.read().await;
    let with = Node::new(NodeOptions { with_plugin: true }).await;
    let without = Node::new(NodeOptions { with_plugin: false }).await;
    // Warm-up (page cache, first iptables backend probe).
    one(&with, "warm").await;
    one(&without, "warm").await;
    let rounds: usize = std::env::var("CRI_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let (mut a, mut b, mut diff) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..rounds {
        let (x, y) = if i % 2 == 0 {
            let x = one(&with, &format!("w{i}")).await;
            (x, one(&without, &format!("o{i}")).await)
        } else {
            let y = one(&without, &format!("o{i}")).await;
            (one(&with, &format!("w{i}")).await, y)
        };
        a.push(x.as_secs_f64() * 1e3);
        b.push(y.as_secs_f64() * 1e3);
        diff.push((x.as_secs_f64() - y.as_secs_f64()) * 1e3);
    }
    println!(
        "RunPodSandbox over {rounds} paired rounds: with istio-cni median {:.1} ms, without {:.1} ms, paired difference median {:.1} ms",
        median(&mut a),
        median(&mut b),
        median(&mut diff)
    );
}
