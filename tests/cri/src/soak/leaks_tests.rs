//! The leak classifier against synthetic CRI calls and kills.

use super::*;

fn call(base: Instant, what: &'static str, sandbox: &str, s: u64, e: u64, err: bool) -> Call {
    Call {
        what,
        sandbox: sandbox.into(),
        start: base + Duration::from_millis(s),
        end: base + Duration::from_millis(e),
        error: err.then(|| "transport error".to_string()),
    }
}

fn pod(name: &str, runs: Vec<Call>, teardown: Vec<Call>) -> PodEnd {
    PodEnd {
        name: name.into(),
        runs,
        failures: 0,
        redirected: None,
        check_error: None,
        first_error: None,
        sandbox: None,
        teardown,
        stale: Vec::new(),
        teardown_error: None,
    }
}

fn item(sandbox: Option<&str>, pod: Option<&str>, at_ms: Option<f64>) -> Item {
    Item {
        what: "ip",
        key: "ip:10.203.1.2".into(),
        sandbox: sandbox.map(str::to_string),
        pod: pod.map(str::to_string),
        at_ms,
        detail: String::new(),
    }
}

#[test]
fn a_leak_is_containerds_only_when_a_kill_cut_a_call_for_it() {
    let base = Instant::now();
    let ms = |t: Instant| t.saturating_duration_since(base).as_secs_f64() * 1e3;
    let pods = vec![
        // a started sandbox whose StopPodSandbox ran across the kill at 1,500 ms
        pod(
            "a",
            vec![call(base, "RunPodSandbox", "s1", 0, 100, false)],
            vec![call(base, "StopPodSandbox", "s1", 1_400, 1_600, true)],
        ),
        // a started sandbox torn down cleanly
        pod(
            "b",
            vec![call(base, "RunPodSandbox", "s2", 0, 100, false)],
            vec![call(base, "StopPodSandbox", "s2", 200, 300, false)],
        ),
        // a RunPodSandbox cut off by the kill (its sandbox id never returned)
        pod(
            "c",
            vec![call(base, "RunPodSandbox", "", 1_000, 1_500, true)],
            vec![],
        ),
    ];
    let kills = [1_500.0];
    let class = |i: &Item| classify(i, &pods, &kills, &ms).0;
    assert_eq!(class(&item(Some("s1"), None, None)), "containerd");
    assert_eq!(class(&item(Some("s2"), None, None)), "unexplained");
    // Unknown sandbox made during c's cut-off RunPodSandbox: containerd's; made long after: not.
    assert_eq!(class(&item(Some("s9"), None, Some(1_200.0))), "containerd");
    assert_eq!(class(&item(None, None, Some(9_000.0))), "unexplained");
    // A sandbox named for another pod is not explained by c's cut-off call.
    assert_eq!(
        class(&item(Some("s9"), Some("b"), Some(1_200.0))),
        "unexplained"
    );
    // No kill at all: nothing is containerd's.
    assert_eq!(
        classify(&item(Some("s1"), None, None), &pods, &[], &ms).0,
        "unexplained"
    );
}
