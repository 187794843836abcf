//! Issue 23 M2 with real traffic, nftables mode (root): every way around our redirect that the kernel offers
//! inside the pod's namespace — our table flagged dormant, a foreign nat chain at our priority added after
//! ours, notrack at raw priority, notrack at netdev or inet ingress, legacy x_tables rules. For each, the
//! traffic really goes past the redirect (the premise), CHECK fails naming it, and re-ADD either converges
//! (dormant: our tables are re-created) or fails naming the foreign rule, never "already in place". Foreign
//! rules that cannot move traffic (counters, logs, accept) leave CHECK and re-ADD alone.

use crate::support::e2e::*;
use crate::support::traffic::*;
use crate::support::*;

#[test]
fn a_dormant_table_fails_check_and_re_add_wakes_it() {
    if !require_root() {
        return;
    }
    let node = Node::new(61);
    let pod = node.pod("dormant", "", "", false).with_native_nftables();
    pod.add().assert_success();
    assert!(outbound_captured(&node, &pod));
    pod.ns
        .exec_ok(&["nft", "add table inet istio-proxy-nat { flags dormant; }"]);
    assert!(
        !outbound_captured(&node, &pod),
        "a dormant nat table should stop capture (the test's premise)"
    );
    assert!(!inbound_captured(&node, &pod));
    let msg = pod.run("CHECK").assert_cni_error(103);
    assert!(
        msg.contains("table inet istio-proxy-nat is dormant"),
        "{msg}"
    );
    assert_re_add(&pod, "Converged");
    pod.run("CHECK").assert_success();
    assert!(outbound_captured(&node, &pod));
    assert!(inbound_captured(&node, &pod));
}

#[test]
fn foreign_chains_before_ours_fail_check_and_re_add_naming_them() {
    if !require_root() {
        return;
    }
    let node = Node::new(62);
    let pod = node.pod("foreign", "", "", false).with_native_nftables();
    pod.add().assert_success();
    let dst = format!("10.252.{}.1", node.idx());
    let bypasses = [
        Bypass {
            what: "a foreign nat chain at our priority, added after ours (runs first)",
            setup: vec![
                "nft add table ip sneaky".into(),
                "nft 'add chain ip sneaky out { type nat hook output priority -100 ; }'".into(),
                format!("nft add rule ip sneaky out ip daddr {dst} tcp dport 9090 dnat to {dst}:9090"),
            ],
            inbound: false,
            names: cmds(&["foreign chain ip sneaky out (hook output, priority -100"]),
            undo: cmds(&["nft delete table ip sneaky"]),
        },
        Bypass {
            what: "notrack at raw priority",
            setup: cmds(&[
                "nft add table ip rawish",
                "nft 'add chain ip rawish out { type filter hook output priority -300 ; }'",
                "nft add rule ip rawish out notrack",
            ]),
            inbound: false,
            names: cmds(&["foreign chain ip rawish out (hook output, priority -300", "[ notrack ]"]),
            undo: cmds(&["nft delete table ip rawish"]),
        },
        Bypass {
            what: "notrack at netdev ingress on the pod's interface",
            setup: cmds(&[
                "nft add table netdev edge",
                "nft 'add chain netdev edge in { type filter hook ingress device eth0 priority 0 ; }'",
                "nft add rule netdev edge in notrack",
            ]),
            inbound: true,
            names: cmds(&["foreign chain netdev edge in (hook ingress device eth0, priority 0", "[ notrack ]"]),
            undo: cmds(&["nft delete table netdev edge"]),
        },
        Bypass {
            what: "notrack at inet ingress",
            setup: cmds(&[
                "nft add table inet edge",
                "nft 'add chain inet edge in { type filter hook ingress device eth0 priority 0 ; }'",
                "nft add rule inet edge in notrack",
            ]),
            inbound: true,
            names: cmds(&["foreign chain inet edge in (hook ingress device eth0, priority 0"]),
            undo: cmds(&["nft delete table inet edge"]),
        },
        Bypass {
            what: "a jump from a harmless-looking base chain to a chain that does notrack",
            setup: cmds(&[
                "nft add table ip hop",
                "nft add chain ip hop deeper",
                "nft add rule ip hop deeper notrack",
                "nft 'add chain ip hop out { type filter hook output priority -300 ; }'",
                "nft add rule ip hop out counter jump deeper",
            ]),
            inbound: false,
            names: cmds(&["foreign chain ip hop out", "(via ip hop deeper)", "[ notrack ]"]),
            undo: cmds(&["nft delete table ip hop"]),
        },
        Bypass {
            what: "legacy x_tables raw notrack",
            setup: cmds(&["iptables-legacy -t raw -A OUTPUT -j CT --notrack"]),
            inbound: false,
            names: cmds(&["legacy iptables (IPv4) -t raw OUTPUT rule 1: target CT"]),
            undo: cmds(&["iptables-legacy -t raw -F OUTPUT"]),
        },
        Bypass {
            what: "legacy x_tables nat DNAT (registered after ours: runs first)",
            setup: vec![format!(
                "iptables-legacy -t nat -A OUTPUT -p tcp --dport 9090 -j DNAT --to-destination {dst}:9090"
            )],
            inbound: false,
            names: cmds(&["legacy iptables (IPv4) -t nat OUTPUT rule 1: target DNAT"]),
            undo: cmds(&["iptables-legacy -t nat -F OUTPUT"]),
        },
    ];
    for b in &bypasses {
        assert_named_and_refused(&node, &pod, b);
    }
}

#[test]
fn foreign_rules_that_cannot_move_traffic_leave_check_and_re_add_alone() {
    if !require_root() {
        return;
    }
    let node = Node::new(63);
    let pod = node.pod("harmless", "", "", false).with_native_nftables();
    pod.add().assert_success();
    for c in [
        "nft add table inet watch",
        "nft 'add chain inet watch out { type filter hook output priority -300 ; }'",
        "nft add rule inet watch out counter",
        "nft add rule inet watch out tcp dport 9090 log prefix seen",
        "nft add rule inet watch out accept",
        "nft 'add chain inet watch late { type filter hook output priority 0 ; }'",
        "nft add rule inet watch late notrack",
        "nft 'add chain inet watch in { type filter hook input priority -300 ; }'",
        "nft add rule inet watch in notrack",
        "iptables-legacy -t raw -A OUTPUT -j ACCEPT",
        "iptables-legacy -t raw -A PREROUTING -p tcp",
        "iptables-legacy -t filter -A INPUT -p udp --dport 1 -j DROP",
    ] {
        pod.ns.exec_ok(&["sh", "-c", c]);
    }
    pod.run("CHECK").assert_success();
    assert_re_add(&pod, "AlreadyInPlace");
    assert!(outbound_captured(&node, &pod));
    assert!(inbound_captured(&node, &pod));
}
