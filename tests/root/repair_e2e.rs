//! Repair in place, end to end (root): a pod wired by Debian's real `ptp` + `host-local` but WITHOUT our
//! plugin (the node-startup race), a pause process in it, and the pod object in the HTTPS API double
//! showing a failed `istio-validation`. The validation applet, run in the pod as uid 1337, exits 126; the
//! agent finds the namespace from /proc by the pod IP and programs it through the plugin's code; then the
//! applet exits 0, and the pod has exactly the rules ADD gives a twin pod: in iptables mode, and in
//! nftables mode (the agent with `NATIVE_NFTABLES=true`, the same code path as ADD over netlink: no chroot,
//! no host binary, no iptables rules). A later update of the still-broken pod is not repaired a second time
//! (same UID). And a second namespace squatting the pod's IP is never the one programmed.

use crate::support::e2e::*;
use crate::support::repair::{
    assert_validation_passes, metric, scrape, touch_pod, validation_in, wait_until, Agent, Pause,
    PodCgroup, BROKEN_STATUS,
};
use crate::support::*;
use Backend::*;

/// Our tables as `nft list` prints them, counters removed.
fn tables(ns: &Netns) -> String {
    let mut out = String::new();
    for t in ["istio-proxy-nat", "istio-proxy-mangle", "istio-proxy-raw"] {
        let o = ns.exec(&["nft", "list", "table", "inet", t]);
        let text = String::from_utf8_lossy(&o.stdout);
        for l in text.lines() {
            let l = match l.find("counter packets") {
                Some(i) => {
                    let tail: Vec<&str> = l[i..].split_whitespace().skip(5).collect();
                    format!("{}counter {}", &l[..i], tail.join(" "))
                }
                None => l.to_string(),
            };
            out.push_str(&l);
            out.push('\n');
        }
    }
    out
}

fn race_victim_is_repaired_in_place(b: Backend) {
    if !require_root() {
        return;
    }
    let nft = b == Nftables;
    let node = Node::new(if nft { 57 } else { 41 });
    let pod = node.pod("victim", "", "", false);
    // Its process in its cgroup, where the kubelet puts it: the only way its namespace is known.
    let cgroup = PodCgroup::new(&pod.uid);
    let pause = Pause::start(&pod.ns);
    cgroup.add(pause.pid());
    node.srv
        .patch_pod("default", "victim", BROKEN_STATUS)
        .unwrap();

    let before = validation_in(&pod.ns, nft);
    assert_eq!(
        before.status.code(),
        Some(126),
        "before repair:\n{}",
        crate::support::repair::show(&before)
    );

    let mut agent = match b {
        Iptables => Agent::start(
            &node,
            &["--repair-delete-pods=true", "--repair-label-pods=true"],
            &[],
        ),
        Nftables => Agent::start(&node, &[], &[("NATIVE_NFTABLES", "true")]),
    };
    let repaired = agent.wait_repaired();
    if nft {
        agent.stop();
    }
    let log_text = || agent.log();
    assert!(repaired, "no repair counted; agent log:\n{}", log_text());
    if nft {
        assert!(log_text().contains("nftables"), "{}", log_text());
    }

    assert_validation_passes(&pod.ns, nft, &log_text());

    // Exactly what ADD applies: a twin pod that went through the plugin has the same rules.
    let twin = b.pod(&node, "twin", "", "", false);
    twin.add().assert_success();
    if nft {
        let (ours, add) = (tables(&pod.ns), tables(&twin.ns));
        assert!(ours.contains("chain istio-output"), "{ours}");
        assert_eq!(ours, add, "repaired pod vs pod set up by ADD");
        assert!(
            !pod.save("iptables-save").contains("ISTIO"),
            "iptables rules in nftables mode"
        );
        assert!(!node.dir.join("run/iptables-backend").exists());
        return;
    }
    let mut rules = String::new();
    for prog in [
        "iptables-legacy-save",
        "iptables-nft-save",
        "ip6tables-legacy-save",
        "ip6tables-nft-save",
    ] {
        let (ours, add) = (pod.save(prog), twin.save(prog));
        assert_eq!(ours, add, "{prog}: repaired pod vs pod set up by ADD");
        rules.push_str(&ours);
    }
    assert!(
        rules.contains("-A ISTIO_OUTPUT") && rules.contains("ISTIO_IN_REDIRECT"),
        "no rules seen:\n{rules}"
    );

    // The same (still broken) pod changes again: no second repair of the same UID, and repair mode
    // beats delete and label: no write to the pod at all.
    touch_pod(&node.srv, "victim");
    let seen =
        crate::support::repair::wait_until(60, || log_text().contains("pod default/victim (uid"));
    assert!(
        seen,
        "the agent did not see the update; log:\n{}",
        log_text()
    );
    let metrics = crate::support::repair::scrape(agent.port);
    assert_eq!(
        crate::support::repair::metric(&metrics, "repair", "success"),
        1,
        "{metrics}\n{}",
        log_text()
    );
    assert_eq!(
        crate::support::repair::metric(&metrics, "repair", "fail"),
        0,
        "{metrics}\n{}",
        log_text()
    );
    let writes: Vec<_> = node
        .srv
        .requests()
        .into_iter()
        .filter(|r| r.method != "GET" && !r.path.ends_with("/events"))
        .collect();
    assert!(writes.is_empty(), "repair mode wrote to pods: {writes:?}");
    let events = node.srv.events();
    assert!(
        events
            .iter()
            .any(|e| istio_cni::json::str_of(e, "reason") == Some("RepairBrokenPod")),
        "no RepairBrokenPod event: {events:?}"
    );
}

