//! The continuous audit (issue 30) on a node run as upstream's default chart runs our image, under a private
//! containerd, with only `AUDIT_INTERVAL` shortened: a running sidecar pod whose nat rules are flushed is
//! found `missing` within a round, repaired in place through the node's own iptables, verified and counted
//! (`RedirectMissing` Event, the repair counter, `redirected` again in the next rounds); a pod that is fine
//! stays `redirected` round after round with its rules untouched and no write to its API object; a pod with
//! a `raw` notrack is found `bypassed` naming the rule, its `RedirectBypassed` Event written, the foreign rule
//! left where it is and nothing repaired.

use cri_e2e::chart::Chart;
use cri_e2e::chart_node::{wait_node, ChartNode};
use cri_e2e::churn::redirected;
use cri_e2e::node::NETNS_COUNT;
use cri_e2e::util::{require_root, run};

/// GET http://<ip>:15014/metrics from the node (the chart's monitoring port); "" if none.
fn metrics(node: &ChartNode, ip: &str) -> String {
    let out = run(
        "nsenter",
        &[
            &format!("--net={}", node.ns.path()),
            "curl",
            "-s",
            "-m",
            "2",
            &format!("http://{ip}:15014/metrics"),
        ],
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The value of `series` (name and labels exactly as exported).
fn value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

/// The pod's rules without `iptables-save`'s dated comment lines.
fn rules(node: &ChartNode, netns: &str) -> String {
    node.rules(netns)
        .lines()
        .filter(|l| !l.starts_with('#'))
        .collect::<Vec<_>>()
        .join("\n")
}

fn pods_in(text: &str, state: &str) -> Option<f64> {
    value(text, &format!("istio_cni_audit_pods{{state=\"{state}\"}}"))
}

fn rounds(text: &str) -> f64 {
    value(text, "istio_cni_audit_rounds_total").unwrap_or(0.0)
}

/// Writes to pods (anything but GET/LIST/WATCH on a pod path) the API double recorded.
fn pod_writes(node: &ChartNode) -> Vec<String> {
    node.srv
        .requests()
        .into_iter()
        .filter(|r| r.path.contains("/pods") && r.method != "GET")
        .map(|r| format!("{} {}", r.method, r.path))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chart_default_audit_finds_a_flushed_pod_missing_and_repairs_it_in_place() {
    if !require_root() {
        return;
    }
    let _g = NETNS_COUNT.read().await;
    let chart = Chart::load("default");
    let settings = chart.config_map("istio-cni-config");
    assert_eq!(
        settings.get("REPAIR_REPAIR_PODS").map(String::as_str),
        Some("true"),
        "the default chart repairs in place"
    );
    let node = ChartNode::new(chart).await;
    let (_sid, _cid, ip) = node.start_agent_with(&[("AUDIT_INTERVAL", "1s")]).await;
    wait_node(&node, "/readyz 200", 60, || node.readyz(&ip) == "200").await;
    wait_node(&node, "pod cache synced", 60, || {
        node.agent_log().contains("pod cache: synced")
    })
    .await;

    // Two sidecar pods started through containerd, redirected by the plugin's ADD, running (pod IP in
    // their API objects).
    let mut pods = Vec::new();
    for name in ["fine", "victim"] {
        let pod = node.sidecar_pod(name);
        let (_id, netns, pod_ip) = node
            .run_pod(&pod)
            .await
            .unwrap_or_else(|e| panic!("RunPodSandbox {name}: {e}\n{}", node.agent_log()));
        assert!(redirected(&node.rules(&netns)), "{name} not redirected");
        node.put_pod(name, &pod.uid, &pod_ip, false);
        pods.push(netns);
    }
    let (fine_ns, victim_ns) = (&pods[0], &pods[1]);
    wait_node(&node, "both pods redirected in a round", 120, || {
        let m = metrics(&node, &ip);
        pods_in(&m, "redirected") == Some(2.0) && pods_in(&m, "missing") == Some(0.0)
    })
    .await;

    // Round after round, the fine pod's rules are untouched and nothing is written.
    let fine_rules = rules(&node, fine_ns);
    let r0 = rounds(&metrics(&node, &ip));
    wait_node(&node, "three more rounds", 120, || {
        rounds(&metrics(&node, &ip)) >= r0 + 3.0
    })
    .await;
    assert_eq!(
        rules(&node, fine_ns),
        fine_rules,
        "the audit rewrote a fine pod's rules"
    );
    assert!(pod_writes(&node).is_empty(), "{:?}", pod_writes(&node));

    // Flushed: found missing, repaired in place (no pod write), counted, redirected again.
    let out = node.in_pod_netns(victim_ns, &["iptables-nft", "-t", "nat", "-F"]);
    assert!(out.status.success(), "flush: {out:?}");
    assert!(!redirected(&node.rules(victim_ns)), "the flush took");
    wait_node(&node, "the victim found missing", 120, || {
        node.agent_log()
            .contains("audit: pod default/victim is missing: ")
    })
    .await;
    wait_node(&node, "the repair counted", 120, || {
        value(
            &metrics(&node, &ip),
            "istio_cni_repair_pods_repaired_total{result=\"success\",type=\"repair\"}",
        ) == Some(1.0)
    })
    .await;
    wait_node(&node, "the victim verified redirected again", 120, || {
        node.agent_log()
            .contains("audit: pod default/victim is redirected")
    })
    .await;
    assert!(
        redirected(&node.rules(victim_ns)),
        "{}",
        node.rules(victim_ns)
    );
    let r1 = rounds(&metrics(&node, &ip));
    wait_node(&node, "both pods redirected in a later round", 120, || {
        let m = metrics(&node, &ip);
        rounds(&m) > r1 && pods_in(&m, "redirected") == Some(2.0)
    })
    .await;
    let events: Vec<String> = node.srv.events().iter().map(|e| format!("{e:?}")).collect();
    assert_eq!(
        events
            .iter()
            .filter(|e| e.contains("RedirectMissing") && e.contains("\"victim\""))
            .count(),
        1,
        "one RedirectMissing Event on the victim: {events:?}"
    );
    assert!(
        !events.iter().any(|e| e.contains("\"fine\"")),
        "no Event on the fine pod: {events:?}"
    );
    assert_eq!(
        rules(&node, fine_ns),
        fine_rules,
        "the audit rewrote a fine pod's rules"
    );
    assert!(
        pod_writes(&node).is_empty(),
        "repair in place writes no pod: {:?}",
        pod_writes(&node)
    );
    let log = node.agent_log();
    assert_eq!(
        log.matches("audit: pod default/victim is missing").count(),
        1,
        "{log}"
    );

    // A raw notrack (conntrack skipped: the nat redirect never sees the traffic): bypassed, named, an
    // Event, the foreign rule left alone and nothing repaired.
    let pod = node.sidecar_pod("notrack");
    let (_id, notrack_ns, pod_ip) = node
        .run_pod(&pod)
        .await
        .unwrap_or_else(|e| panic!("RunPodSandbox notrack: {e}\n{}", node.agent_log()));
    let out = node.in_pod_netns(
        &notrack_ns,
        &[
            "iptables-nft",
            "-t",
            "raw",
            "-A",
            "OUTPUT",
            "-j",
            "CT",
            "--notrack",
        ],
    );
    assert!(out.status.success(), "notrack: {out:?}");
    node.put_pod("notrack", &pod.uid, &pod_ip, false);
    let rule = "iptables-nft (IPv4) -t raw OUTPUT rule 1: -j CT --notrack";
    wait_node(&node, "the notrack pod found bypassed", 120, || {
        node.agent_log()
            .lines()
            .any(|l| l.contains("audit: pod default/notrack is bypassed: ") && l.contains(rule))
    })
    .await;
    wait_node(&node, "its RedirectBypassed Event", 120, || {
        node.srv.events().iter().any(|e| {
            let e = format!("{e:?}");
            e.contains("RedirectBypassed") && e.contains("\"notrack\"") && e.contains(rule)
        })
    })
    .await;
    let r2 = rounds(&metrics(&node, &ip));
    wait_node(&node, "two more rounds", 120, || {
        rounds(&metrics(&node, &ip)) >= r2 + 2.0
    })
    .await;
    assert!(
        rules(&node, &notrack_ns).contains("-A OUTPUT -j CT --notrack"),
        "the foreign rule was removed:\n{}",
        rules(&node, &notrack_ns)
    );
    assert!(redirected(&node.rules(&notrack_ns)), "our rules kept");
    let m = metrics(&node, &ip);
    assert_eq!(
        value(
            &m,
            "istio_cni_repair_pods_repaired_total{result=\"success\",type=\"repair\"}"
        ),
        Some(1.0),
        "only the flushed pod was repaired:\n{m}"
    );
    assert_eq!(pods_in(&m, "bypassed"), Some(1.0), "{m}");
    assert!(pod_writes(&node).is_empty(), "{:?}", pod_writes(&node));
}
