//! What runs after our redirect with real traffic (root), both modes: x_tables' own chains after ours
//! (`TEE` in mangle POSTROUTING sends a copy of the app's traffic out of the pod), and NAT after our jump
//! or in a later nat chain, which binds what our chains let through unredirected (an excluded inbound port
//! redirected to the app's). For each, the premise with traffic, then CHECK and re-ADD name it; once it is
//! gone both pass.

use crate::redirect_bypass_e2e::{runs, tool};
use crate::support::e2e::*;
use crate::support::traffic::*;
use crate::support::*;
use std::net::SocketAddr;
use Backend::*;

/// Packets that reached the node addressed to the pod's 127.0.0.1:15001 (a copy sent out of the pod after
/// our redirect), counted by a chain the test adds to the node's namespace.
fn copies_seen_by_node(node: &Node) -> u64 {
    let list = node.ns.exec_ok(&["nft", "list chain ip seen pre"]);
    list.split("packets ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no counter in {list}"))
}

/// x_tables' own chains after our redirect (here mangle POSTROUTING, of our iptables backend or, in
/// nftables mode, of legacy iptables): `TEE` there sends a copy of every redirected packet, the app's
/// plaintext, out of the pod to a gateway while the original still reaches the proxy. The copy really
/// arrives at the node (the premise), CHECK and re-ADD name the rule, and once it is gone both pass.
fn tee_after_ours_fails_check_and_re_add(b: Backend) {
    if !require_root() {
        return;
    }
    for (idx, ours) in runs(b, 72, 70) {
        let node = Node::new(idx);
        if let Some(r) = ours {
            node.record_backend(r);
        }
        let pod = b.pod(&node, "tee", "", "", false);
        pod.add().assert_success();
        for c in [
            "nft add table ip seen",
            "nft 'add chain ip seen pre { type filter hook prerouting priority -300 ; }'",
            "nft add rule ip seen pre ip daddr 127.0.0.1 tcp dport 15001 counter",
        ] {
            node.ns.exec_ok(&["sh", "-c", c]);
        }
        let (tool_name, named) = match ours {
            Some(r) => (tool(r), format!("{} (IPv4)", tool(r))),
            None => (
                "iptables-legacy".to_string(),
                "legacy iptables (IPv4)".to_string(),
            ),
        };
        let gw = node.gw4(&pod).to_string();
        pod.ns.exec_ok(&[
            tool_name.as_str(),
            "-t",
            "mangle",
            "-A",
            "POSTROUTING",
            "-p",
            "tcp",
            "-j",
            "TEE",
            "--gateway",
            &gw,
        ]);
        assert!(
            outbound_captured(&node, &pod),
            "the original is still captured"
        );
        assert!(
            copies_seen_by_node(&node) > 0,
            "a copy of the redirected packet should leave the pod (the test's premise)"
        );
        let want = format!(
            "{named} -t mangle POSTROUTING runs after our redirect and can undo it: rule 1:"
        );
        let msg = pod.run("CHECK").assert_cni_error(103);
        assert!(msg.contains(&want), "CHECK does not name {want:?}: {msg}");
        let msg = pod.add().assert_cni_error(103);
        assert!(msg.contains(&want), "re-ADD does not name {want:?}: {msg}");
        pod.ns
            .exec_ok(&[tool_name.as_str(), "-t", "mangle", "-F", "POSTROUTING"]);
        pod.run("CHECK").assert_success();
        assert_re_add(&pod, "AlreadyInPlace");
    }
}

#[test]
fn tee_after_ours_in_iptables_mode_fails_check_and_re_add() {
    tee_after_ours_fails_check_and_re_add(Iptables)
}

#[test]
fn legacy_tee_after_ours_in_nftables_mode_fails_check_and_re_add() {
    tee_after_ours_fails_check_and_re_add(Nftables)
}

/// iptables mode: a foreign `REDIRECT` after our jump in nat PREROUTING catches what our chains let
/// through unredirected, here the excluded inbound port 8081, and sends it to the app's 8080: the
/// connection reaches the app past the proxy (the premise) while a direct one to 8080 is captured. CHECK
/// and re-ADD name the rule; once it is gone both pass.
#[test]
fn a_redirect_after_our_jump_of_an_excluded_port_fails_check_and_re_add() {
    nat_redirect_of_an_excluded_port(false, [(74, "nft"), (75, "legacy")]);
}

