//! The plugin's pod lookup (`get_pod_with_retry`) against the API double: every attempt is bounded well
//! below the deadline (a stalled request does not eat it), the deadline is absolute, `429` + `Retry-After`
//! is honoured without sleeping past the deadline. Loopback only.
//!
//! The bounds are generous except where the requirement itself is a bound (return within the deadline
//! + 0.25 s).

use std::time::{Duration, Instant};

use istio_cni::kube::status::REASON_TIMEOUT;
use istio_cni::kube::{get_pod_with_retry, ApiErrorExt};
use kube_double::{Fault, Server};

use crate::support::kube::*;

/// What the requirement allows past the deadline.
const OVERSHOOT: Duration = Duration::from_millis(250);

fn pod_server() -> Server {
    let srv = start();
    srv.add_pod(&pod_json("ns", "p", "n1")).unwrap();
    srv
}

#[test]
fn one_stalled_request_leaves_time_for_the_retry_that_succeeds() {
    let srv = pod_server();
    let dir = TempDir::new("stall-once");
    // The client's own per-request limit is the default 30 s: only the lookup's per-attempt cap can
    // save the deadline.
    let c = client(&srv, &dir);
    srv.set_fault(Fault::Stall, Some(1));
    let t = Instant::now();
    let res = get_pod_with_retry(&c, "ns", "p", "", Duration::from_secs(8));
    let took = t.elapsed();
    srv.clear_fault();
    let pod = res.unwrap_or_else(|e| panic!("lookup failed after {took:?}: {e}"));
    assert_eq!(name_of(&pod), "p");
    let statuses: Vec<u16> = srv.requests().iter().map(|r| r.status).collect();
    assert_eq!(statuses, vec![0, 200], "stalled, then answered");
}

#[test]
fn three_attempts_fit_in_the_deadline_when_every_request_stalls() {
    let srv = pod_server();
    let dir = TempDir::new("stall-all");
    let c = client(&srv, &dir);
    srv.set_fault(Fault::Stall, None);
    let deadline = Duration::from_secs(4);
    let t = Instant::now();
    let e = get_pod_with_retry(&c, "ns", "p", "", deadline).unwrap_err();
    let took = t.elapsed();
    srv.clear_fault();
    assert_eq!(e.api_reason(), Some(REASON_TIMEOUT), "{e}");
    assert!(
        srv.requests().len() >= 3,
        "{} attempts in {took:?}: {e}",
        srv.requests().len()
    );
    assert!(took <= deadline + OVERSHOOT, "took {took:?}: {e}");
}

#[test]
fn the_deadline_is_absolute_for_a_server_that_never_speaks() {
    let srv = pod_server();
    let dir = TempDir::new("hang-all");
    srv.set_fault(Fault::Hang, None);
    let c = client(&srv, &dir);
    for deadline in [Duration::from_millis(1500), Duration::from_millis(2300)] {
        let t = Instant::now();
        let e = get_pod_with_retry(&c, "ns", "p", "", deadline).unwrap_err();
        let took = t.elapsed();
        assert!(
            took <= deadline + OVERSHOOT,
            "took {took:?} for {deadline:?}: {e}"
        );
        assert!(e.to_string().contains("gave up after"), "{e}");
    }
    srv.clear_fault();
}

#[test]
fn retry_after_is_honoured_within_the_deadline() {
    let srv = pod_server();
    let dir = TempDir::new("429");
    let c = client(&srv, &dir);
    // Retry-After 1 s twice: the lookup waits for it (its own backoff would be 0.1 s, then 0.2 s).
    srv.set_fault(Fault::RetryAfter(1), Some(2));
    let t = Instant::now();
    let pod = get_pod_with_retry(&c, "ns", "p", "", Duration::from_secs(10)).unwrap();
    let took = t.elapsed();
    assert_eq!(name_of(&pod), "p");
    let statuses: Vec<u16> = srv.requests().iter().map(|r| r.status).collect();
    assert_eq!(statuses, vec![429, 429, 200]);
    assert!(
        took >= Duration::from_millis(1900),
        "Retry-After ignored: {took:?}"
    );

    // A Retry-After past the deadline: no doomed retries, no sleeping past the deadline.
    srv.clear_requests();
    srv.set_fault(Fault::RetryAfter(60), None);
    let deadline = Duration::from_secs(3);
    let t = Instant::now();
    let e = get_pod_with_retry(&c, "ns", "p", "", deadline).unwrap_err();
    let took = t.elapsed();
    srv.clear_fault();
    assert_eq!(e.api_status(), Some(429), "{e}");
    assert!(took <= deadline + OVERSHOOT, "took {took:?}: {e}");
    assert_eq!(srv.requests().len(), 1, "retried before Retry-After: {e}");
    assert!(e.to_string().contains("Retry-After"), "{e}");
}

#[test]
fn one_attempt_is_singular() {
    let srv = pod_server();
    let dir = TempDir::new("plural");
    let c = client(&srv, &dir);
    srv.set_fault(Fault::Status(500), None);
    let e = get_pod_with_retry(&c, "ns", "p", "", Duration::from_millis(120)).unwrap_err();
    srv.clear_fault();
    let msg = e.to_string();
    assert!(msg.contains("gave up after 1 attempt "), "{msg}");
}
