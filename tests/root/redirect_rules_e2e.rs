//! Each rule backend's ADD, re-ADD, CHECK and DEL through our plugin exec'd like a runtime (root), on the
//! node and pods of redirect_e2e.rs. iptables mode: re-ADD is a no-op and converges after tampering, the
//! backend is probed once and recorded, ADD fails closed when the pod cannot be read or is invalid, the
//! host's xtables lock and remote NSS do not stop it. nftables mode: the same re-ADD / CHECK / DEL (and a
//! foreign chain before ours named), hostile annotations rejected with nothing programmed,
//! istio-validation passing on its rules, and fifty parallel ADDs.

use super::redirect_e2e::nft_list;
use crate::support::e2e::*;
use crate::support::*;

#[test]
fn re_add_is_a_no_op_check_finds_tampering_and_re_add_converges() {
    if !require_root() {
        return;
    }
    let node = Node::new(14);
    let pod = node.pod("idem", "", "", false);
    let record = node.dir.join("run/iptables-backend");
    assert!(!record.exists());
    pod.add().assert_success();
    // The first ADD on a node without a record probes the backend once and records it for the next ones.
    let recorded = std::fs::read_to_string(&record).expect("the plugin recorded the backend");
    assert!(matches!(recorded.trim(), "nft" | "legacy"), "{recorded}");
    let first = pod.save("iptables-save");
    pod.add().assert_success();
    assert_eq!(
        pod.save("iptables-save"),
        first,
        "a second ADD changed the rules"
    );
    pod.run("CHECK").assert_success();

    pod.ns.exec_ok(&words(
        "iptables -t nat -D ISTIO_OUTPUT -o lo -s 127.0.0.6/32 -j RETURN",
    ));
    let msg = pod.run("CHECK").assert_cni_error(103);
    assert!(
        msg.contains("missing -t nat -A ISTIO_OUTPUT -s 127.0.0.6/32 -o lo -j RETURN"),
        "{msg}"
    );

    pod.add().assert_success();
    assert_eq!(
        pod.save("iptables-save"),
        first,
        "re-ADD did not converge to the original rules"
    );
    pod.run("CHECK").assert_success();
    pod.run("DEL").assert_success();
    pod.run("DEL").assert_success();
}

#[test]
fn fails_closed_when_the_pod_cannot_be_read_or_is_invalid() {
    if !require_root() {
        return;
    }
    let node = Node::new(15);
    // Invalid annotation: ADD fails naming it, nothing is programmed.
    let bad = node.pod(
        "bad",
        r#""traffic.sidecar.istio.io/excludeOutboundIPRanges": "*""#,
        "",
        false,
    );
    let msg = bad.add().assert_cni_error(100);
    assert!(
        msg.contains("traffic.sidecar.istio.io/excludeOutboundIPRanges"),
        "{msg}"
    );
    assert!(
        !bad.save("iptables-save").contains("ISTIO"),
        "rules left after a failed ADD"
    );

    // 403: fails fast, names the cause.
    let pod = node.pod("forbidden", "", "", false);
    node.srv.set_fault(kube_double::Fault::Status(403), None);
    let msg = pod.add().assert_cni_error(101);
    assert!(msg.contains("403"), "{msg}");
    node.srv.clear_fault();

    // API unreachable: retried until the configured deadline, then ADD fails.
    node.srv.set_fault(kube_double::Fault::Status(503), None);
    let msg = pod.add().assert_cni_error(101);
    assert!(msg.contains("503"), "{msg}");
    node.srv.clear_fault();
    assert!(!pod.save("iptables-save").contains("ISTIO"));

    // A 200 that is not the pod (a proxy's page, a misrouted request, a faulty server): every field of a pod
    // is optional, so it would read as "no istio-proxy container"; it is never used as the pod.
    let elsewhere = r#"{"kind":"Pod","metadata":{"namespace":"elsewhere","name":"other","uid":"zzz"},
        "spec":{"containers":[{"name":"app"}]}}"#;
    for (body, says) in [
        (
            "{}",
            "an object without a kind \"/\", not pod default/forbidden",
        ),
        (
            elsewhere,
            "Pod \"elsewhere/other\", not pod default/forbidden",
        ),
    ] {
        node.srv
            .set_fault(kube_double::Fault::Answer(200, body.into()), None);
        let msg = pod.add().assert_cni_error(101);
        assert!(msg.contains(says), "{msg}");
        node.srv.clear_fault();
    }
    assert!(!pod.save("iptables-save").contains("ISTIO"));

    // The runtime starts another UID than the pod the API server has under that name (replaced, or the
    // server behind): retried to the deadline, then refused, never decided from the other pod.
    let mut replaced = node.pod("replaced", "", "", false);
    replaced.uid = "uid-of-the-new-pod".into();
    let msg = replaced.add().assert_cni_error(101);
    assert!(
        msg.contains("the runtime is starting UID \"uid-of-the-new-pod\""),
        "{msg}"
    );
    assert!(!replaced.save("iptables-save").contains("ISTIO"));
    // A static pod: the runtime has the kubelet's UID, which its mirror carries in an annotation.
    let mut mirror = node.pod(
        "static",
        r#""kubernetes.io/config.mirror": "kubelet-uid""#,
        "",
        false,
    );
    mirror.uid = "kubelet-uid".into();
    mirror.add().assert_success();
    assert!(mirror.save("iptables-save").contains("ISTIO_OUTPUT"));

    // The pod does not exist in the API.
    let ghost = node.pod_without_api_object("ghost");
    let out = ghost.add();
    assert_ne!(out.code, 0, "{out}");
    assert!(!ghost.save("iptables-save").contains("ISTIO"));

    // Once the API answers, the same pod is programmed.
    pod.add().assert_success();
    assert!(pod.save("iptables-save").contains("ISTIO_OUTPUT"));
}

