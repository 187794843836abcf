//! A fresh ADD (none of our rules in the pod's namespace yet) into a namespace where something earlier in
//! the CNI chain already left rules that take traffic past our redirect (root, real traffic, both modes and
//! both x_tables backends). The ADD fails naming the rule, as a re-ADD does, and leaves our rules in
//! place: with the rule the connection still goes past them (the premise), once it is gone it is captured,
//! CHECK passes and a re-ADD finds everything in place. Rules that cannot move traffic do not fail it, and
//! an empty namespace is programmed as before.

use crate::redirect_bypass_e2e::{runs, tool};
use crate::support::e2e::*;
use crate::support::traffic::*;
use crate::support::*;
use Backend::*;

/// Rules put in before the first ADD that take traffic past the redirect, for a pod of mode `b` whose
/// iptables backend (iptables mode) is `ours`.
fn bypasses(node: &Node, ours: Option<&str>) -> Vec<Bypass<'static>> {
    let dst = format!("10.252.{}.1", node.idx());
    let Some(ours) = ours else {
        return vec![
            Bypass {
                what: "a native nftables chain hooked before ours (raw priority) doing notrack",
                setup: cmds(&[
                    "nft add table ip rawish",
                    "nft 'add chain ip rawish out { type filter hook output priority -300 ; }'",
                    "nft add rule ip rawish out accept",
                    "nft insert rule ip rawish out notrack",
                ]),
                inbound: false,
                names: cmds(&[
                    "foreign chain ip rawish out (hook output, priority -300",
                    "[ notrack ]",
                ]),
                undo: cmds(&["nft delete table ip rawish"]),
            },
            Bypass {
                what: "a native nftables nat chain hooked before ours binding the connection",
                setup: vec![
                    "nft add table ip sneaky".into(),
                    "nft 'add chain ip sneaky out { type nat hook output priority -110 ; }'".into(),
                    format!(
                        "nft add rule ip sneaky out ip daddr {dst} tcp dport 9090 dnat to {dst}:9090"
                    ),
                ],
                inbound: false,
                names: cmds(&["foreign chain ip sneaky out (hook output, priority -110"]),
                undo: cmds(&["nft delete table ip sneaky"]),
            },
            Bypass {
                what: "legacy x_tables raw notrack",
                setup: cmds(&["iptables-legacy -t raw -A OUTPUT -j CT --notrack"]),
                inbound: false,
                names: cmds(&["legacy iptables (IPv4) -t raw OUTPUT rule 1: target CT"]),
                undo: cmds(&["iptables-legacy -t raw -F OUTPUT"]),
            },
        ];
    };
    let other = if ours == "nft" { "legacy" } else { "nft" };
    let (mine, theirs) = (tool(ours), tool(other));
    let their_raw = if other == "legacy" {
        "legacy iptables (IPv4) -t raw OUTPUT rule 1: target CT"
    } else {
        "foreign chain ip raw OUTPUT (hook output, priority -300"
    };
    vec![
        Bypass {
            what: "raw CT --notrack in our own backend",
            setup: vec![format!("{mine} -t raw -A OUTPUT -j CT --notrack")],
            inbound: false,
            names: vec![format!(
                "{mine} (IPv4) -t raw OUTPUT rule 1: -j CT --notrack"
            )],
            undo: vec![format!("{mine} -t raw -F OUTPUT")],
        },
        Bypass {
            what: "raw CT --notrack in the other backend",
            setup: vec![format!("{theirs} -t raw -A OUTPUT -j CT --notrack")],
            inbound: false,
            names: vec![their_raw.to_string()],
            undo: vec![format!("{theirs} -t raw -F OUTPUT")],
        },
        Bypass {
            what: "a native nftables chain hooked before ours doing notrack (inbound)",
            setup: cmds(&[
                "nft add table inet early",
                "nft 'add chain inet early pre { type filter hook prerouting priority -300 ; }'",
                "nft add rule inet early pre tcp dport 8080 notrack",
            ]),
            inbound: true,
            names: cmds(&["foreign chain inet early pre (hook prerouting, priority -300"]),
            undo: cmds(&["nft delete table inet early"]),
        },
    ]
}

/// Each bypass, in a pod of its own made before the first ADD: the ADD fails naming it (the code re-ADD
/// gives), traffic still goes past our rules it left in place, and once it is gone all is well.
fn fresh_add_fails_naming_a_bypass(b: Backend) {
    if !require_root() {
        return;
    }
    for (idx, ours) in runs(b, 170, 171) {
        let node = Node::new(idx);
        if let Some(r) = ours {
            node.record_backend(r);
        }
        fresh_adds_fail_naming_each_bypass(&node, b, ours);
    }
}

/// [`fresh_add_fails_naming_a_bypass`] on `node`, whose pods are of mode `b` and (iptables mode) whose
/// backend record is `ours`.
fn fresh_adds_fail_naming_each_bypass(node: &Node, b: Backend, ours: Option<&str>) {
    let mode = ours.unwrap_or("nftables");
    for (i, c) in bypasses(node, ours).iter().enumerate() {
        eprintln!("--- {mode}: {}", c.what);
        let pod = b.pod(node, &format!("fresh-bypass-{i}"), "", "", false);
        sh_in(&pod, &c.setup);
        let msg = pod.add().assert_cni_error(103);
        for n in &c.names {
            assert!(
                msg.contains(n.as_str()),
                "{mode}: {}: the fresh ADD does not name {n:?}: {msg}",
                c.what
            );
        }
        assert!(
            msg.contains("traffic can bypass the redirection"),
            "{mode}: {}: re-ADD's message: {msg}",
            c.what
        );
        assert!(
            !captured(node, &pod, c.inbound),
            "{mode}: {}: with the rule, traffic should go past our rules (the test's premise)",
            c.what
        );
        sh_in(&pod, &c.undo);
        assert!(
            captured(node, &pod, c.inbound),
            "{mode}: {}: the failed ADD should have left our rules in place",
            c.what
        );
        pod.run("CHECK").assert_success();
        assert_re_add(&pod, "AlreadyInPlace");
    }
}

