//! End-to-end sidecar redirection in nftables mode (`native_nftables: true`, root): the same node, pods and
//! API double as tests/redirect_e2e.rs, our plugin exec'd like a runtime, real traffic. Proves the netlink
//! backend captures outbound (15001, SO_ORIGINAL_DST) and inbound (15006, REDIRECT and TPROXY), honours uid
//! 1337 and excluded CIDR/port, handles IPv6, needs no iptables at all (no backend record, no iptables
//! rules), and that re-ADD / CHECK / DEL behave.

use crate::support::e2e::*;
use crate::support::traffic::*;
use crate::support::*;

fn nft_list(pod: &Pod) -> String {
    pod.ns.exec_ok(&["nft", "list", "ruleset"])
}

#[test]
fn nftables_mode_captures_and_honours_bypasses_without_iptables() {
    if !require_root() {
        return;
    }
    let node = Node::new(51);
    let extra = bypass_annotations(&node);
    let pod = node.pod("app", &extra, "", false).with_native_nftables();
    let out = pod.add();
    out.assert_success();
    assert_json_eq(
        &normalize_json(&out.json()),
        &normalize_json(&pod.ptp_result),
        "ADD result vs ptp result",
    );
    // No iptables involvement: no backend record, no iptables rules; our inet tables are there.
    assert!(!node.dir.join("run/iptables-backend").exists());
    assert!(!pod.save("iptables-save").contains("ISTIO"));
    let listing = nft_list(&pod);
    assert!(listing.contains("table inet istio-proxy-nat"), "{listing}");

    assert_captures_and_bypasses(&node, &pod);
}

#[test]
fn nftables_tproxy_delivers_inbound_transparently() {
    if !require_root() {
        return;
    }
    let node = Node::new(52);
    let pod = node
        .pod(
            "tp",
            r#""sidecar.istio.io/interceptionMode": "TPROXY""#,
            "",
            false,
        )
        .with_native_nftables();
    pod.add().assert_success();
    let rules = pod.ns.exec_ok(&["ip", "rule"]);
    assert!(rules.contains("fwmark 0x539 lookup 133"), "{rules}");
    // A second ADD (routing already there) succeeds: upstream fails here with EEXIST.
    pod.add().assert_success();

    assert_tproxy_traffic(&node, &pod);
}

#[test]
fn nftables_dual_stack_captures_ipv6() {
    if !require_root() {
        return;
    }
    let node = Node::new(53);
    let env = r#"{"name": "ISTIO_DUAL_STACK", "value": "true"}"#;
    let pod = node.pod("v6", "", env, true).with_native_nftables();
    pod.add().assert_success();
    assert!(nft_list(&pod).contains("ip6 saddr ::6"));
    assert_ipv6_traffic(&node, &pod);
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
