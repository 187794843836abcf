//! Issue 23 M3 with real traffic, iptables mode, both backends (root): raw `CT --notrack` in our own backend,
//! raw notrack and a nat DNAT in the *other* backend (legacy x_tables vs iptables-nft), and native nftables
//! notrack at netdev ingress. Each really takes traffic past our redirect (the premise); CHECK fails naming
//! it and re-ADD fails naming it instead of answering "already in place". Foreign rules that cannot move
//! traffic leave CHECK and re-ADD alone.

use crate::support::e2e::*;
use crate::support::traffic::*;
use crate::support::*;

/// `iptables-<b>` for a backend record name.
fn tool(b: &str) -> String {
    format!("iptables-{b}")
}

fn bypasses(node: &Node, ours: &str) -> Vec<Bypass<'static>> {
    let other = if ours == "nft" { "legacy" } else { "nft" };
    let (mine, theirs) = (tool(ours), tool(other));
    let dst = format!("10.252.{}.1", node.idx());
    // How the other backend's rules are named: legacy x_tables rules by our x_tables reader, iptables-nft
    // rules as the foreign nf_tables base chains they are.
    let (their_raw, their_nat) = if other == "legacy" {
        (
            "legacy iptables (IPv4) -t raw OUTPUT rule 1: target CT".to_string(),
            "legacy iptables (IPv4) -t nat OUTPUT rule 1: target DNAT".to_string(),
        )
    } else {
        (
            "foreign chain ip raw OUTPUT (hook output, priority -300".to_string(),
            "foreign chain ip nat OUTPUT (hook output, priority -100".to_string(),
        )
    };
    vec![
        Bypass {
            what: "raw CT --notrack in our own backend",
            setup: vec![format!("{mine} -t raw -A OUTPUT -j CT --notrack")],
            inbound: false,
            names: vec![format!("{mine} (IPv4) -t raw OUTPUT rule 1: -j CT --notrack")],
            undo: vec![format!("{mine} -t raw -F OUTPUT")],
        },
        Bypass {
            what: "raw CT --notrack in the other backend",
            setup: vec![format!("{theirs} -t raw -A OUTPUT -j CT --notrack")],
            inbound: false,
            names: vec![their_raw],
            undo: vec![format!("{theirs} -t raw -F OUTPUT")],
        },
        Bypass {
            what: "nat DNAT in the other backend (registered after ours: runs first)",
            setup: vec![format!(
                "{theirs} -t nat -A OUTPUT -p tcp --dport 9090 -j DNAT --to-destination {dst}:9090"
            )],
            inbound: false,
            names: vec![their_nat],
            undo: vec![format!("{theirs} -t nat -F OUTPUT")],
        },
        Bypass {
            what: "native nftables notrack at netdev ingress",
            setup: cmds(&[
                "nft add table netdev edge",
                "nft 'add chain netdev edge in { type filter hook ingress device eth0 priority 0 ; }'",
                "nft add rule netdev edge in notrack",
            ]),
            inbound: true,
            names: cmds(&["foreign chain netdev edge in (hook ingress device eth0, priority 0"]),
            undo: cmds(&["nft delete table netdev edge"]),
        },
        Bypass {
            what: "native nftables notrack at raw priority in prerouting",
            setup: cmds(&[
                "nft add table inet early",
                "nft 'add chain inet early pre { type filter hook prerouting priority -300 ; }'",
                "nft add rule inet early pre tcp dport 8080 notrack",
            ]),
            inbound: true,
            names: cmds(&["foreign chain inet early pre (hook prerouting, priority -300"]),
            undo: cmds(&["nft delete table inet early"]),
        },
        Bypass {
            // In iptables mode no inet table is ours, whatever its name (nftables mode's names were skipped).
            what: "native nftables notrack in an inet table named like nftables mode's",
            setup: cmds(&[
                "nft add table inet istio-proxy-raw",
                "nft 'add chain inet istio-proxy-raw pre { type filter hook prerouting priority -300 ; }'",
                "nft add rule inet istio-proxy-raw pre tcp dport 8080 notrack",
            ]),
            inbound: true,
            names: cmds(&["foreign chain inet istio-proxy-raw pre (hook prerouting, priority -300"]),
            undo: cmds(&["nft delete table inet istio-proxy-raw"]),
        },
    ]
}

#[test]
fn bypasses_in_either_backend_or_native_nftables_fail_check_and_re_add() {
    if !require_root() {
        return;
    }
    for (idx, ours) in [(64, "nft"), (65, "legacy")] {
        let node = Node::new(idx);
        node.record_backend(ours);
        let pod = node.pod("bypass", "", "", false);
        pod.add().assert_success();
        pod.run("CHECK").assert_success();
        for b in &bypasses(&node, ours) {
            eprintln!("--- {ours}: {}", b.what);
            assert_named_and_refused(&node, &pod, b);
        }
    }
}

#[test]
fn foreign_rules_that_cannot_move_traffic_pass_in_iptables_mode() {
    if !require_root() {
        return;
    }
    for (idx, ours) in [(66, "nft"), (67, "legacy")] {
        let other = if ours == "nft" { "legacy" } else { "nft" };
        let node = Node::new(idx);
        node.record_backend(ours);
        let pod = node.pod("harmless", "", "", false);
        pod.add().assert_success();
        for c in [
            format!("{} -t raw -A OUTPUT -j ACCEPT", tool(ours)),
            format!("{} -t raw -A PREROUTING -p tcp", tool(ours)),
            format!("{} -t raw -A OUTPUT -p tcp -j ACCEPT", tool(other)),
            format!(
                "{} -t filter -A INPUT -p udp --dport 1 -j DROP",
                tool(other)
            ),
            "nft add table inet watch".into(),
            "nft 'add chain inet watch out { type filter hook output priority -300 ; }'".into(),
            "nft add rule inet watch out counter accept".into(),
        ] {
            pod.ns.exec_ok(&["sh", "-c", &c]);
        }
        pod.run("CHECK").assert_success();
        assert_re_add(&pod, "AlreadyInPlace");
        assert!(outbound_captured(&node, &pod), "{ours}");
        assert!(inbound_captured(&node, &pod), "{ours}");
    }
}
