//! IPTABLES_NODE_BINARIES with iptables-nft, recorded as `nft` or as `plain` (root): the node's
//! `iptables-nft-restore` (or its unsuffixed `iptables-restore`, iptables-nft here) writes our rules, and
//! the plugin verifies them as it verifies its own writes. iptables-nft sends no table flags, so an
//! `ip nat` / `ip6 nat` table flagged dormant before ADD (by something before us in the CNI chain) stays
//! dormant after the node's tool wrote our rules into it: our rules read back complete, yet none of them
//! runs. ADD wakes such a table as our own batch does (and then reads it back), and CHECK names one
//! flagged dormant later. Real traffic says whether the pod is redirected.

use crate::support::e2e::*;
use crate::support::traffic::*;
use crate::support::*;

/// A node recording iptables-nft and IPTABLES_NODE_BINARIES.
fn node_with_binaries(idx: u8) -> Node {
    let node = Node::new(idx);
    node.record_backend("nft");
    node.record_node_binaries();
    node
}

/// The nodes a test runs on, each recording IPTABLES_NODE_BINARIES and one backend, from `idx` on: `nft`,
/// and `plain` (the node's unsuffixed iptables, which is iptables-nft here: the premise is checked).
fn nodes_with_binaries(idx: u8) -> Vec<Node> {
    let out = std::process::Command::new("iptables")
        .arg("--version")
        .output()
        .unwrap();
    let version = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(version.contains("nf_tables"), "the premise: {version}");
    ["nft", "plain"]
        .into_iter()
        .zip(idx..)
        .map(|(backend, idx)| {
            let node = node_with_binaries(idx);
            node.record_backend(backend);
            node
        })
        .collect()
}

/// A dual-stack sidecar pod (ISTIO_DUAL_STACK: IPv6 rules too).
fn dual_stack_pod<'a>(node: &'a Node, name: &str) -> Pod<'a> {
    let env = r#"{"name": "ISTIO_DUAL_STACK", "value": "true"}"#;
    node.pod(name, "", env, true)
}

/// Flags the pod's `ip nat` and `ip6 nat` dormant (made if absent), and checks that they are.
fn make_dormant(pod: &Pod) {
    for fam in ["ip", "ip6"] {
        pod.ns
            .exec_ok(&["nft", &format!("add table {fam} nat {{ flags dormant; }}")]);
        let list = pod.ns.exec_ok(&["nft", &format!("list table {fam} nat")]);
        assert!(list.contains("flags dormant"), "the premise: {list}");
    }
}

/// Neither `ip nat` nor `ip6 nat` is dormant.
fn assert_awake(pod: &Pod) {
    for fam in ["ip", "ip6"] {
        let list = pod.ns.exec_ok(&["nft", &format!("list table {fam} nat")]);
        assert!(!list.contains("dormant"), "{fam} nat: {list}");
    }
}

/// The pod's outbound and inbound traffic is captured, IPv4 and IPv6.
fn assert_captured(node: &Node, pod: &Pod) {
    assert!(outbound_captured(node, pod), "IPv4 outbound not captured");
    assert!(inbound_captured(node, pod), "IPv4 inbound not captured");
    assert_ipv6_traffic(node, pod);
}

#[test]
fn node_binaries_fresh_add_into_dormant_nat_tables_wakes_them() {
    if !require_root() {
        return;
    }
    for node in nodes_with_binaries(120) {
        let pod = dual_stack_pod(&node, "nb-dormant-fresh");
        make_dormant(&pod);
        let out = pod.add();
        out.assert_success();
        assert!(out.stderr.contains("Applied"), "a fresh namespace: {out}");
        assert_awake(&pod);
        pod.run("CHECK").assert_success();
        assert_captured(&node, &pod);
    }
}

#[test]
fn node_binaries_check_names_dormant_nat_tables_and_re_add_wakes_them() {
    if !require_root() {
        return;
    }
    for node in nodes_with_binaries(122) {
        let pod = dual_stack_pod(&node, "nb-dormant");
        pod.add().assert_success();
        pod.run("CHECK").assert_success();
        assert_captured(&node, &pod);
        make_dormant(&pod);
        assert!(
            !outbound_captured(&node, &pod),
            "a dormant ip nat table should stop capture (the test's premise)"
        );
        let msg = pod.run("CHECK").assert_cni_error(103);
        for fam in ["ip", "ip6"] {
            let named = format!("table {fam} nat is dormant");
            assert!(msg.contains(&named), "{msg}");
        }
        assert_re_add(&pod, "Converged");
        assert_awake(&pod);
        pod.run("CHECK").assert_success();
        assert_re_add(&pod, "AlreadyInPlace");
        assert_captured(&node, &pod);
    }
}

