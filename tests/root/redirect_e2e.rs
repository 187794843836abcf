//! End-to-end sidecar redirection with real traffic (root), one suite for both rule backends: a "node"
//! namespace, a pod namespace wired by Debian's real `ptp` + `host-local`, then our plugin exec'd like a
//! runtime against the HTTPS API double, in iptables mode or in nftables mode (`native_nftables: true`).
//! Listeners inside the pod stand in for Envoy (15001 outbound, 15006 inbound); `SO_ORIGINAL_DST` and
//! transparent sockets prove where each connection landed. Traffic stays between namespaces the test made.
//! The traffic both backends must show takes the backend (nftables mode also needing no iptables at all: no
//! backend record, no iptables rules); iptables' jumps are kept first. What each backend does on re-ADD,
//! CHECK, DEL and bad input is in redirect_rules_e2e.rs.

use crate::support::e2e::*;
use crate::support::traffic::*;
use crate::support::*;
use std::net::SocketAddr;

use Backend::*;

/// Node `n` of backend `b`'s tests (iptables 11.., nftables 51..: each test its own addresses).
fn node(b: Backend, n: u8) -> Node {
    Node::new(n + if b == Nftables { 50 } else { 10 })
}

pub(crate) fn nft_list(pod: &Pod) -> String {
    pod.ns.exec_ok(&["nft", "list", "ruleset"])
}

fn captures_outbound_and_inbound_and_honours_bypasses(b: Backend) {
    if !require_root() {
        return;
    }
    let node = node(b, 1);
    let extra = bypass_annotations(&node);
    let pod = b.pod(&node, "app", &extra, "", false);
    let out = pod.add();
    out.assert_success();
    // The result is the ptp result, passed through.
    assert_json_eq(
        &normalize_json(&out.json()),
        &normalize_json(&pod.ptp_result),
        "ADD result vs ptp result",
    );
    if b == Nftables {
        // No iptables involvement: no backend record, no iptables rules; our inet tables are there.
        assert!(!node.dir.join("run/iptables-backend").exists());
        assert!(!pod.save("iptables-save").contains("ISTIO"));
        let listing = nft_list(&pod);
        assert!(listing.contains("table inet istio-proxy-nat"), "{listing}");
    }

    assert_captures_and_bypasses(&node, &pod);
}

#[test]
fn redirect_mode_captures_outbound_and_inbound_and_honours_bypasses() {
    captures_outbound_and_inbound_and_honours_bypasses(Iptables)
}

#[test]
fn nftables_mode_captures_and_honours_bypasses_without_iptables() {
    captures_outbound_and_inbound_and_honours_bypasses(Nftables)
}

fn tproxy_delivers_inbound_transparently(b: Backend) {
    if !require_root() {
        return;
    }
    let node = node(b, 2);
    let ann = r#""sidecar.istio.io/interceptionMode": "TPROXY""#;
    let pod = b.pod(&node, "tp", ann, "", false);
    pod.add().assert_success();
    let rules = pod.ns.exec_ok(&["ip", "rule"]);
    assert!(rules.contains("fwmark 0x539 lookup 133"), "{rules}");
    if b == Nftables {
        // A second ADD (routing already there) succeeds: upstream fails here with EEXIST.
        pod.add().assert_success();
    }

    assert_tproxy_traffic(&node, &pod);
}

#[test]
fn tproxy_mode_delivers_inbound_transparently() {
    tproxy_delivers_inbound_transparently(Iptables)
}

#[test]
fn nftables_tproxy_delivers_inbound_transparently() {
    tproxy_delivers_inbound_transparently(Nftables)
}

fn dual_stack_captures_ipv6(b: Backend) {
    if !require_root() {
        return;
    }
    let node = node(b, 3);
    let env = r#"{"name": "ISTIO_DUAL_STACK", "value": "true"}"#;
    let pod = b.pod(&node, "v6", "", env, true);
    let out = pod.add();
    out.assert_success();
    assert!(
        out.stderr.contains("IPv4+IPv6") && !out.stderr.contains("gets no rules"),
        "{out}"
    );
    if b == Nftables {
        assert!(nft_list(&pod).contains("ip6 saddr ::6"));
    }
    assert_ipv6_traffic(&node, &pod);
}

/// A dual-stack pod whose proxy has no `ISTIO_DUAL_STACK` gets IPv4 rules only, as upstream decides
/// (plugin.md §4.3). In iptables mode its IPv6 traffic then goes past the proxy: ADD still starts it (as
/// upstream) but its decision line says so, naming the address, instead of a bare "IPv4". nftables mode's
/// family-agnostic rules (inet tables, nftables.md §1.5) take IPv6 outbound to the proxy all the same:
/// nothing is said to bypass.
fn dual_stack_without_the_flag(b: Backend) {
    if !require_root() {
        return;
    }
    let node = node(b, 20);
    let pod = b.pod(&node, "v6-left-out", "", "", true);
    let out = pod.add();
    out.assert_success();
    let ip6 = pod.ip6.expect("pod has an IPv6 address");
    let said = format!(
        "IPv4 only: IPv6 address {ip6} gets no rules and its IPv6 traffic bypasses the proxy"
    );
    assert_eq!(
        out.stderr.contains(&said),
        b == Iptables,
        "{said:?}:\n{out}"
    );
    let envoy_out = listen_in(&pod.ns.path(), "[::]:15001".parse().unwrap(), false);
    let dst6: SocketAddr = format!("[fd00:252:{}::1]:9090", node.idx())
        .parse()
        .unwrap();
    let node_9090 = listen_in(&node.ns.path(), dst6, false);
    let _c = connect_from(&pod.ns.path(), dst6, None).expect("v6 app connect");
    if b == Iptables {
        assert!(
            accept_within(&node_9090).is_some(),
            "IPv6 outbound did not reach its destination directly"
        );
        assert!(accept_within_short(&envoy_out).is_none());
    } else {
        let got = accept_within(&envoy_out).expect("IPv6 outbound did not reach 15001");
        assert_eq!(original_dst(&got), dst6);
    }
}

#[test]
fn dual_stack_without_istio_dual_stack_says_its_ipv6_traffic_bypasses() {
    dual_stack_without_the_flag(Iptables)
}

#[test]
fn nftables_dual_stack_without_istio_dual_stack_still_takes_ipv6_outbound() {
    dual_stack_without_the_flag(Nftables)
}

#[test]
fn dual_stack_pod_gets_ipv6_rules_and_traffic_is_captured() {
    dual_stack_captures_ipv6(Iptables)
}

#[test]
fn nftables_dual_stack_captures_ipv6() {
    dual_stack_captures_ipv6(Nftables)
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
