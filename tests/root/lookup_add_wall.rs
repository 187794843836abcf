//! Measurement, not a test (ignored; root): wall time of the plugin's ADD, exec'd like a runtime, when the
//! API server never speaks, stalls after TLS, or answers 429 with Retry-After, against the e2e node's
//! `pod_lookup_timeout_seconds` (2 s, or `ADD_DEADLINE` seconds). `ADD_BIN=<path>` measures another build of
//! the plugin.
//!   cargo test --test lookup_add_wall -- --ignored --nocapture

use crate::support::e2e::*;
use crate::support::*;
use kube_double::Fault;
use std::time::{Duration, Instant};

#[test]
#[ignore = "measurement (root)"]
fn measure_add_wall_time_against_the_deadline() {
    if !require_root() {
        return;
    }
    let node = Node::new(77);
    node.plugin_from_env();
    let mut pod = node.pod("wall", "", "", false);
    let secs: u32 = std::env::var("ADD_DEADLINE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2);
    pod.set_lookup_timeout(secs);
    for fault in [
        Fault::Hang,
        Fault::Stall,
        Fault::RetryAfter(1),
        Fault::RetryAfter(7),
    ] {
        node.srv.clear_requests();
        node.srv.set_fault(fault.clone(), None);
        let t = Instant::now();
        let out = pod.add();
        let took = t.elapsed();
        node.srv.clear_fault();
        println!(
            "\nMEASURE ADD with {fault:?}: {:.3}s for a {:?} deadline, exit {}, {} requests",
            took.as_secs_f64(),
            Duration::from_secs(secs.into()),
            out.code,
            node.srv.requests().len()
        );
    }
}
