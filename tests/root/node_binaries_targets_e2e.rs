//! IPTABLES_NODE_BINARIES (root): a rule's target as the node's `-save` prints it. The tool prints a
//! target's string options bare (iptables 1.8.9, both backends: `-j CT --notrack --helper -j ACCEPT`), so
//! a `-j` word inside one, after the real target, would read as the rule's target: a raw `CT --notrack`
//! read as `ACCEPT` takes traffic past the redirect unnamed. A rule's text may hold one `-j`/`-g` word
//! only, and must hold one where our own read of the same tables gives the rule a target; iptables-nft's
//! native `log` (`-j LOG`, `-j NFLOG`: read as a match, printed as a target) stays harmless.

use crate::support::e2e::*;
use crate::support::traffic::*;
use crate::support::*;

/// A raw OUTPUT `CT --notrack` whose helper name (never looked up: the kernel takes a notrack before it)
/// is `-j ACCEPT`, written by `iptables-{backend}`.
fn notrack_with_a_jump_in_its_helper(backend: &str) -> Bypass<'static> {
    let tool = format!("iptables-{backend}");
    Bypass {
        what: "raw OUTPUT CT --notrack whose helper name is -j ACCEPT",
        setup: vec![format!(
            "{tool} -t raw -A OUTPUT -j CT --notrack --helper '-j ACCEPT'"
        )],
        inbound: false,
        names: vec![
            format!("{tool} (IPv4) -t raw: OUTPUT rule 1: \"-j CT --notrack --helper -j ACCEPT\""),
            "more than one -j or -g word: a string holds one".into(),
        ],
        undo: vec![format!("{tool} -t raw -F OUTPUT")],
    }
}

#[test]
fn node_binaries_a_jump_word_in_a_targets_string_is_named() {
    if !require_root() {
        return;
    }
    for (idx, backend) in [(182, "nft"), (183, "legacy")] {
        let node = Node::new(idx);
        node.record_backend(backend);
        node.record_node_binaries();
        let pod = node.pod("nb-jump-word", "", "", false);
        pod.add().assert_success();
        pod.run("CHECK").assert_success();
        let b = notrack_with_a_jump_in_its_helper(backend);
        let saved = {
            sh_in(&pod, &b.setup);
            let t = pod
                .ns
                .exec_ok(&[&format!("iptables-{backend}-save"), "-t", "raw"]);
            sh_in(&pod, &b.undo);
            t
        };
        assert!(
            saved.contains("-A OUTPUT -j CT --notrack --helper -j ACCEPT\n"),
            "the premise ({backend}): {saved}"
        );
        eprintln!("--- {backend}: {}", b.what);
        assert_named_and_refused(&node, &pod, &b);
        // The control: iptables-nft 1.8.9 writes `-j LOG` and `-j NFLOG` as a native `log` expression
        // (our read: a match, no target) and its `-save` prints them back as those targets.
        sh_in(
            &pod,
            &[
                format!("iptables-{backend} -A INPUT -j LOG --log-prefix seen"),
                format!("iptables-{backend} -t raw -A OUTPUT -j NFLOG"),
            ],
        );
        pod.run("CHECK").assert_success();
        assert_re_add(&pod, "AlreadyInPlace");
    }
}
