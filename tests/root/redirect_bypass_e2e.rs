//! Issue 23 M2 and M3 with real traffic, one suite for both rule backends (root): every way around our
//! redirect that the kernel offers inside the pod's namespace. nftables mode: our table flagged dormant, a
//! foreign nat chain at our priority added after ours, notrack at raw priority, notrack at netdev or inet
//! ingress, legacy x_tables rules. iptables mode, with either backend recorded: raw `CT --notrack` in our
//! own backend, raw notrack and a nat DNAT in the *other* backend (legacy x_tables vs iptables-nft), and
//! native nftables notrack at netdev ingress or raw priority; in both modes, a native nftables chain that
//! runs after ours (prerouting above our priority, input, an output route chain) and writes a redirected
//! packet's original port or address back. For each, the traffic really goes past the
//! redirect (the premise), CHECK fails naming it, and re-ADD either converges (dormant: our tables are
//! re-created) or fails naming the foreign rule, never "already in place". Foreign rules that cannot move
//! traffic (counters, logs, accept) leave CHECK and re-ADD alone.

use crate::support::e2e::*;
use crate::support::traffic::*;
use crate::support::*;
use Backend::*;

/// The nodes a test of backend `b` runs on, each with the iptables backend it records: nftables mode one
/// (`nft_idx`, none); iptables mode two (`ipt_idx` with `nft`, the next with `legacy`).
pub(crate) fn runs(b: Backend, nft_idx: u8, ipt_idx: u8) -> Vec<(u8, Option<&'static str>)> {
    match b {
        Nftables => vec![(nft_idx, None)],
        Iptables => vec![(ipt_idx, Some("nft")), (ipt_idx + 1, Some("legacy"))],
    }
}

/// `iptables-<b>` for a backend record name.
pub(crate) fn tool(b: &str) -> String {
    format!("iptables-{b}")
}

/// The ways around the redirect in nftables mode.
fn nft_bypasses(node: &Node) -> Vec<Bypass<'static>> {
    let dst = format!("10.252.{}.1", node.idx());
    vec![
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
        // After ours: a stateless write puts a redirected packet's port (and address) back. With
        // `nf_conntrack_tcp_loose=0` the client's connection then completes with the app, unredirected.
        Bypass {
            what: "a prerouting chain after ours writing the original port back",
            setup: after_ours(
                "pre { type filter hook prerouting priority 0 ; policy accept ; }",
                "pre tcp dport 15006 ct status dnat tcp dport set ct original proto-dst counter",
            ),
            inbound: true,
            names: cmds(&[
                "foreign chain ip after pre (hook prerouting, priority 0, 1 rules) runs after inet istio-proxy-nat prerouting (priority -100) and can undo its redirect: rule 1:",
            ]),
            undo: AFTER_UNDO.map(String::from).to_vec(),
        },
        Bypass {
            what: "an input chain writing the original port back",
            setup: after_ours(
                "in { type filter hook input priority 100 ; }",
                "in tcp dport 15006 ct status dnat tcp dport set ct original proto-dst counter",
            ),
            inbound: true,
            names: cmds(&[
                "foreign chain ip after in (hook input, priority 100, 1 rules) runs after inet istio-proxy-nat",
                "and can undo its redirect: rule 1:",
            ]),
            undo: AFTER_UNDO.map(String::from).to_vec(),
        },
        Bypass {
            what: "an output route chain after ours writing the original destination back",
            setup: after_ours(
                "out { type route hook output priority 0 ; }",
                "out tcp dport 15001 ct status dnat ip daddr set ct original ip daddr tcp dport set ct original proto-dst counter",
            ),
            inbound: false,
            names: cmds(&[
                "foreign chain ip after out (hook output, priority 0, 1 rules) runs after inet istio-proxy-nat output (priority -100) and can undo its redirect: rule 1:",
            ]),
            undo: AFTER_UNDO.map(String::from).to_vec(),
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
    ]
}

