//! One CHECK reads nf_tables state in several dumps; it must read them in one ruleset generation (root).
//! A writer moves a bypass between two places, one transaction each way, so that every generation holds
//! it: CHECK never passes, in nftables mode (foreign chains) and in iptables mode (iptables-nft's own
//! tables).

use crate::support::e2e::*;
use crate::support::*;

/// A pod, a ruleset in which a bypass moves between two places, and how CHECK names it.
struct Moving {
    /// `nft -f` text made once: the two places (read before and after a long harmless chain).
    setup: String,
    /// `nft -f` texts, one transaction each: the bypass in one place, then in the other.
    a: String,
    b: String,
    /// What CHECK names once the writer has stopped.
    named: &'static str,
}

/// A writer swaps the bypass of `m` between its two places, one transaction each way (every generation
/// holds it), while CHECK runs 100 times: CHECK reads in one generation, so it never passes; it names the
/// bypass or fails closed on a ruleset that keeps changing. Deterministic: no outcome depends on timing,
/// only how CHECK fails does.
fn check_never_passes_while(pod: &Pod, m: &Moving) {
    let tmp = TempDir::new("swap");
    let dir = tmp.path();
    std::fs::write(dir.join("setup.nft"), &m.setup).unwrap();
    std::fs::write(dir.join("a.nft"), &m.a).unwrap();
    std::fs::write(dir.join("b.nft"), &m.b).unwrap();
    let d = dir.display();
    pod.ns.exec_ok(&["nft", "-f", &format!("{d}/setup.nft")]);
    let mut writer = std::process::Command::new("ip")
        .args(["netns", "exec", pod.ns.name(), "sh", "-c"])
        .arg(format!(
            "n=0; while [ ! -e {d}/stop ]; do nft -f {d}/a.nft && nft -f {d}/b.nft || exit 1; \
             n=$((n+1)); echo $n > {d}/swaps; done"
        ))
        .spawn()
        .expect("start the writer");
    let mut passed = Vec::new();
    for i in 0..100 {
        let out = pod.run("CHECK");
        if out.code == 0 {
            passed.push(i);
        }
    }
    std::fs::write(dir.join("stop"), "").unwrap();
    assert!(writer.wait().unwrap().success(), "the writer failed");
    let swaps = std::fs::read_to_string(dir.join("swaps")).unwrap_or_default();
    assert!(
        swaps.trim().parse::<u64>().unwrap_or(0) > 0,
        "the test's premise: the writer swapped the bypass"
    );
    assert!(
        passed.is_empty(),
        "CHECK passed {} times while every generation held the bypass (runs {passed:?})",
        passed.len()
    );
    let msg = pod.run("CHECK").assert_cni_error(103);
    assert!(msg.contains(m.named), "{msg}");
}

/// nftables mode: a `notrack` swapped between two foreign chains at raw priority, with a chain of 4000
/// harmless rules read between them (chain order q, r, p: the reader walks them from the last listed).
/// With the read made once, as before, CHECK passed 42 of 150 runs.
#[test]
fn check_never_passes_while_a_bypass_moves_between_chains() {
    if !require_root() {
        return;
    }
    let node = Node::new(73);
    let pod = node.pod("swap", "", "", false).with_native_nftables();
    pod.add().assert_success();
    let chain =
        |c: &str| format!("add chain ip swap {c} {{ type filter hook output priority -300 ; }}\n");
    let mut setup = format!(
        "add table ip swap\n{}{}{}add rule ip swap p counter\nadd rule ip swap q notrack\n",
        chain("q"),
        chain("r"),
        chain("p")
    );
    for _ in 0..4000 {
        setup.push_str("add rule ip swap r counter\n");
    }
    let swap = |notrack: &str, counter: &str| {
        format!(
            "flush chain ip swap p\nflush chain ip swap q\nadd rule ip swap {notrack} notrack\n\
             add rule ip swap {counter} counter\n"
        )
    };
    check_never_passes_while(
        &pod,
        &Moving {
            setup,
            a: swap("p", "q"),
            b: swap("q", "p"),
            named: "[ notrack ]",
        },
    );
    pod.ns.exec_ok(&["nft", "delete table ip swap"]);
    pod.run("CHECK").assert_success();
}

/// iptables mode with iptables-nft: our own backend's raw table, OUTPUT jumping to chains A, R and B
/// (made in that order, so one rule dump lists A, R's 4000 rules, then B), a native notrack swapped
/// between A and B.
#[test]
fn iptables_nft_check_never_passes_while_a_bypass_moves_between_chains() {
    if !require_root() {
        return;
    }
    let node = Node::new(92);
    node.record_backend("nft");
    let pod = node.pod("swap-ipt", "", "", false);
    pod.add().assert_success();
    for c in ["A", "R", "B"] {
        pod.ns.exec_ok(&["iptables-nft", "-t", "raw", "-N", c]);
        pod.ns
            .exec_ok(&["iptables-nft", "-t", "raw", "-A", "OUTPUT", "-j", c]);
    }
    let mut setup = "add rule ip raw B notrack\n".to_string();
    for _ in 0..4000 {
        setup.push_str("add rule ip raw R counter\n");
    }
    let swap = |notrack: &str| {
        format!("flush chain ip raw A\nflush chain ip raw B\nadd rule ip raw {notrack} notrack\n")
    };
    check_never_passes_while(
        &pod,
        &Moving {
            setup,
            a: swap("A"),
            b: swap("B"),
            named: "iptables-nft (IPv4) -t raw OUTPUT rule",
        },
    );
    pod.ns.exec_ok(&["iptables-nft", "-t", "raw", "-F"]);
    pod.ns.exec_ok(&["iptables-nft", "-t", "raw", "-X"]);
    pod.run("CHECK").assert_success();
}