#[test]
fn race_victim_is_repaired_in_place_and_validation_then_passes() {
    race_victim_is_repaired_in_place(Iptables)
}

#[test]
fn nftables_race_victim_is_repaired_in_place() {
    race_victim_is_repaired_in_place(Nftables)
}

/// Whether any of our chains is in `ns`, in either iptables backend.
fn has_istio_rules(ns: &Netns) -> bool {
    ["iptables-nft-save", "iptables-legacy-save"]
        .iter()
        .any(|p| ns.saved_rules(p).contains("ISTIO"))
}

/// M5: another namespace holding the pod's IP with an older process (a hostile pod with NET_ADMIN puts the
/// victim's IP on its own `lo`) is never programmed. While no process is in the pod's cgroup the repair
/// is refused (the IP alone never names the pod's namespace): counted as a failure, neither namespace touched. Once the pod's process is in the
/// pod's cgroup (where the kubelet puts it) and the pod changes, the pod's own namespace is repaired,
/// validation passes there, and the hostile namespace still has no rules. Upstream (and we before) took
/// the oldest process's namespace: the hostile one got the rules and the repair counted as a success.
#[test]
fn a_namespace_squatting_the_pod_ip_is_never_programmed() {
    if !require_root() {
        return;
    }
    let node = Node::new(42);
    let hostile = Netns::new("squat");
    let _older = Pause::start(&hostile);
    let pod = node.pod("victim", "", "", false);
    let uid = node
        .srv
        .pod("default", "victim")
        .and_then(|p| {
            istio_cni::json::obj_of(&p, "metadata")
                .and_then(|m| istio_cni::json::str_of(m, "uid"))
                .map(str::to_string)
        })
        .expect("the double assigns a uid");
    let cgroup = PodCgroup::new(&uid);
    let pause = Pause::start(&pod.ns);
    hostile.exec_ok(&["ip", "link", "set", "lo", "up"]);
    hostile.exec_ok(&["ip", "addr", "add", &format!("{}/32", pod.ip4), "dev", "lo"]);
    node.srv
        .patch_pod("default", "victim", BROKEN_STATUS)
        .unwrap();

    let agent = Agent::start(&node, &[], &[]);
    let count = |result: &str| metric(&scrape(agent.port), "repair", result);
    let settled = wait_until(60, || count("fail") + count("success") >= 1);
    assert!(settled, "no repair attempt; agent log:\n{}", agent.log());
    assert!(
        !has_istio_rules(&hostile),
        "the hostile namespace was programmed (repairs counted: {} success, {} fail); agent log:\n{}",
        count("success"),
        count("fail"),
        agent.log()
    );
    assert_eq!(count("success"), 0, "agent log:\n{}", agent.log());
    assert!(
        agent.log().contains("no process is in the cgroup of pod"),
        "agent log:\n{}",
        agent.log()
    );
    assert!(
        !has_istio_rules(&pod.ns),
        "the ambiguous pod was programmed"
    );

    cgroup.add(pause.pid());
    touch_pod(&node.srv, "victim");
    assert!(
        agent.wait_repaired(),
        "no repair; agent log:\n{}",
        agent.log()
    );
    assert!(
        agent.log().contains("in the pod's cgroup"),
        "agent log:\n{}",
        agent.log()
    );
    assert!(
        !has_istio_rules(&hostile),
        "the hostile namespace was programmed"
    );
    assert_validation_passes(&pod.ns, false, &agent.log());
}