/// A table `ip after` with one base chain (`chain`, as `nft add chain` takes it) holding `rule`, with
/// `nf_conntrack_tcp_loose=0` so a packet written back to the original port is not taken for a new flow.
fn after_ours(chain: &str, rule: &str) -> Vec<String> {
    vec![
        "sysctl -qw net.netfilter.nf_conntrack_tcp_loose=0".into(),
        "nft add table ip after".into(),
        format!("nft 'add chain ip after {chain}'"),
        format!("nft add rule ip after {rule}"),
    ]
}

const AFTER_UNDO: [&str; 2] = [
    "nft delete table ip after",
    "sysctl -qw net.netfilter.nf_conntrack_tcp_loose=1",
];

pub(crate) fn iptables_bypasses(node: &Node, ours: &str) -> Vec<Bypass<'static>> {
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
            what: "a native nftables prerouting chain after ours writing the original port back",
            setup: after_ours(
                "pre { type filter hook prerouting priority 0 ; }",
                "pre tcp dport 15006 ct status dnat tcp dport set ct original proto-dst counter",
            ),
            inbound: true,
            names: cmds(&[
                "foreign chain ip after pre (hook prerouting, priority 0, 1 rules) runs after our iptables nat PREROUTING (priority -100) and can undo its redirect: rule 1:",
            ]),
            undo: AFTER_UNDO.map(String::from).to_vec(),
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

/// A native `notrack` put with `nft` into iptables-nft's own raw table: iptables never writes it, and our
/// reader must not take the rule for one that only matches (it reads back as an unknown target).
pub(crate) fn native_in_iptables_nft_raw() -> Bypass<'static> {
    Bypass {
        what: "native nftables notrack inside iptables-nft's raw OUTPUT",
        setup: cmds(&[
            "iptables-nft -t raw -A OUTPUT -j RETURN",
            "nft insert rule ip raw OUTPUT notrack",
        ]),
        inbound: false,
        names: cmds(&[
            "iptables-nft (IPv4) -t raw OUTPUT rule 1: nft expression [ notrack ] -j ?(may act",
        ]),
        undo: cmds(&["iptables-nft -t raw -F OUTPUT"]),
    }
}

/// A native write put with `nft` into iptables-nft's own filter INPUT, which runs after our nat
/// PREROUTING: it puts a redirected packet's original port back (with `nf_conntrack_tcp_loose=0`), so the
/// inbound connection reaches the app. Our backend's tables after our redirect are read too.
pub(crate) fn native_write_in_iptables_nft_input() -> Bypass<'static> {
    Bypass {
        what: "a native write in iptables-nft's filter INPUT putting the original port back",
        setup: cmds(&[
            "sysctl -qw net.netfilter.nf_conntrack_tcp_loose=0",
            "iptables-nft -A INPUT -p udp --dport 1 -j DROP",
            "nft insert rule ip filter INPUT tcp dport 15006 ct status dnat tcp dport set ct original proto-dst counter",
        ]),
        inbound: true,
        names: cmds(&[
            "iptables-nft (IPv4) -t filter INPUT runs after our redirect and can undo it: rule 1:",
        ]),
        undo: cmds(&[
            "iptables-nft -F INPUT",
            "sysctl -qw net.netfilter.nf_conntrack_tcp_loose=1",
        ]),
    }
}

/// `CT --notrack` behind a comment holding a newline and a line that reads as iptables-save's own comment
/// (the node's `-save` text would hide the target): our reader has the rule itself and names its target.
pub(crate) fn newline_in_a_comment() -> Bypass<'static> {
    Bypass {
        what: "raw OUTPUT CT --notrack behind a comment holding a newline",
        setup: cmds(&[
            "iptables-nft -t raw -A OUTPUT -m comment --comment \"$(printf 'a\\n# Generated by x')\" -j CT --notrack",
        ]),
        inbound: false,
        names: cmds(&[
            "iptables-nft (IPv4) -t raw OUTPUT rule 1: -m comment (revision 0, 256 bytes of options) -j CT --notrack",
        ]),
        undo: cmds(&["iptables-nft -t raw -F OUTPUT"]),
    }
}