/// A foreign nat PREROUTING `REDIRECT` of the excluded inbound port 8081 to the app's 8080, on each of our
/// x_tables backends (`runs`: node index and backend), in REDIRECT mode (the rule lands after our jump) or
/// TPROXY mode (no jump of ours in nat PREROUTING: the whole chain runs on what mangle let through). The
/// connection reaches the app past the proxy (the premise); CHECK and re-ADD name the rule; once it is gone
/// both pass.
fn nat_redirect_of_an_excluded_port(tproxy: bool, runs: [(u8, &str); 2]) {
    if !require_root() {
        return;
    }
    for (idx, ours) in runs {
        let node = Node::new(idx);
        node.record_backend(ours);
        let mut ann = bypass_annotations(&node);
        if tproxy {
            ann.push_str(", \"sidecar.istio.io/interceptionMode\": \"TPROXY\"");
        }
        let pod = node.pod("after-jump", &ann, "", false);
        pod.add().assert_success();
        let mine = tool(ours);
        pod.ns.exec_ok(&[
            mine.as_str(),
            "-t",
            "nat",
            "-A",
            "PREROUTING",
            "-p",
            "tcp",
            "--dport",
            "8081",
            "-j",
            "REDIRECT",
            "--to-ports",
            "8080",
        ]);
        let app = listen_in(&pod.ns.path(), SocketAddr::new(pod.ip4, 8080), false);
        let envoy_in = listen_in(&pod.ns.path(), "0.0.0.0:15006".parse().unwrap(), tproxy);
        let _c = connect_from(&node.ns.path(), SocketAddr::new(pod.ip4, 8081), None)
            .expect("inbound 8081");
        assert!(
            accept_within(&app).is_some(),
            "{ours}: the excluded port should reach the app's 8080 (the test's premise)"
        );
        assert!(accept_within_short(&envoy_in).is_none());
        drop((app, envoy_in));
        if !tproxy {
            assert!(
                inbound_captured(&node, &pod),
                "{ours}: 8080 itself is captured"
            );
        }
        // Our jump is nat PREROUTING's rule 1 in REDIRECT mode; in TPROXY mode nat holds nothing of ours.
        let rule = if tproxy { 1 } else { 2 };
        let want = format!(
            "{mine} (IPv4) -t nat PREROUTING after our jump, on traffic ours lets through: rule {rule}: -p tcp -m tcp --dport 8081 -j REDIRECT --to-ports 8080"
        );
        let msg = pod.run("CHECK").assert_cni_error(103);
        assert!(
            msg.contains(&want),
            "{ours}: CHECK does not name {want:?}: {msg}"
        );
        let msg = pod.add().assert_cni_error(103);
        assert!(
            msg.contains(&want),
            "{ours}: re-ADD does not name {want:?}: {msg}"
        );
        pod.ns.exec_ok(&[
            mine.as_str(),
            "-t",
            "nat",
            "-D",
            "PREROUTING",
            &rule.to_string(),
        ]);
        pod.run("CHECK").assert_success();
        assert_re_add(&pod, "AlreadyInPlace");
    }
}

/// A native nftables nat chain after ours at prerouting (priority 0) redirecting the excluded inbound port
/// 8081 to the app's 8080: our chains let 8081 through unbound, so this chain binds it and the
/// connection reaches the app past the proxy (the premise). Both modes: CHECK and re-ADD name it.
fn a_later_nat_chain_re_pointing_an_excluded_port_fails_check_and_re_add(b: Backend) {
    if !require_root() {
        return;
    }
    for (idx, ours) in runs(b, 76, 90) {
        let node = Node::new(idx);
        if let Some(r) = ours {
            node.record_backend(r);
        }
        let pod = b.pod(&node, "late-nat", &bypass_annotations(&node), "", false);
        pod.add().assert_success();
        for c in [
            "nft add table ip late",
            "nft 'add chain ip late pre { type nat hook prerouting priority 0 ; }'",
            "nft add rule ip late pre tcp dport 8081 redirect to :8080",
        ] {
            pod.ns.exec_ok(&["sh", "-c", c]);
        }
        let mode = ours.unwrap_or("nftables");
        let app = listen_in(&pod.ns.path(), SocketAddr::new(pod.ip4, 8080), false);
        let envoy_in = listen_in(&pod.ns.path(), "0.0.0.0:15006".parse().unwrap(), false);
        let _c = connect_from(&node.ns.path(), SocketAddr::new(pod.ip4, 8081), None)
            .expect("inbound 8081");
        assert!(
            accept_within(&app).is_some(),
            "{mode}: the excluded port should reach the app's 8080 (the test's premise)"
        );
        assert!(accept_within_short(&envoy_in).is_none());
        drop((app, envoy_in));
        let want = "foreign chain ip late pre (hook prerouting, priority 0, 1 rules) runs after";
        let msg = pod.run("CHECK").assert_cni_error(103);
        assert!(
            msg.contains(want),
            "{mode}: CHECK does not name {want:?}: {msg}"
        );
        let msg = pod.add().assert_cni_error(103);
        assert!(
            msg.contains(want),
            "{mode}: re-ADD does not name {want:?}: {msg}"
        );
        pod.ns.exec_ok(&["nft", "delete table ip late"]);
        pod.run("CHECK").assert_success();
        assert_re_add(&pod, "AlreadyInPlace");
    }
}

#[test]
fn a_later_nat_chain_re_pointing_an_excluded_port_fails_check_in_nftables_mode() {
    a_later_nat_chain_re_pointing_an_excluded_port_fails_check_and_re_add(Nftables)
}

#[test]
fn a_later_nat_chain_re_pointing_an_excluded_port_fails_check_in_iptables_mode() {
    a_later_nat_chain_re_pointing_an_excluded_port_fails_check_and_re_add(Iptables)
}