/// What iptables-nft-save cannot show, each really going past the redirect: a native `notrack` in raw
/// OUTPUT (alone, or behind a lookup in a set named `x\n-A Y`) and a native write in filter INPUT make the
/// node's `-save` leave that table out (it prints a comment instead, exit status 0).
fn left_out_of_save() -> Vec<Bypass<'static>> {
    use crate::redirect_bypass_e2e::*;
    let left_out = |b: Bypass<'static>, table: &str| {
        Bypass {
        names: vec![format!(
            "iptables-nft (IPv4): \"# Table `{table}' is incompatible, use 'nft' tool.\": iptables-save \
             leaves out what it cannot list there"
        )],
        ..b
    }
    };
    vec![
        left_out(native_in_iptables_nft_raw(), "raw"),
        left_out(set_name_with_a_line(), "raw"),
        left_out(native_write_in_iptables_nft_input(), "filter"),
    ]
}

/// A rule whose comment holds a newline ([`crate::redirect_bypass_e2e::newline_in_a_comment`]):
/// iptables-save prints it as it is (quoted, not escaped), so the rest of the rule, its `CT --notrack`,
/// lands on a line that reads as one of `-save`'s own comments and would not be read at all. And
/// [`newline_in_a_recent_name`] and [`table_in_a_recent_name`], printed unquoted.
fn newline_in_a_string() -> Vec<Bypass<'static>> {
    vec![
        Bypass {
            names: cmds(&[
                "iptables-nft (IPv4) -t raw: \"-A OUTPUT -m comment --comment \\\"a\"",
                "a quoted string that does not end on its line",
            ]),
            ..crate::redirect_bypass_e2e::newline_in_a_comment()
        },
        newline_in_a_recent_name("iptables-nft"),
        table_in_a_recent_name("iptables-nft"),
    ]
}

/// A `-m recent` list named `x\nCOMMIT\n# Completed on` (the kernel and `tool` take a newline there, and
/// `-save` prints the name unquoted) in front of raw OUTPUT's `CT --notrack`: the text reads as the rule
/// `-m recent --set --name x` closing the table, then a `# Completed on` line holding the rest of the rule,
/// the notrack, and then the table's own `COMMIT` and `# Completed on`.
fn newline_in_a_recent_name(tool: &str) -> Bypass<'static> {
    Bypass {
        what: "raw OUTPUT CT --notrack behind a recent list whose name holds a newline and COMMIT",
        setup: vec![format!(
            "{tool} -t raw -A OUTPUT -m recent --name \"$(printf 'x\\nCOMMIT\\n# Completed on')\" --set \
             -j CT --notrack"
        )],
        inbound: false,
        names: vec![
            format!("{tool} (IPv4) -t raw: \"COMMIT\": no table is open"),
            "the table cannot be read as iptables-save text".to_string(),
        ],
        undo: vec![format!("{tool} -t raw -F OUTPUT")],
    }
}

/// [`newline_in_a_recent_name`] with a name that prints a whole table of its own after `COMMIT` (comments
/// with any date, `*security`, a chain, and a rule that the rest of ours, its `CT --notrack`, ends): the
/// text has iptables-save's structure, but lists a table the kernel does not hold.
fn table_in_a_recent_name(tool: &str) -> Bypass<'static> {
    let date = "Mon Nov 30 03:23:59 2026";
    let name = format!(
        "x\\nCOMMIT\\n# Completed on {date}\\n# Generated by iptables-save v1.8.9 on {date}\\n*security\\n\
         :INPUT ACCEPT [0:0]\\n-A INPUT -m comment --comment y"
    );
    Bypass {
        what: "raw OUTPUT CT --notrack behind a recent list whose name prints a table of its own",
        setup: vec![format!(
            "{tool} -t raw -A OUTPUT -m recent --name \"$(printf '{name}')\" --set -j CT --notrack"
        )],
        inbound: false,
        names: vec![
            format!("{tool} (IPv4) -t security: the text lists"),
            "the table cannot be read as iptables-save text".to_string(),
        ],
        undo: vec![format!("{tool} -t raw -F OUTPUT")],
    }
}

/// A native constant write in iptables-nft's filter INPUT (after our nat PREROUTING) putting a redirected
/// packet's port back to the app's: iptables-nft-save 1.8.9 prints the rule without the write, as a rule
/// that only matches (`-A INPUT -p tcp -m tcp --dport 15006`), so only our reader sees it.
fn printed_without_its_write() -> Bypass<'static> {
    Bypass {
        what: "a native constant port write in iptables-nft's filter INPUT, printed by -save as a match",
        setup: cmds(&[
            "sysctl -qw net.netfilter.nf_conntrack_tcp_loose=0",
            "iptables-nft -A INPUT -p udp --dport 1 -j DROP",
            "nft insert rule ip filter INPUT tcp dport 15006 tcp dport set 8080 counter",
        ]),
        inbound: true,
        names: cmds(&[
            "iptables-nft (IPv4) -t filter INPUT rule 1:",
            "(an expression iptables never writes, which its -save does not print as it is)",
        ]),
        undo: cmds(&[
            "iptables-nft -F INPUT",
            "sysctl -qw net.netfilter.nf_conntrack_tcp_loose=1",
        ]),
    }
}

