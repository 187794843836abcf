//! Watch resilience of the daemon against the API double: 410 mid-stream (relist), dropped connections and
//! 500s → the agent recovers and acts exactly once per pod; a failing action is attempted at most 5
//! times per failure streak, and a later change of the pod starts a new streak.

use crate::support::repair::*;
use kube_double::Fault;

fn broken_pod(name: &str) -> String {
    format!(
        r#"{{"metadata":{{"name":"{name}","namespace":"default","annotations":{{"sidecar.istio.io/status":"{{}}"}}}},
        "spec":{{"nodeName":"{NODE}","containers":[{{"name":"app"}}]}},
        "status":{{"podIP":"10.9.9.9","initContainerStatuses":[{{"name":"istio-validation",
          "state":{{"waiting":{{"reason":"CrashLoopBackOff"}}}},
          "lastState":{{"terminated":{{"exitCode":126,"reason":"Error"}}}}}}]}}}}"#
    )
}

fn working_pod(name: &str) -> String {
    format!(
        r#"{{"metadata":{{"name":"{name}","namespace":"default","annotations":{{"sidecar.istio.io/status":"{{}}"}}}},
        "spec":{{"nodeName":"{NODE}"}},
        "status":{{"initContainerStatuses":[{{"name":"istio-validation","state":{{"terminated":{{"exitCode":0,"reason":"Completed"}}}}}}]}}}}"#
    )
}

struct Agent {
    child: std::process::Child,
    log: std::path::PathBuf,
    port: u16,
}