/// Appends to iptables-nft's nat PREROUTING, in `pod`'s namespace, one rule iptables never writes: `-p tcp
/// --dport 8081`, an `xt target LOG` and then, in the same rule, a native `redirect to :8080`. Written over
/// netlink as any program with `NET_ADMIN` in the pod can (neither iptables nor nft makes such a rule).
fn append_log_then_redirect(pod: &Pod) {
    use istio_cni::iptables::nft::{batch, compat::Ext, plan::Step, xexpr::XExpr};
    use istio_cni::netfilter::Family;
    use istio_cni::nftables::expr::{Data, Expr};
    use istio_cni::nftables::socket::Socket;
    istio_cni::netns::run_in(&pod.ns.path(), || {
        let n = XExpr::Native;
        let exprs = vec![
            n(Expr::Meta { key: 16, dreg: 1 }), // meta l4proto
            n(Expr::Cmp {
                sreg: 1,
                op: 0,
                data: vec![6],
            }),
            n(Expr::Payload {
                dreg: 1,
                base: 2, // transport header
                offset: 2,
                len: 2,
            }),
            n(Expr::Cmp {
                sreg: 1,
                op: 0,
                data: 8081u16.to_be_bytes().to_vec(),
            }),
            n(Expr::Counter),
            XExpr::Target(Ext {
                name: "LOG".into(),
                rev: 0,
                info: vec![0; 32],
            }),
            n(Expr::Immediate {
                dreg: 1,
                data: Data::Value(8080u16.to_be_bytes().to_vec()),
            }),
            n(Expr::Redir {
                reg_min: 1,
                flags: 2, // NF_NAT_RANGE_PROTO_SPECIFIED
            }),
        ];
        let step = Step::Rule {
            table: "nat".into(),
            chain: "PREROUTING".into(),
            rule: istio_cni::xtables::rule::Rule {
                proto: Some(6),
                ..istio_cni::xtables::rule::Rule::any()
            },
            exprs,
            id: 1,
            append: true,
            after: None,
        };
        let mut s = Socket::open()?;
        let seq0 = s.next_seq(3);
        let b = batch::encode(Family::V4, &[step], None, seq0);
        let failures = s.run_raw(&b.bytes, b.ack_seq)?;
        assert!(
            failures.is_empty(),
            "the crafted rule was refused: {failures:?}"
        );
        Ok(())
    })
    .unwrap();
}

/// iptables-nft: a compatibility target such as `LOG` answers "continue", so the expressions after it in
/// the same rule run too. Here a native `redirect to :8080` after an `xt target LOG`, appended to nat
/// PREROUTING after our jump: it catches the excluded inbound port 8081 our chains let through and sends
/// it to the app's 8080 past the proxy (the premise, with traffic). Read as a `LOG` rule it would pass for
/// harmless; CHECK and re-ADD must name it, and once it is gone both pass.
#[test]
fn an_expression_after_a_log_target_re_pointing_an_excluded_port_fails_check_and_re_add() {
    if !require_root() {
        return;
    }
    let node = Node::new(111);
    node.record_backend("nft");
    let pod = node.pod("after-log", &bypass_annotations(&node), "", false);
    pod.add().assert_success();
    append_log_then_redirect(&pod);
    let app = listen_in(&pod.ns.path(), SocketAddr::new(pod.ip4, 8080), false);
    let envoy_in = listen_in(&pod.ns.path(), "0.0.0.0:15006".parse().unwrap(), false);
    let _c =
        connect_from(&node.ns.path(), SocketAddr::new(pod.ip4, 8081), None).expect("inbound 8081");
    assert!(
        accept_within(&app).is_some(),
        "the excluded port should reach the app's 8080 (the test's premise)"
    );
    assert!(accept_within_short(&envoy_in).is_none());
    drop((app, envoy_in));
    let want = "iptables-nft (IPv4) -t nat PREROUTING after our jump, on traffic ours lets through: rule 2:";
    let msg = pod.run("CHECK").assert_cni_error(103);
    assert!(msg.contains(want), "CHECK does not name {want:?}: {msg}");
    let msg = pod.add().assert_cni_error(103);
    assert!(msg.contains(want), "re-ADD does not name {want:?}: {msg}");
    pod.ns
        .exec_ok(&["iptables-nft", "-t", "nat", "-D", "PREROUTING", "2"]);
    pod.run("CHECK").assert_success();
    assert_re_add(&pod, "AlreadyInPlace");
}

/// TPROXY mode redirects inbound in mangle PREROUTING (priority -150) and puts nothing of ours in nat
/// PREROUTING: what our mangle chains let through (the excluded inbound port 8081) still passes nat
/// PREROUTING, where a foreign `REDIRECT` sends it to the app's 8080 past the proxy (the premise, with
/// traffic). CHECK and re-ADD name it, as in REDIRECT mode; once it is gone both pass.
#[test]
fn tproxy_mode_a_nat_redirect_of_an_excluded_port_fails_check_and_re_add() {
    nat_redirect_of_an_excluded_port(true, [(120, "nft"), (121, "legacy")]);
}