/// A broken pod the plugin leaves alone (here it opts out with `sidecar.istio.io/inject: "false"` yet
/// carries the sidecar and `istio-validation`): repair in place has nothing to program, so it must say so
/// and count a failure, never a repair. Before, it counted `{repair, success}`, wrote the Event "pod
/// detected as broken, repaired" and remembered the UID as repaired, while nothing was programmed and the
/// pod's `istio-validation` kept failing.
#[test]
fn a_broken_pod_the_plugin_does_not_redirect_is_never_counted_repaired() {
    if !require_root() {
        return;
    }
    let node = Node::new(43);
    let pod = node.pod("optout", r#""sidecar.istio.io/inject":"false""#, "", false);
    let cgroup = PodCgroup::new(&pod.uid);
    let pause = Pause::start(&pod.ns);
    cgroup.add(pause.pid());
    node.srv
        .patch_pod("default", "optout", BROKEN_STATUS)
        .unwrap();

    let agent = Agent::start(&node, &[], &[]);
    let count = |result: &str| metric(&scrape(agent.port), "repair", result);
    let settled = wait_until(60, || count("fail") + count("success") >= 1);
    assert!(settled, "no repair attempt; agent log:\n{}", agent.log());
    assert_eq!(count("success"), 0, "agent log:\n{}", agent.log());
    assert!(
        agent.log().contains("sidecar.istio.io/inject=false"),
        "agent log:\n{}",
        agent.log()
    );
    assert!(!has_istio_rules(&pod.ns), "rules programmed");
    let events = node.srv.events();
    assert!(
        !events
            .iter()
            .any(|e| istio_cni::json::str_of(e, "message")
                == Some("pod detected as broken, repaired")),
        "a repair was reported: {events:?}"
    );
    let before = validation_in(&pod.ns, false);
    assert_eq!(
        before.status.code(),
        Some(126),
        "{}",
        crate::support::repair::show(&before)
    );
}

/// A pod repaired in place whose `istio-validation` then fails again, on a run that started after the
/// repair (its rules were there all along: here the pod excludes the probe port 15002 from capture, so
/// the check cannot pass whatever is programmed): the agent does not repair the same UID twice, but
/// says so once in a warning naming the pod. Before, every later failure was a debug line only, after a
/// `{repair, success}` count and a "repaired" Event: the pod sat stuck in its init containers unseen.
#[test]
fn a_pod_still_failing_validation_after_its_repair_is_named() {
    if !require_root() {
        return;
    }
    let node = Node::new(44);
    let pod = node.pod(
        "stuck",
        r#""traffic.sidecar.istio.io/excludeOutboundPorts":"15002""#,
        "",
        false,
    );
    let cgroup = PodCgroup::new(&pod.uid);
    let pause = Pause::start(&pod.ns);
    cgroup.add(pause.pid());
    node.srv
        .patch_pod("default", "stuck", BROKEN_STATUS)
        .unwrap();

    let agent = Agent::start(&node, &[], &[]);
    assert!(
        agent.wait_repaired(),
        "no repair; agent log:\n{}",
        agent.log()
    );
    // The check fails with the rules in place.
    let after = validation_in(&pod.ns, false);
    assert_eq!(
        after.status.code(),
        Some(126),
        "{}",
        crate::support::repair::show(&after)
    );
    let warned = |log: &str| {
        log.lines()
            .filter(|l| l.contains("default/stuck") && l.contains("failed again after"))
            .count()
    };
    let handled = |log: &str| log.matches("pod default/stuck (uid").count();
    // The next run starts (the same failure still its last): not news.
    let before = handled(&agent.log());
    node.srv
        .patch_pod(
            "default",
            "stuck",
            r#"{"status":{"initContainerStatuses":[{"name":"istio-validation",
              "state":{"running":{"startedAt":"2026-01-01T00:00:00Z"}},
              "lastState":{"terminated":{"exitCode":126,"reason":"Error"}},"ready":false,"restartCount":2,"image":"","imageID":""}]}}"#,
        )
        .unwrap();
    touch_pod(&node.srv, "stuck");
    // Seen once the agent logged the pod again (its repair above already logged it once).
    let seen = wait_until(60, || handled(&agent.log()) > before);
    assert!(
        seen,
        "the agent did not see the update; log:\n{}",
        agent.log()
    );
    assert_eq!(warned(&agent.log()), 0, "agent log:\n{}", agent.log());
    // That run fails too, then another: named once.
    for (state, restarts) in [
        (r#"{"terminated":{"exitCode":126,"reason":"Error"}}"#, 2),
        (r#"{"waiting":{"reason":"CrashLoopBackOff"}}"#, 2),
        (r#"{"waiting":{"reason":"CrashLoopBackOff"}}"#, 3),
    ] {
        node.srv
            .patch_pod(
                "default",
                "stuck",
                &format!(
                    r#"{{"status":{{"initContainerStatuses":[{{"name":"istio-validation","state":{state},
                      "lastState":{{"terminated":{{"exitCode":126,"reason":"Error"}}}},"ready":false,
                      "restartCount":{restarts},"image":"","imageID":""}}]}}}}"#
                ),
            )
            .unwrap();
    }
    let named = wait_until(60, || warned(&agent.log()) >= 1);
    assert!(named, "not named; agent log:\n{}", agent.log());
    let before = handled(&agent.log());
    touch_pod(&node.srv, "stuck");
    let seen = wait_until(60, || handled(&agent.log()) > before);
    assert!(
        seen,
        "the agent did not see the update; log:\n{}",
        agent.log()
    );
    let count = |r: &str| metric(&scrape(agent.port), "repair", r);
    assert_eq!((count("success"), count("fail")), (1, 0), "{}", agent.log());
    assert_eq!(warned(&agent.log()), 1, "agent log:\n{}", agent.log());
}