impl Agent {
    fn start(api: &Api, mode: &[&str]) -> Agent {
        let port = free_port();
        let log = api.dir.join("agent.log");
        let mut args: Vec<String> = vec![
            format!("--repair-node-name={NODE}"),
            format!("--monitoring-port={port}"),
        ];
        args.extend(mode.iter().map(|s| s.to_string()));
        let child = api.spawn(&args, &log);
        Agent { child, log, port }
    }
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
    fn metric(&self, kind: &str, result: &str) -> u64 {
        metric(&scrape(self.port), kind, result)
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn deletes_of(api: &Api, name: &str) -> Vec<u16> {
    api.writes_to("DELETE", &format!("/api/v1/namespaces/default/pods/{name}"))
        .iter()
        .map(|r| r.status)
        .collect()
}

#[test]
fn gone_drops_and_500s_recover_and_each_pod_is_deleted_once() {
    let api = Api::new("watch");
    api.srv.add_pod(&broken_pod("p1")).unwrap();
    api.srv.add_pod(&working_pod("w1")).unwrap();
    let agent = Agent::start(&api, &["--repair-delete-pods=true"]);
    let gone = |n: &str| api.srv.pod("default", n).is_none();

    assert!(
        wait_until(60, || gone("p1")),
        "p1 not deleted\n{}",
        agent.log()
    );

    // 410 mid-stream: every watch ends with ERROR 410 and old versions expire → relist.
    let lists_before = api
        .srv
        .requests()
        .iter()
        .filter(|r| r.method == "GET" && r.param("watch").is_none())
        .count();
    api.srv.force_gone();
    api.srv.add_pod(&broken_pod("p2")).unwrap();
    assert!(
        wait_until(60, || gone("p2")),
        "p2 not deleted after 410\n{}",
        agent.log()
    );
    let lists_after = api
        .srv
        .requests()
        .iter()
        .filter(|r| r.method == "GET" && r.param("watch").is_none())
        .count();
    assert!(
        lists_after > lists_before,
        "no relist after 410\n{}",
        agent.log()
    );

    // Dropped connections: the next requests are read and then the connection is closed.
    api.srv.set_fault(Fault::Drop, Some(3));
    api.srv.force_gone();
    api.srv.add_pod(&broken_pod("p3")).unwrap();
    assert!(
        wait_until(180, || gone("p3")),
        "p3 not deleted after dropped connections\n{}",
        agent.log()
    );

    // 500s from the API server. The restart backoff (client-go's: 800 ms doubling to 30 s, +50 % jitter)
    // is only reset by a watch that delivered changes or stayed up 60 s, so after the faults above these
    // four failures may wait up to 12.8 + 25.6 + 30 + 30 s, stretched to 147 s: the bound allows for that.
    api.srv.set_fault(Fault::Status(500), Some(4));
    api.srv.force_gone();
    api.srv.add_pod(&broken_pod("p4")).unwrap();
    assert!(
        wait_until(240, || gone("p4")),
        "p4 not deleted after 500s\n{}",
        agent.log()
    );

    // The faults really hit the agent's list/watch, and it recovered from them.
    let log = agent.log();
    assert!(
        log.contains("relisting") || log.contains("list pods failed"),
        "{log}"
    );
    assert!(
        log.contains("watch pods failed") || log.contains("list pods failed"),
        "{log}"
    );
    // Exactly one successful DELETE per broken pod, none for the working pod, which remains.
    // The double removes a pod before it logs the DELETE that removed it: wait for the log to catch up.
    for p in ["p1", "p2", "p3", "p4"] {
        let oks = || deletes_of(&api, p).iter().filter(|s| **s == 200).count();
        wait_until(10, || oks() > 0);
        let ok = oks();
        assert_eq!(
            ok,
            1,
            "{p}: DELETE statuses {:?}\n{}",
            deletes_of(&api, p),
            agent.log()
        );
    }
    assert!(deletes_of(&api, "w1").is_empty());
    assert!(api.srv.pod("default", "w1").is_some());
    assert!(
        wait_until(10, || agent.metric("delete", "success") == 4),
        "{}",
        scrape(agent.port)
    );
    // Every DELETE carried the uid/resourceVersion preconditions.
    for r in api.writes().iter().filter(|r| r.method == "DELETE") {
        let pre = obj(&parse_body(r), "preconditions").clone();
        assert!(
            !s(&pre, "uid").is_empty() && !s(&pre, "resourceVersion").is_empty(),
            "{r:?}"
        );
    }
}

#[test]
fn label_mode_labels_once_across_relists_and_skips_labeled_pods() {
    let api = Api::new("label");
    api.srv.add_pod(&broken_pod("l1")).unwrap();
    let agent = Agent::start(&api, &["--repair-label-pods=true"]);
    let path = "/api/v1/namespaces/default/pods/l1/status";
    assert!(
        wait_until(60, || api.writes_to("PATCH", path).len() == 1),
        "{}",
        agent.log()
    );
    // The MODIFIED event from our own patch is reconciled as "already labeled".
    assert!(
        wait_until(60, || agent.metric("label", "skip") >= 1),
        "{}",
        agent.log()
    );
    api.srv.force_gone();
    api.srv.set_fault(Fault::Drop, Some(2));
    api.srv.add_pod(&broken_pod("l2")).unwrap();
    let path2 = "/api/v1/namespaces/default/pods/l2/status";
    assert!(
        wait_until(90, || api
            .writes_to("PATCH", path2)
            .iter()
            .any(|r| r.status == 200)),
        "{}",
        agent.log()
    );
    // The API server answers the PATCH before the agent counts it: wait for the count, then require it
    // exact (l1 once, l2 once).
    assert!(
        wait_until(60, || agent.metric("label", "success") >= 2),
        "{}",
        scrape(agent.port)
    );
    assert_eq!(
        api.writes_to("PATCH", path).len(),
        1,
        "l1 patched again after relist\n{}",
        agent.log()
    );
    assert_eq!(
        agent.metric("label", "success"),
        2,
        "{}",
        scrape(agent.port)
    );
}

#[test]
fn a_failing_delete_is_tried_five_times_then_again_after_the_pod_changes() {
    let api = Api::new("budget");
    let agent = Agent::start(&api, &["--repair-delete-pods=true"]);
    // The agent is watching (its list is done) before the fault is set.
    assert!(wait_until(60, || api
        .srv
        .requests()
        .iter()
        .any(|r| r.param("watch").as_deref() == Some("true"))));
    api.srv.set_fault(Fault::Status(409), None);
    api.srv.add_pod(&broken_pod("c1")).unwrap();
    assert!(
        wait_until(60, || agent.log().contains("retry budget exceeded")),
        "no budget exhaustion\n{}",
        agent.log()
    );
    assert_eq!(deletes_of(&api, "c1"), vec![409; 5], "{}", agent.log());
    assert_eq!(agent.metric("delete", "fail"), 5);
    api.srv.clear_fault();
    // A change of the pod starts a new streak, which now succeeds.
    touch_pod(&api.srv, "c1");
    assert!(
        wait_until(60, || api.srv.pod("default", "c1").is_none()),
        "{}",
        agent.log()
    );
    assert_eq!(
        deletes_of(&api, "c1").iter().filter(|s| **s == 200).count(),
        1
    );
}