/// iptables-nft's nat `OUTPUT` made again as a regular chain holding our jump: every rule reads back as
/// it should, but nothing runs it (the rule model has no hook to show; CHECK asks the chains).
pub(crate) fn unhooked_iptables_nft_output() -> Bypass<'static> {
    Bypass {
        what: "iptables-nft's nat OUTPUT re-made as a chain no hook runs",
        setup: cmds(&[
            "nft flush chain ip nat OUTPUT",
            "nft delete chain ip nat OUTPUT",
            "nft add chain ip nat OUTPUT",
            "nft add rule ip nat OUTPUT counter jump ISTIO_OUTPUT",
        ]),
        inbound: false,
        names: cmds(&["chain OUTPUT of table ip nat is not a base chain"]),
        undo: cmds(&[
            "nft flush chain ip nat OUTPUT",
            "nft delete chain ip nat OUTPUT",
            "iptables-nft -t nat -A OUTPUT -j ISTIO_OUTPUT",
        ]),
    }
}

/// `nft -j -f -` of one JSON command list: the CLI's grammar takes no chain name with a space, the kernel
/// (and nft's JSON) does. JSON escapes (`\\n`) reach nft as written.
fn nft_json(cmds: &str) -> String {
    format!("printf '%s' '{{\"nftables\":[{cmds}]}}' | nft -j -f -")
}

/// A chain of iptables-nft's table `table` named `name`, as nft's JSON names it.
fn json_chain(table: &str, name: &str) -> String {
    format!("{{\"chain\":{{\"family\":\"ip\",\"table\":\"{table}\",\"name\":\"{name}\"}}}}")
}

/// Chain names iptables never writes, made with nft's JSON in iptables-nft's tables, that rewrite the
/// `iptables-save` text our reader parses: our jump deleted and a chain named like it holding an empty
/// rule (the text then shows our jump), and raw OUTPUT jumping to a chain named `Z -j ACCEPT` that holds
/// `-j CT --notrack` (the text reads as ACCEPT). CHECK and re-ADD name the chain.
pub(crate) fn odd_chain_names() -> Vec<Bypass<'static>> {
    let fake = json_chain("nat", "OUTPUT -j ISTIO_OUTPUT");
    let z = json_chain("raw", "Z -j ACCEPT");
    vec![
        Bypass {
            what: "our jump deleted, a chain named like it printing it back",
            setup: vec![
                "iptables-nft -t nat -D OUTPUT -j ISTIO_OUTPUT".into(),
                nft_json(&format!(
                    "{{\"add\":{fake}}},{{\"add\":{{\"rule\":{{\"family\":\"ip\",\"table\":\"nat\",\
                     \"chain\":\"OUTPUT -j ISTIO_OUTPUT\",\"expr\":[{{\"counter\":null}}]}}}}}}"
                )),
            ],
            inbound: false,
            names: cmds(&[
                "iptables-nft (IPv4) -t nat chain \"OUTPUT -j ISTIO_OUTPUT\": a chain name iptables refuses",
            ]),
            undo: vec![
                nft_json(&format!("{{\"flush\":{fake}}},{{\"delete\":{fake}}}")),
                "iptables-nft -t nat -A OUTPUT -j ISTIO_OUTPUT".into(),
            ],
        },
        Bypass {
            what: "raw OUTPUT jumping to a chain named `Z -j ACCEPT` that holds CT --notrack",
            setup: vec![
                "iptables-nft -t raw -A OUTPUT -j RETURN".into(),
                "iptables-nft -t raw -F OUTPUT".into(),
                nft_json(&format!(
                    "{{\"add\":{z}}},{{\"add\":{{\"rule\":{{\"family\":\"ip\",\"table\":\"raw\",\
                     \"chain\":\"OUTPUT\",\"expr\":[{{\"jump\":{{\"target\":\"Z -j ACCEPT\"}}}}]}}}}}}"
                )),
                "iptables-nft -t raw -A 'Z -j ACCEPT' -j CT --notrack".into(),
            ],
            inbound: false,
            names: cmds(&["iptables-nft (IPv4) -t raw chain \"Z -j ACCEPT\": a chain name iptables refuses"]),
            undo: vec![
                "iptables-nft -t raw -F OUTPUT".into(),
                nft_json(&format!("{{\"flush\":{z}}},{{\"delete\":{z}}}")),
            ],
        },
    ]
}