#[test]
fn twenty_parallel_adds_succeed_while_the_host_xtables_lock_is_held() {
    if !require_root() {
        return;
    }
    let node = Node::new(16);
    node.record_backend("legacy");
    // Another process holds the host's lock for the whole test (kube-proxy on a busy node).
    let mut holder = std::process::Command::new("flock")
        .args(["/run/xtables.lock", "sleep", "120"])
        .spawn()
        .expect("run flock (util-linux)");
    std::thread::sleep(std::time::Duration::from_millis(200));
    let pods: Vec<Pod> = (0..20)
        .map(|i| node.bare_pod(&format!("par{i}"), i))
        .collect();
    let outs: Vec<PluginOutput> = std::thread::scope(|s| {
        let hs: Vec<_> = pods.iter().map(|p| s.spawn(move || p.add())).collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let _ = holder.kill();
    let _ = holder.wait();
    for (p, o) in pods.iter().zip(&outs) {
        o.assert_success();
        assert!(
            p.save("iptables-legacy-save").contains(":ISTIO_OUTPUT"),
            "{}",
            p.ns.name()
        );
    }
}

#[test]
fn nodes_with_remote_nss_program_iptables_mode_without_asking_them() {
    if !require_root() {
        return;
    }
    // passwd/group through sssd (which is not running here): iptables mode writes `--uid-owner 1337` as the
    // number it is, with no iptables child to resolve it through NSS, so nothing waits on sssd.
    let node = Node::new(17);
    let pod = node.bare_pod("nss", 17);
    let out = pod.add_with_nsswitch("passwd: files sss\ngroup: files sss\n");
    out.assert_success();
    assert!(!out.stderr.contains("NSS"), "{out}");
    assert!(pod.save("iptables-save").contains("--uid-owner 1337"));
}

#[test]
fn nftables_re_add_check_tamper_converge_del() {
    if !require_root() {
        return;
    }
    let node = Node::new(54);
    let pod = node.pod("idem", "", "", false).with_native_nftables();
    pod.add().assert_success();
    let first = pod
        .ns
        .exec_ok(&["nft", "list", "table", "inet", "istio-proxy-nat"]);
    pod.add().assert_success();
    // A no-op re-ADD keeps even the handles.
    let again = pod
        .ns
        .exec_ok(&["nft", "-a", "list", "table", "inet", "istio-proxy-nat"]);
    pod.add().assert_success();
    assert_eq!(
        pod.ns
            .exec_ok(&["nft", "-a", "list", "table", "inet", "istio-proxy-nat"]),
        again
    );
    pod.run("CHECK").assert_success();

    pod.ns
        .nft_delete_rule("istio-proxy-nat", "istio-output", "127.0.0.6");
    let msg = pod.run("CHECK").assert_cni_error(103);
    assert!(
        msg.contains("missing rule: inet istio-proxy-nat istio-output oifname lo ip saddr 127.0.0.6/32 counter return"),
        "{msg}"
    );
    pod.add().assert_success();
    assert_eq!(
        pod.ns
            .exec_ok(&["nft", "list", "table", "inet", "istio-proxy-nat"]),
        first
    );
    pod.run("CHECK").assert_success();

    // A foreign chain hooked before ours is reported by CHECK.
    pod.ns.exec_ok(&["nft", "add table inet early"]);
    pod.ns.exec_ok(&[
        "nft",
        "add chain inet early pre { type nat hook prerouting priority -150 ; }",
    ]);
    pod.ns.exec_ok(&[
        "nft",
        "add rule inet early pre tcp dport 8080 redirect to :8080",
    ]);
    let msg = pod.run("CHECK").assert_cni_error(103);
    assert!(msg.contains("foreign chain inet early pre"), "{msg}");

    pod.run("DEL").assert_success();
    pod.run("DEL").assert_success();
}

#[test]
fn nftables_mode_rejects_hostile_annotations_and_programs_nothing() {
    if !require_root() {
        return;
    }
    let node = Node::new(55);
    for (i, ann) in [
        r#""traffic.sidecar.istio.io/excludeOutboundIPRanges": "*""#,
        r#""traffic.sidecar.istio.io/excludeOutboundPorts": "80 -j ACCEPT""#,
        r#""traffic.sidecar.istio.io/includeOutboundIPRanges": "10.0.0.0/8; flush ruleset""#,
        r#""traffic.sidecar.istio.io/kubevirtInterfaces": "eth0 } ; add table x {""#,
    ]
    .iter()
    .enumerate()
    {
        let pod = node
            .pod(&format!("bad{i}"), ann, "", false)
            .with_native_nftables();
        let msg = pod.add().assert_cni_error(100);
        assert!(msg.contains("traffic.sidecar.istio.io/"), "{msg}");
        assert_eq!(nft_list(&pod).trim(), "", "rules left after a rejected ADD");
    }
}

#[test]
fn istio_validation_passes_on_rules_programmed_in_nftables_mode() {
    if !require_root() {
        return;
    }
    let node = Node::new(56);
    let pod = node.pod("val", "", "", false).with_native_nftables();
    pod.add().assert_success();
    let bin = env!("CARGO_BIN_EXE_istio-cni-node");
    // The injected istio-validation arguments with upstream's `--native-nftables`, started as root (the
    // applet drops to 1337), then directly as uid 1337.
    let mut argv = vec![bin];
    argv.extend(words(
        "istio-validation -p 15001 -z 15006 -u 1337 -m REDIRECT -i * -b * --run-validation \
         --skip-rule-apply --native-nftables --probe-timeout 10s",
    ));
    let o = pod.ns.exec(&argv);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    let mut argv = words("setpriv --reuid 1337 --regid 1337 --clear-groups");
    argv.push(bin);
    argv.extend(words(
        "istio-validation --native-nftables --probe-timeout 10s",
    ));
    let o = pod.ns.exec(&argv);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
}

#[test]
fn fifty_concurrent_plugin_adds_in_nftables_mode() {
    if !require_root() {
        return;
    }
    let node = Node::new(58);
    let pods: Vec<Pod> = (0..50)
        .map(|i| node.bare_pod(&format!("par{i}"), i).with_native_nftables())
        .collect();
    let outs: Vec<PluginOutput> = std::thread::scope(|s| {
        let hs: Vec<_> = pods.iter().map(|p| s.spawn(move || p.add())).collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let first = pods[0]
        .ns
        .exec_ok(&["nft", "list", "table", "inet", "istio-proxy-nat"]);
    assert!(first.contains("chain istio-output"), "{first}");
    for (p, o) in pods.iter().zip(&outs) {
        o.assert_success();
        let l =
            p.ns.exec_ok(&["nft", "list", "table", "inet", "istio-proxy-nat"]);
        assert_eq!(l, first, "{}", p.ns.name());
    }
}