/// [`newline_in_a_string`], [`printed_without_its_write`], [`left_out_of_save`], and nat `OUTPUT` re-made
/// without its hook (the node's `-save` lists it as one more user chain): CHECK and re-ADD name each, as
/// with our own writer (whose reader sees them), and so they do the own writer's other bypasses.
#[test]
fn node_binaries_check_and_re_add_name_what_iptables_save_cannot_show() {
    use crate::redirect_bypass_e2e::*;
    if !require_root() {
        return;
    }
    let node = node_with_binaries(124);
    let pod = node.pod("nb-unlisted", "", "", false);
    pod.add().assert_success();
    pod.run("CHECK").assert_success();
    let mut list = newline_in_a_string();
    list.push(printed_without_its_write());
    list.extend(left_out_of_save());
    list.push(unhooked_iptables_nft_output());
    list.extend(iptables_bypasses(&node, "nft"));
    for b in &list {
        eprintln!("--- {}", b.what);
        assert_named_and_refused(&node, &pod, b);
    }
    // The legacy backend through iptables-legacy-restore and -save: the own writer's list, and the string
    // holding a newline (iptables-legacy-save prints it so too).
    let node = node_with_binaries(128);
    node.record_backend("legacy");
    let pod = node.pod("nb-unlisted-legacy", "", "", false);
    pod.add().assert_success();
    pod.run("CHECK").assert_success();
    let legacy_newline = Bypass {
        setup: vec![newline_in_a_comment().setup[0].replace("iptables-nft", "iptables-legacy")],
        names: cmds(&[
            "iptables-legacy (IPv4) -t raw: \"-A OUTPUT -m comment --comment \\\"a\"",
            "a quoted string that does not end on its line",
        ]),
        undo: cmds(&["iptables-legacy -t raw -F OUTPUT"]),
        ..newline_in_a_comment()
    };
    let mut list = vec![
        legacy_newline,
        newline_in_a_recent_name("iptables-legacy"),
        table_in_a_recent_name("iptables-legacy"),
    ];
    list.extend(iptables_bypasses(&node, "legacy"));
    for b in &list {
        eprintln!("--- legacy: {}", b.what);
        assert_named_and_refused(&node, &pod, b);
    }
}

/// [`newline_in_a_string`] and [`left_out_of_save`] put in before the first ADD: the fresh ADD's survey
/// (the namespace held tables) fails naming it, and once it is gone the rules it left in place capture.
#[test]
fn node_binaries_fresh_add_over_what_iptables_save_cannot_show_fails_naming_it() {
    if !require_root() {
        return;
    }
    let node = node_with_binaries(127);
    let list: Vec<Bypass> = newline_in_a_string()
        .into_iter()
        .chain(left_out_of_save())
        .collect();
    for (i, b) in list.iter().enumerate() {
        eprintln!("--- {}", b.what);
        let pod = node.pod(&format!("nb-fresh-unlisted-{i}"), "", "", false);
        sh_in(&pod, &b.setup);
        let msg = pod.add().assert_cni_error(103);
        for n in &b.names {
            assert!(msg.contains(n.as_str()), "{}: {msg}", b.what);
        }
        assert!(
            !captured(&node, &pod, b.inbound),
            "{}: traffic should go past our rules (the test's premise)",
            b.what
        );
        sh_in(&pod, &b.undo);
        assert!(captured(&node, &pod, b.inbound), "{}", b.what);
        pod.run("CHECK").assert_success();
        assert_re_add(&pod, "AlreadyInPlace");
    }
}

/// Harmless rules `{backend}`'s tool writes as native expressions (iptables-nft 1.8.9: a port range, a
/// `-m limit`, an address match), not as its compat extensions: our reader decodes them, so CHECK does not
/// take them for what the node's `-save` misprints.
fn written_natively(backend: &str) -> Vec<String> {
    let tool = format!("iptables-{backend}");
    [
        "-A INPUT -p tcp --dport 1000:2000 -j ACCEPT",
        "-A INPUT -p udp -m limit --limit 5/sec -j ACCEPT",
        "-A INPUT -s 10.9.0.0/16 -i lo -j ACCEPT",
        "-t raw -A PREROUTING -p tcp --sport 3000:3999 -m limit --limit 10/min",
    ]
    .iter()
    .map(|r| format!("{tool} {r}"))
    .collect()
}

/// The control: rules that cannot move traffic, in either backend (the node's `-save` of each prints only
/// its usual comments), leave CHECK and re-ADD alone with the node's binaries too.
#[test]
fn node_binaries_harmless_rules_leave_check_and_re_add_alone() {
    if !require_root() {
        return;
    }
    for (idx, backend) in [(125, "nft"), (126, "legacy")] {
        let node = node_with_binaries(idx);
        node.record_backend(backend);
        let pod = node.pod("nb-harmless", "", "", false);
        pod.add().assert_success();
        sh_in(
            &pod,
            &crate::redirect_bypass_e2e::harmless_rules(Some(backend)),
        );
        sh_in(&pod, &written_natively(backend));
        pod.run("CHECK").assert_success();
        assert_re_add(&pod, "AlreadyInPlace");
        assert!(outbound_captured(&node, &pod), "{backend}");
        assert!(inbound_captured(&node, &pod), "{backend}");
    }
}