/// A native notrack in iptables-nft's raw OUTPUT behind a lookup in a set whose name holds a newline and
/// an `-A` line: printed as text, the rule's notrack would land in another chain (`Y`) nothing hooks.
pub(crate) fn set_name_with_a_line() -> Bypass<'static> {
    let set = "\"family\":\"ip\",\"table\":\"raw\",\"name\":\"x\\n-A Y\"";
    Bypass {
        what: "raw OUTPUT notrack behind a lookup in a set named `x\\n-A Y`",
        setup: vec![
            "iptables-nft -t raw -A OUTPUT -j RETURN".into(),
            "iptables-nft -t raw -F OUTPUT".into(),
            nft_json(&format!(
                "{{\"add\":{{\"set\":{{{set},\"type\":\"inet_proto\"}}}}}},\
                 {{\"add\":{{\"element\":{{{set},\"elem\":[\"tcp\"]}}}}}},\
                 {{\"add\":{{\"rule\":{{\"family\":\"ip\",\"table\":\"raw\",\"chain\":\"OUTPUT\",\
                 \"expr\":[{{\"match\":{{\"op\":\"==\",\"left\":{{\"payload\":{{\"protocol\":\"ip\",\
                 \"field\":\"protocol\"}}}},\"right\":\"@x\\n-A Y\"}}}},{{\"notrack\":null}}]}}}}}}"
            )),
        ],
        inbound: false,
        names: cmds(&["iptables-nft (IPv4) -t raw OUTPUT rule 1: a rule iptables-save text cannot carry"]),
        undo: vec![
            "iptables-nft -t raw -F OUTPUT".into(),
            nft_json(&format!("{{\"delete\":{{\"set\":{{{set}}}}}}}")),
        ],
    }
}

/// Each of the backend's bypasses really goes past the redirect, and CHECK and re-ADD name it.
fn bypasses_fail_check_and_re_add(b: Backend) {
    if !require_root() {
        return;
    }
    for (idx, ours) in runs(b, 62, 64) {
        let node = Node::new(idx);
        let name = match ours {
            Some(r) => {
                node.record_backend(r);
                "bypass"
            }
            None => "foreign",
        };
        let pod = b.pod(&node, name, "", "", false);
        pod.add().assert_success();
        let bypasses = match ours {
            Some(r) => {
                pod.run("CHECK").assert_success();
                let mut list = iptables_bypasses(&node, r);
                if r == "nft" {
                    list.push(native_in_iptables_nft_raw());
                    list.push(unhooked_iptables_nft_output());
                    list.extend(odd_chain_names());
                    list.push(set_name_with_a_line());
                    list.push(native_write_in_iptables_nft_input());
                    list.push(newline_in_a_comment());
                }
                list
            }
            None => nft_bypasses(&node),
        };
        for c in &bypasses {
            eprintln!("--- {}: {}", ours.unwrap_or("nftables"), c.what);
            assert_named_and_refused(&node, &pod, c);
        }
    }
}

#[test]
fn foreign_chains_before_ours_fail_check_and_re_add_naming_them() {
    bypasses_fail_check_and_re_add(Nftables)
}

#[test]
fn bypasses_in_either_backend_or_native_nftables_fail_check_and_re_add() {
    bypasses_fail_check_and_re_add(Iptables)
}

