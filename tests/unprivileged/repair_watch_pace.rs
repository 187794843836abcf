//! The repair agent's watch loop against misbehaving API servers (the double): a watch the server closes
//! at once, and a 410 on every watch. Every restart of the loop waits (backoff with jitter), so the
//! request rate stays at a few per second at most, and repeated identical log lines are rate-limited.
//! The counts are generous bounds over a short window (the loop used to send thousands of requests).
//! The 30 s figures are measured by `scripts/bench` (its faults section, scripts/bench.d/faults.py).

use std::time::{Duration, Instant};

use crate::support::repair::*;
use kube_double::Fault;

/// Runs the daemon for `window` against a server with `fault` on every watch; returns (LIST requests,
/// WATCH requests, log lines).
fn run_against(fault: Fault, window: Duration) -> (usize, usize, usize) {
    let api = Api::new("pace");
    api.srv.set_fault(fault, None);
    let log = api.dir.join("agent.log");
    let args = [
        format!("--repair-node-name={NODE}"),
        format!("--monitoring-port={}", free_port()),
    ];
    let mut child = api.spawn(&args, &log);
    let start = Instant::now();
    // The window starts at the first request, so a slow start of the process does not shrink it.
    let started = wait_until(30, || !api.srv.requests().is_empty());
    if started {
        std::thread::sleep(window);
    }
    let reqs = api.srv.requests();
    let _ = child.kill();
    let _ = child.wait();
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        started,
        "the agent sent no request in {:?}; its log:\n{text}",
        start.elapsed()
    );
    let is_watch = |r: &&kube_double::RecordedRequest| r.param("watch").as_deref() == Some("true");
    let watches = reqs.iter().filter(is_watch).count();
    let lists = reqs.len() - watches;
    let lines = text.lines().count();
    (lists, watches, lines)
}

#[test]
fn a_watch_closed_at_once_is_reopened_with_backoff() {
    let (lists, watches, lines) = run_against(Fault::WatchClose, Duration::from_secs(8));
    assert!(
        watches >= 2,
        "the watch is reopened at all: {watches} watches"
    );
    assert!(
        lists + watches < 25,
        "{lists} lists and {watches} watches in 8 s"
    );
    assert!(lines < 25, "{lines} log lines in 8 s");
}

#[test]
fn a_410_on_every_watch_relists_with_backoff_and_few_log_lines() {
    let (lists, watches, lines) = run_against(Fault::WatchGone, Duration::from_secs(8));
    assert!(lists >= 2, "relisted after 410: {lists} lists");
    assert!(
        lists + watches < 25,
        "{lists} lists and {watches} watches in 8 s"
    );
    assert!(lines < 15, "{lines} log lines in 8 s");
}
