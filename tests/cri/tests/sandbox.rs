//! containerd's CRI drives istio-cni as kubelet would: RunPodSandbox (ADD), PodSandboxStatus (verbose: the
//! netns), StopPodSandbox (DEL), RemovePodSandbox (the second DEL, no netns). Each scenario asserts the pod
//! namespace's rules and the runtime's view. Root only.

use cri_e2e::node::{cni_netns, Node, NodeOptions, NETNS_COUNT};
use cri_e2e::util::require_root;
use kube_double::Fault;

fn redirected(rules: &str) -> bool {
    rules.contains("-A PREROUTING -p tcp -j ISTIO_INBOUND")
        && rules.contains("-A OUTPUT -j ISTIO_OUTPUT")
        && rules.contains("-A ISTIO_REDIRECT -p tcp -j REDIRECT --to-ports 15001")
}

fn untouched(rules: &str) -> bool {
    !rules.contains("ISTIO")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sidecar_pod_is_redirected_and_stop_remove_cleans_up() {
    if !require_root() {
        return;
    }
    let _g = NETNS_COUNT.read().await;
    let node = Node::new(NodeOptions::default()).await;
    let pod = node.sidecar_pod("default", "productpage", &[]);
    let (id, netns) = node.run_ready(&pod).await;
    let rules = node.rules(&netns);
    assert!(redirected(&rules), "not redirected:\n{rules}");
    assert_eq!(node.allocated_ips().len(), 1);
    // kubelet's ADD carried the pod's identity: the plugin asked the API for exactly this pod.
    assert!(node
        .srv
        .requests()
        .iter()
        .any(|r| r.path == "/api/v1/namespaces/default/pods/productpage"));
    node.stop_remove(&id, &netns).await;
    assert!(node.allocated_ips().is_empty(), "IP not released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn excluded_namespace_and_pod_without_sidecar_are_left_alone() {
    if !require_root() {
        return;
    }
    let _g = NETNS_COUNT.read().await;
    let node = Node::new(NodeOptions::default()).await;
    let sys = node.sidecar_pod("kube-system", "coredns", &[]);
    let plain = node.add_pod("default", "plain", &[], false);
    let (id1, ns1) = node.run_ready(&sys).await;
    let (id2, ns2) = node.run_ready(&plain).await;
    assert!(untouched(&node.rules(&ns1)), "{}", node.rules(&ns1));
    assert!(untouched(&node.rules(&ns2)), "{}", node.rules(&ns2));
    // The excluded namespace is decided before any API call.
    assert!(!node
        .srv
        .requests()
        .iter()
        .any(|r| r.path.contains("/namespaces/kube-system/")));
    node.stop_remove(&id1, &ns1).await;
    node.stop_remove(&id2, &ns2).await;
}

/// RunPodSandbox fails with `want` in its message, and nothing is left: no sandbox, no netns, no IP.
async fn fails_without_leaks(node: &Node, pod: &cri_e2e::cri::PodSpec, want: &[&str]) -> String {
    let before = cni_netns();
    let err = node
        .cri
        .run_pod(pod)
        .await
        .expect_err("RunPodSandbox should fail");
    for w in want {
        assert!(err.contains(w), "RunPodSandbox error lacks {w:?}: {err}");
    }
    assert!(node.cri.list().await.is_empty(), "a sandbox was left");
    assert_eq!(cni_netns(), before, "a network namespace was left");
    assert!(node.allocated_ips().is_empty(), "an IP was left");
    err
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_errors_fail_run_pod_sandbox_with_our_message_and_leak_nothing() {
    if !require_root() {
        return;
    }
    let _g = NETNS_COUNT.write().await;
    let node = Node::new(NodeOptions::default()).await;
    let pod = node.sidecar_pod("default", "reviews", &[]);

    node.srv.set_fault(Fault::Status(503), None);
    let e = fails_without_leaks(&node, &pod, &["istio-cni", "default/reviews", "503"]).await;
    eprintln!("503: {e}");

    node.srv.set_fault(Fault::Status(403), None);
    let e = fails_without_leaks(&node, &pod, &["istio-cni", "default/reviews", "403"]).await;
    eprintln!("403: {e}");

    node.srv.set_fault(Fault::Hang, None);
    let e = fails_without_leaks(&node, &pod, &["istio-cni", "default/reviews"]).await;
    eprintln!("hang: {e}");

    // The API back: the same pod starts and is redirected.
    node.srv.clear_fault();
    let (id, netns) = node.run_ready(&pod).await;
    assert!(redirected(&node.rules(&netns)));
    node.stop_remove(&id, &netns).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_annotation_fails_naming_the_key() {
    if !require_root() {
        return;
    }
    let _g = NETNS_COUNT.write().await;
    let node = Node::new(NodeOptions::default()).await;
    let key = "traffic.sidecar.istio.io/excludeInboundPorts";
    let pod = node.sidecar_pod("default", "ratings", &[(key, "80,http")]);
    let e = fails_without_leaks(&node, &pod, &[key, "http"]).await;
    eprintln!("bad annotation: {e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_sandboxes_in_parallel_are_all_redirected() {
    if !require_root() {
        return;
    }
    let _g = NETNS_COUNT.read().await;
    let node = Node::new(NodeOptions::default()).await;
    let pods: Vec<_> = (0..10)
        .map(|i| node.sidecar_pod("default", &format!("par-{i}"), &[]))
        .collect();
    let mut set = tokio::task::JoinSet::new();
    for p in &pods {
        let cri = node.cri.clone();
        let p = p.clone();
        set.spawn(async move { (p.name.clone(), cri.run_pod(&p).await) });
    }
    let mut ids = Vec::new();
    while let Some(r) = set.join_next().await {
        let (name, res) = r.expect("join");
        ids.push(res.unwrap_or_else(|e| panic!("RunPodSandbox {name}: {e}")));
    }
    let mut ips = std::collections::HashSet::new();
    for id in &ids {
        let st = node.cri.status(id).await.expect("status");
        assert!(st.ready);
        assert!(ips.insert(st.ip.clone()), "duplicate IP {}", st.ip);
        let netns = st.netns.expect("netns");
        assert!(redirected(&node.rules(&netns)), "{id} not redirected");
    }
    assert_eq!(node.allocated_ips().len(), 10);
    for id in &ids {
        let netns = node.cri.status(id).await.unwrap().netns.unwrap();
        node.stop_remove(id, &netns).await;
    }
    assert!(node.allocated_ips().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_twice_then_remove_twice() {
    if !require_root() {
        return;
    }
    let _g = NETNS_COUNT.read().await;
    let node = Node::new(NodeOptions::default()).await;
    let pod = node.sidecar_pod("default", "twice", &[]);
    let (id, netns) = node.run_ready(&pod).await;
    node.cri.stop(&id).await.expect("first StopPodSandbox");
    node.cri
        .stop(&id)
        .await
        .expect("second StopPodSandbox (DEL again, the netns already gone)");
    assert!(!std::path::Path::new(&netns).exists());
    assert!(node.allocated_ips().is_empty());
    node.cri.remove(&id).await.expect("RemovePodSandbox");
    // kubelet treats "not found" on a repeated remove as done; containerd 1.6 answers OK or NotFound.
    if let Err(e) = node.cri.remove(&id).await {
        assert!(e.contains("not found"), "second RemovePodSandbox: {e}");
    }
    assert!(node.cri.list().await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn containerd_restarted_with_live_pods_then_stop_remove() {
    if !require_root() {
        return;
    }
    let _g = NETNS_COUNT.read().await;
    let mut node = Node::new(NodeOptions::default()).await;
    let pod = node.sidecar_pod("default", "live", &[]);
    let (id, netns) = node.run_ready(&pod).await;
    let before = node.rules(&netns);
    assert!(redirected(&before));

    node.containerd.restart();
    node.cri = cri_e2e::cri::Cri::connect(&node.containerd.socket()).await;

    let st = node.cri.status(&id).await.expect("status after restart");
    assert!(st.ready, "pod not ready after the restart: {st:?}");
    assert_eq!(st.netns.as_deref(), Some(netns.as_str()));
    assert_eq!(
        node.rules(&netns),
        before,
        "rules changed across the restart"
    );
    // A new pod after the restart is redirected as well.
    let pod2 = node.sidecar_pod("default", "after", &[]);
    let (id2, netns2) = node.run_ready(&pod2).await;
    assert!(redirected(&node.rules(&netns2)));
    node.stop_remove(&id, &netns).await;
    node.stop_remove(&id2, &netns2).await;
    assert!(node.allocated_ips().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tproxy_pod_gets_mangle_rules_and_its_routing() {
    if !require_root() {
        return;
    }
    let _g = NETNS_COUNT.read().await;
    let node = Node::new(NodeOptions::default()).await;
    let pod = node.sidecar_pod(
        "default",
        "tproxy",
        &[("sidecar.istio.io/interceptionMode", "TPROXY")],
    );
    let (id, netns) = node.run_ready(&pod).await;
    let rules = node.rules(&netns);
    assert!(
        rules.contains("-j TPROXY") && rules.contains("--tproxy-mark 0x539/0xffffffff"),
        "no TPROXY rules:\n{rules}"
    );
    let ip_rule = cri_e2e::util::run_ok("nsenter", &[&format!("--net={netns}"), "ip", "rule"]);
    assert!(
        ip_rule.contains("fwmark 0x539 lookup 133"),
        "no TPROXY ip rule:\n{ip_rule}"
    );
    let route = cri_e2e::util::run_ok(
        "nsenter",
        &[
            &format!("--net={netns}"),
            "ip",
            "route",
            "show",
            "table",
            "133",
        ],
    );
    assert!(route.contains("local default dev lo"), "{route}");
    node.stop_remove(&id, &netns).await;
}