/// Foreign rules that cannot move traffic, in backend `b`'s pod whose iptables backend is `ours`.
pub(crate) fn harmless_rules(ours: Option<&str>) -> Vec<String> {
    let Some(ours) = ours else {
        return cmds(&[
            "nft add table inet watch",
            "nft 'add chain inet watch out { type filter hook output priority -300 ; }'",
            "nft add rule inet watch out counter",
            "nft add rule inet watch out tcp dport 9090 log prefix seen",
            "nft add rule inet watch out accept",
            "nft 'add chain inet watch late { type filter hook output priority 0 ; }'",
            "nft add rule inet watch late notrack",
            "nft 'add chain inet watch in { type filter hook input priority -300 ; }'",
            "nft add rule inet watch in notrack",
            "nft 'add chain inet watch pre-late { type filter hook prerouting priority 100 ; }'",
            "nft add rule inet watch pre-late tcp dport 1 reject",
            "nft add rule inet watch pre-late ct status dnat counter accept",
            "nft 'add chain inet watch post { type nat hook postrouting priority 100 ; }'",
            "nft add rule inet watch post oifname eth0 masquerade",
            "iptables-legacy -t raw -A OUTPUT -j ACCEPT",
            "iptables-legacy -t raw -A PREROUTING -p tcp",
            "iptables-legacy -t filter -A INPUT -p udp --dport 1 -j DROP",
            "iptables-legacy -t mangle -A POSTROUTING -j MARK --set-mark 7",
        ]);
    };
    let other = if ours == "nft" { "legacy" } else { "nft" };
    vec![
        format!("{} -t raw -A OUTPUT -j ACCEPT", tool(ours)),
        format!("{} -t raw -A PREROUTING -p tcp", tool(ours)),
        // After our redirect: a mark (no route lookup follows), a reject, source NAT.
        format!("{} -t filter -A OUTPUT -j MARK --set-mark 7", tool(ours)),
        format!(
            "{} -t mangle -A POSTROUTING -j CONNMARK --set-mark 7",
            tool(ours)
        ),
        format!(
            "{} -t filter -A INPUT -p udp --dport 1 -j REJECT",
            tool(ours)
        ),
        format!("{} -t nat -A POSTROUTING -o eth0 -j MASQUERADE", tool(ours)),
        format!("{} -t raw -A OUTPUT -p tcp -j ACCEPT", tool(other)),
        format!(
            "{} -t filter -A INPUT -p udp --dport 1 -j DROP",
            tool(other)
        ),
        "nft add table inet watch".into(),
        "nft 'add chain inet watch out { type filter hook output priority -300 ; }'".into(),
        "nft add rule inet watch out counter accept".into(),
    ]
}

fn harmless_rules_leave_check_and_re_add_alone(b: Backend) {
    if !require_root() {
        return;
    }
    for (idx, ours) in runs(b, 63, 66) {
        let node = Node::new(idx);
        if let Some(r) = ours {
            node.record_backend(r);
        }
        let pod = b.pod(&node, "harmless", "", "", false);
        pod.add().assert_success();
        for c in harmless_rules(ours) {
            pod.ns.exec_ok(&["sh", "-c", &c]);
        }
        pod.run("CHECK").assert_success();
        assert_re_add(&pod, "AlreadyInPlace");
        let mode = ours.unwrap_or("nftables");
        assert!(outbound_captured(&node, &pod), "{mode}");
        assert!(inbound_captured(&node, &pod), "{mode}");
    }
}

#[test]
fn foreign_rules_that_cannot_move_traffic_leave_check_and_re_add_alone() {
    harmless_rules_leave_check_and_re_add_alone(Nftables)
}

#[test]
fn foreign_rules_that_cannot_move_traffic_pass_in_iptables_mode() {
    harmless_rules_leave_check_and_re_add_alone(Iptables)
}

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