#[test]
fn a_fresh_add_over_a_bypass_fails_naming_it_in_nftables_mode() {
    fresh_add_fails_naming_a_bypass(Nftables)
}

#[test]
fn a_fresh_add_over_a_bypass_fails_naming_it_in_iptables_mode() {
    fresh_add_fails_naming_a_bypass(Iptables)
}

/// The same with IPTABLES_NODE_BINARIES: the node's `iptables-nft-restore` / `iptables-legacy-restore`
/// writes our rules, and the fresh ADD's survey reads the namespace as CHECK does with them (the node's
/// `-save` text checked against our own read, the other backend, native nf_tables).
#[test]
fn a_fresh_add_over_a_bypass_fails_naming_it_with_the_node_binaries() {
    if !require_root() {
        return;
    }
    for (idx, ours) in [(178, "nft"), (179, "legacy")] {
        let node = Node::new(idx);
        node.record_backend(ours);
        node.record_node_binaries();
        fresh_adds_fail_naming_each_bypass(&node, Iptables, Some(ours));
    }
}

/// Foreign tables whose rules cannot move traffic (a filter table with a LOG rule, a chain before ours
/// that logs and accepts), put in before the first ADD.
fn harmless(ours: Option<&str>) -> Vec<String> {
    let mut v = cmds(&[
        "nft add table inet watch",
        "nft 'add chain inet watch out { type filter hook output priority -300 ; }'",
        "nft add rule inet watch out tcp dport 9090 log prefix seen accept",
    ]);
    match ours {
        None => v.push("iptables-legacy -A OUTPUT -j LOG".into()),
        Some(r) => {
            let other = if r == "nft" { "legacy" } else { "nft" };
            v.push(format!("{} -A OUTPUT -j LOG", tool(r)));
            v.push(format!("{} -t raw -A OUTPUT -j LOG", tool(other)));
        }
    }
    v
}

/// A harmless foreign table does not fail a fresh ADD, and an empty namespace is programmed as before
/// (both `Applied`, captured both ways, CHECK passes).
fn fresh_add_passes_harmless_tables(b: Backend) {
    if !require_root() {
        return;
    }
    for (idx, ours) in runs(b, 173, 174) {
        let node = Node::new(idx);
        if let Some(r) = ours {
            node.record_backend(r);
        }
        let mode = ours.unwrap_or("nftables");
        for (name, setup) in [("fresh-empty", vec![]), ("fresh-harmless", harmless(ours))] {
            let pod = b.pod(&node, name, "", "", false);
            sh_in(&pod, &setup);
            let out = pod.add();
            out.assert_success();
            assert!(out.stderr.contains("Applied"), "{mode} {name}: {out}");
            assert!(outbound_captured(&node, &pod), "{mode} {name}");
            assert!(inbound_captured(&node, &pod), "{mode} {name}");
            pod.run("CHECK").assert_success();
        }
    }
}

#[test]
fn a_fresh_add_passes_an_empty_namespace_and_harmless_tables_in_nftables_mode() {
    fresh_add_passes_harmless_tables(Nftables)
}

#[test]
fn a_fresh_add_passes_an_empty_namespace_and_harmless_tables_in_iptables_mode() {
    fresh_add_passes_harmless_tables(Iptables)
}

/// A re-ADD where one family is in place and the other is written fresh (a dual-stack pod whose IPv6 rules
/// are gone): the fresh family's own tables are read as a fresh ADD's are. Here a foreign
/// `ip6tables -t nat -A OUTPUT -p tcp -j ACCEPT` sits before the jump our fresh IPv6 write appends: IPv4 is
/// in place, so only the other backend and nf_tables were read before, and the re-ADD succeeded with the
/// pod's IPv6 outbound past the proxy. Both x_tables backends.
#[test]
fn a_re_add_writing_one_family_fresh_reads_that_familys_tables() {
    if !require_root() {
        return;
    }
    for (idx, ours) in [(176, "nft"), (177, "legacy")] {
        let node = Node::new(idx);
        node.record_backend(ours);
        let env = r#"{"name": "ISTIO_DUAL_STACK", "value": "true"}"#;
        let pod = node.pod("half-fresh", "", env, true);
        pod.add().assert_success();
        let six = format!("ip6tables-{ours}");
        sh_in(
            &pod,
            &[
                format!("{six} -t nat -F"),
                format!("{six} -t nat -X"),
                format!("{six} -t nat -A OUTPUT -p tcp -j ACCEPT"),
            ],
        );
        let msg = pod.add().assert_cni_error(103);
        assert!(
            msg.contains("IPv6") && msg.contains("-j ACCEPT"),
            "{ours}: the re-ADD does not name the IPv6 rule before our jump: {msg}"
        );
        sh_in(&pod, &[format!("{six} -t nat -D OUTPUT 1")]);
        pod.run("CHECK").assert_success();
        assert_re_add(&pod, "AlreadyInPlace");
    }
}
