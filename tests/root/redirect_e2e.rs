//! End-to-end sidecar redirection with real traffic (root): a "node" namespace, a pod namespace wired by
//! Debian's real `ptp` + `host-local`, then our plugin exec'd like a runtime against the HTTPS API double.
//! Listeners inside the pod stand in for Envoy (15001 outbound, 15006 inbound); `SO_ORIGINAL_DST` and
//! transparent sockets prove where each connection landed. Traffic stays between namespaces the test made.

use crate::support::e2e::*;
use crate::support::traffic::*;
use crate::support::*;
use std::net::SocketAddr;

#[test]
fn redirect_mode_captures_outbound_and_inbound_and_honours_bypasses() {
    if !require_root() {
        return;
    }
    let node = Node::new(11);
    let extra = bypass_annotations(&node);
    let pod = node.pod("app", &extra, "", false);
    let out = pod.add();
    out.assert_success();
    // The result is the ptp result, passed through.
    assert_json_eq(
        &normalize_json(&out.json()),
        &normalize_json(&pod.ptp_result),
        "ADD result vs ptp result",
    );

    assert_captures_and_bypasses(&node, &pod);
}

#[test]
fn tproxy_mode_delivers_inbound_transparently() {
    if !require_root() {
        return;
    }
    let node = Node::new(12);
    let pod = node.pod(
        "tp",
        r#""sidecar.istio.io/interceptionMode": "TPROXY""#,
        "",
        false,
    );
    pod.add().assert_success();
    let rules = pod.ns.exec_ok(&["ip", "rule"]);
    assert!(rules.contains("fwmark 0x539 lookup 133"), "{rules}");

    assert_tproxy_traffic(&node, &pod);
}

#[test]
fn dual_stack_pod_gets_ipv6_rules_and_traffic_is_captured() {
    if !require_root() {
        return;
    }
    let node = Node::new(13);
    let env = r#"{"name": "ISTIO_DUAL_STACK", "value": "true"}"#;
    let pod = node.pod("v6", "", env, true);
    pod.add().assert_success();
    assert_ipv6_traffic(&node, &pod);
}

/// Issue 11 item 4 through the binary, both families: `-I OUTPUT 1 -j ACCEPT` and `-I PREROUTING 1 -j ACCEPT`
/// after ADD stop all capture; CHECK must fail naming them, and a re-ADD must put our jumps first again so
/// traffic is captured once more.
#[test]
fn a_rule_inserted_before_our_jumps_fails_check_and_re_add_restores_capture() {
    if !require_root() {
        return;
    }
    let node = Node::new(19);
    let env = r#"{"name": "ISTIO_DUAL_STACK", "value": "true"}"#;
    let pod = node.pod("bypass", "", env, true);
    pod.add().assert_success();
    pod.run("CHECK").assert_success();
    for prog in ["iptables", "ip6tables"] {
        for chain in ["OUTPUT", "PREROUTING"] {
            pod.ns
                .exec_ok(&[prog, "-t", "nat", "-I", chain, "1", "-j", "ACCEPT"]);
        }
    }
    let envoy_out = listen_in(&pod.ns.path(), "0.0.0.0:15001".parse().unwrap(), false);
    let node_9090 = listen_in(&node.ns.path(), "0.0.0.0:9090".parse().unwrap(), false);
    let dst: SocketAddr = "10.252.19.1:9090".parse().unwrap();
    let _c = connect_from(&pod.ns.path(), dst, None).expect("app connect");
    assert!(
        accept_within(&node_9090).is_some(),
        "the inserted ACCEPT should bypass capture (the test's premise)"
    );

    let msg = pod.run("CHECK").assert_cni_error(103);
    for fam in ["IPv4", "IPv6"] {
        for chain in ["OUTPUT", "PREROUTING"] {
            let want = format!("{fam}: unexpected -t nat -A {chain} -j ACCEPT (before our rules");
            assert!(msg.contains(&want), "{want} not in {msg}");
        }
    }
    assert_re_add(&pod, "Converged");
    pod.run("CHECK").assert_success();
    let _c = connect_from(&pod.ns.path(), dst, None).expect("app connect");
    let got = accept_within(&envoy_out).expect("outbound not captured after re-ADD");
    assert_eq!(original_dst(&got), dst);
    drop(envoy_out);
    let envoy_out = listen_in(&pod.ns.path(), "[::]:15001".parse().unwrap(), false);
    let dst6: SocketAddr = "[fd00:252:19::1]:9090".parse().unwrap();
    let _c = connect_from(&pod.ns.path(), dst6, None).expect("v6 app connect");
    let got = accept_within(&envoy_out).expect("IPv6 outbound not captured after re-ADD");
    assert_eq!(original_dst(&got), dst6);
}

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
fn nodes_with_remote_nss_get_isolated_iptables_lookups() {
    if !require_root() {
        return;
    }
    // passwd/group through sssd (which is not running here): the plugin gives its iptables children files-only
    // NSS, so `--uid-owner 1337` resolves without asking sssd, and the rules are programmed.
    let node = Node::new(17);
    let pod = node.bare_pod("nss", 17);
    let out = pod.add_with_nsswitch("passwd: files sss\ngroup: files sss\n");
    out.assert_success();
    assert!(out.stderr.contains("iptables get files-only NSS"), "{out}");
    // With local sources only, no isolation (and no mount-namespace copy per iptables child).
    let plain = node.bare_pod("nss2", 18);
    let out = plain.add_with_nsswitch("passwd: files systemd\ngroup: files systemd\n");
    out.assert_success();
    assert!(!out.stderr.contains("files-only NSS"), "{out}");
    assert!(pod.save("iptables-save").contains("--uid-owner 1337"));
}