/// iptables mode with iptables-nft recorded: `ip nat` (written by us over netlink in iptables-nft's
/// encoding) flagged dormant with `nft` stops capture while every rule still reads back as ours. CHECK
/// names the dormant table, re-ADD converges and clears the flag, and capture is back.
#[test]
fn a_dormant_iptables_nft_table_fails_check_and_re_add_wakes_it() {
    if !require_root() {
        return;
    }
    let node = Node::new(60);
    node.record_backend("nft");
    let pod = node.pod("ipt-dormant", "", "", false);
    pod.add().assert_success();
    pod.run("CHECK").assert_success();
    assert!(outbound_captured(&node, &pod));
    pod.ns
        .exec_ok(&["nft", "add table ip nat { flags dormant; }"]);
    assert!(
        pod.ns
            .exec_ok(&["nft", "list table ip nat"])
            .contains("flags dormant"),
        "the test's premise: ip nat is dormant"
    );
    assert!(
        !outbound_captured(&node, &pod),
        "a dormant ip nat table should stop capture (the test's premise)"
    );
    assert!(!inbound_captured(&node, &pod));
    let msg = pod.run("CHECK").assert_cni_error(103);
    assert!(msg.contains("table ip nat is dormant"), "{msg}");
    assert_re_add(&pod, "Converged");
    let list = pod.ns.exec_ok(&["nft", "list table ip nat"]);
    assert!(!list.contains("dormant"), "{list}");
    pod.run("CHECK").assert_success();
    assert_re_add(&pod, "AlreadyInPlace");
    assert!(outbound_captured(&node, &pod));
    assert!(inbound_captured(&node, &pod));
}

/// A fresh pod's `ip nat` already made and flagged dormant (by something before us in the chain): the ADD's
/// one batch wakes it, so our rules never land in a table that runs none of them.
#[test]
fn a_fresh_add_into_a_dormant_iptables_nft_table_wakes_it() {
    if !require_root() {
        return;
    }
    let node = Node::new(60);
    node.record_backend("nft");
    let pod = node.pod("ipt-dormant-fresh", "", "", false);
    pod.ns
        .exec_ok(&["nft", "add table ip nat { flags dormant; }"]);
    let out = pod.add();
    out.assert_success();
    assert!(out.stderr.contains("Applied"), "a fresh namespace: {out}");
    let list = pod.ns.exec_ok(&["nft", "list table ip nat"]);
    assert!(!list.contains("dormant"), "{list}");
    pod.run("CHECK").assert_success();
    assert!(outbound_captured(&node, &pod));
    assert!(inbound_captured(&node, &pod));
}

/// `policy drop` set on our nat output chain: every rule reads back as ours, but the chain now drops what
/// it does not redirect. CHECK names the policy, re-ADD converges to accept.
#[test]
fn a_drop_policy_on_our_chain_fails_check_and_re_add_restores_accept() {
    if !require_root() {
        return;
    }
    let node = Node::new(69);
    let pod = node.pod("policy", "", "", false).with_native_nftables();
    pod.add().assert_success();
    pod.ns.exec_ok(&[
        "nft",
        "add chain inet istio-proxy-nat output { type nat hook output priority -100; policy drop; }",
    ]);
    let list = pod.ns.exec_ok(&["nft", "list table inet istio-proxy-nat"]);
    assert!(list.contains("policy drop"), "the test's premise: {list}");
    let msg = pod.run("CHECK").assert_cni_error(103);
    assert!(
        msg.contains("chain inet istio-proxy-nat output has policy drop, want accept"),
        "{msg}"
    );
    assert_re_add(&pod, "Converged");
    let list = pod.ns.exec_ok(&["nft", "list table inet istio-proxy-nat"]);
    assert!(!list.contains("policy drop"), "{list}");
    pod.run("CHECK").assert_success();
    assert_re_add(&pod, "AlreadyInPlace");
    assert!(outbound_captured(&node, &pod));
    assert!(inbound_captured(&node, &pod));
}
