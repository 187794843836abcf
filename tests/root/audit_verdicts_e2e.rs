//! The audit's verdicts end to end (root), with the harness of `audit_e2e` ([`crate::support::audit`]): a
//! sidecar pod of an excluded namespace is not audited (the plugin's whole decision), an unverifiable pod
//! gets its Event and the one-shot exits 3, a repair undone before the next round is repaired again, and a
//! label or an annotation patched onto a running pod changes neither whether it is audited nor the rules
//! repair in place programs (ADD decided once).
//! No timing is asserted: every wait is for a condition, with a generous bound.

use crate::support::audit::*;
use crate::support::e2e::*;
use crate::support::repair::{metric, scrape, Agent};
use crate::support::*;
use istio_cni::json;

#[test]
fn audit_a_sidecar_pod_of_an_excluded_namespace_is_not_audited_counted_or_written() {
    if !require_root() {
        return;
    }
    let node = Node::new(85);
    node.record_backend("nft");
    // The base configuration: kube-system excluded (ADD leaves its pods alone), repair in place on.
    let excluded = Audited::in_namespace(&node, "kube-system", "coredns", false);
    let before = excluded.pod.save("iptables-nft-save");
    assert!(
        !before.contains("ISTIO_OUTPUT"),
        "ADD skips an excluded namespace: {before}"
    );
    let _fine = Audited::new(&node, "fine", false);
    let agent = Agent::start(
        &node,
        &["--audit-interval=1s"],
        &[("EXCLUDE_NAMESPACES", "kube-system,istio-system")],
    );
    wait_metrics(&agent, "the sidecar pod redirected in a round", |m| {
        pods_in(m, "redirected") == Some(1.0)
    });
    let r0 = rounds(&scrape(agent.port));
    wait_metrics(&agent, "three more rounds", |m| rounds(m) >= r0 + 3.0);
    let m = scrape(agent.port);
    for state in ["missing", "bypassed", "unverifiable"] {
        assert_eq!(pods_in(&m, state), Some(0.0), "{state}: {m}");
    }
    assert_eq!(pods_in(&m, "redirected"), Some(1.0), "{m}");
    assert_eq!(
        metric(&m, "repair", "success") + metric(&m, "repair", "fail"),
        0,
        "{m}"
    );
    assert!(node.srv.events().is_empty(), "{:?}", node.srv.events());
    assert_eq!(
        excluded.pod.save("iptables-nft-save"),
        before,
        "the audit wrote rules into a pod of an excluded namespace"
    );
    assert!(
        !agent.log().contains("kube-system/coredns"),
        "{}",
        agent.log()
    );
    // The one-shot decides the same way: the excluded pod is not listed, exit 0.
    let sa = service_account(&node);
    let out = one_shot_with(
        &node,
        &sa,
        &[],
        false,
        &[("EXCLUDE_NAMESPACES", "kube-system,istio-system")],
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "default/fine redirected\n",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn audit_an_unverifiable_pod_gets_one_event_with_the_reason_and_the_one_shot_exits_3() {
    if !require_root() {
        return;
    }
    let node = Node::new(86);
    node.record_backend("nft");
    let _fine = Audited::new(&node, "fine", false);
    // Redirected by ADD, but no process of it in any namespace: the audit cannot find its namespace.
    let ghost = node.pod("ghost", "", "", false);
    ghost.add().assert_success();
    let agent = Agent::start(&node, &["--audit-interval=1s"], &[]);
    wait_metrics(&agent, "one redirected, one unverifiable", |m| {
        pods_in(m, "redirected") == Some(1.0) && pods_in(m, "unverifiable") == Some(1.0)
    });
    wait_log(&agent, "audit: pod default/ghost is unverifiable: ");
    let r0 = rounds(&scrape(agent.port));
    wait_metrics(&agent, "three more rounds", |m| rounds(m) >= r0 + 3.0);
    let ev = events(&node, "ghost", "RedirectUnverifiable");
    assert_eq!(ev.len(), 1, "one Event, not one a round: {ev:?}");
    let msg = json::str_of(&ev[0], "message").unwrap_or_default();
    assert!(msg.starts_with("unverifiable: ") && msg.len() > 20, "{msg}");
    assert_eq!(json::str_of(&ev[0], "type"), Some("Warning"), "{ev:?}");
    assert!(events(&node, "fine", "RedirectUnverifiable").is_empty());
    let m = scrape(agent.port);
    assert_eq!(
        metric(&m, "repair", "success") + metric(&m, "repair", "fail"),
        0,
        "never an action on an unverifiable pod: {m}"
    );
    // The one-shot: exit 3, the reason on the pod's line.
    let sa = service_account(&node);
    let out = one_shot(&node, &sa, &[], false);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let show = format!("{text}\nstderr:\n{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(3), "{show}");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{show}");
    assert_eq!(lines[0], "default/fine redirected", "{show}");
    assert!(
        lines[1].starts_with("default/ghost unverifiable "),
        "{show}"
    );
}

#[test]
fn audit_a_repair_undone_before_the_next_round_is_repaired_again() {
    if !require_root() {
        return;
    }
    let node = Node::new(87);
    node.record_backend("nft");
    let fine = Audited::new(&node, "fine", false);
    let victim = Audited::new(&node, "victim", false);
    // Two seconds between two verifications of a pod: the flush below lands between them.
    let agent = Agent::start(&node, &["--audit-interval=2s"], &[]);
    wait_metrics(&agent, "both pods redirected in a round", |m| {
        pods_in(m, "redirected") == Some(2.0)
    });
    victim.sh("iptables-nft -t nat -F");
    wait_metrics(&agent, "the first repair counted", |m| {
        metric(m, "repair", "success") == 1
    });
    // Undone at once, before the round that would see it redirected: the verdict stays `missing`, which
    // is no change, and must be repaired again all the same.
    victim.sh("iptables-nft -t nat -F");
    wait_metrics(&agent, "the second repair counted", |m| {
        metric(m, "repair", "success") >= 2
    });
    wait_metrics(&agent, "both pods redirected again", |m| {
        pods_in(m, "redirected") == Some(2.0)
    });
    assert_eq!(
        victim.pod.save("iptables-nft-save"),
        fine.pod.save("iptables-nft-save"),
        "the repaired pod's rules vs ADD's"
    );
    assert!(pod_writes(&node).is_empty(), "{:?}", pod_writes(&node));
}

#[test]
fn audit_a_dormant_iptables_nft_nat_table_is_missing_naming_it() {
    if !require_root() {
        return;
    }
    let node = Node::new(89);
    node.record_backend("nft");
    let sleepy = Audited::new(&node, "sleepy", false);
    // Every rule of ours still reads back, but none runs: the table's chains are not hooked.
    sleepy.sh("nft add table ip nat '{ flags dormant ; }'");
    let sa = service_account(&node);
    let out = one_shot(&node, &sa, &[], false);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let show = format!("{text}\nstderr:\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.starts_with("default/sleepy missing"), "{show}");
    assert!(text.contains("table ip nat is dormant"), "{show}");
    assert_eq!(out.status.code(), Some(1), "{show}");
}

#[test]
fn audit_labels_and_annotations_patched_onto_running_pods_change_neither_admission_nor_rules() {
    if !require_root() {
        return;
    }
    let node = Node::new(97);
    node.record_backend("nft");
    let fine = Audited::new(&node, "fine", false);
    let opted = Audited::new(&node, "opted-out", false);
    let widened = Audited::new(&node, "widened", false);
    let agent = Agent::start(&node, &["--audit-interval=1s"], &[]);
    wait_metrics(&agent, "the three pods redirected in a round", |m| {
        pods_in(m, "redirected") == Some(3.0)
    });
    let rules = widened.ruleset();
    // After ADD, as an operator or a pod's owner can: the plugin decided at ADD, these take effect when
    // the pods are recreated, and neither takes a pod out of the audit nor gets programmed in place.
    node.srv
        .patch_pod(
            "default",
            "opted-out",
            r#"{"metadata":{"labels":{"sidecar.istio.io/inject":"false"}}}"#,
        )
        .unwrap();
    node.srv
        .patch_pod(
            "default",
            "widened",
            r#"{"metadata":{"annotations":{"traffic.sidecar.istio.io/excludeOutboundIPRanges":"0.0.0.0/0"}}}"#,
        )
        .unwrap();
    let r0 = rounds(&scrape(agent.port));
    wait_metrics(&agent, "three more rounds", |m| rounds(m) >= r0 + 3.0);
    let check = |when: &str| {
        let m = scrape(agent.port);
        assert_eq!(pods_in(&m, "redirected"), Some(3.0), "{when}: {m}");
        for state in ["missing", "bypassed", "unverifiable"] {
            assert_eq!(pods_in(&m, state), Some(0.0), "{when}: {state}: {m}");
        }
        assert_eq!(metric(&m, "repair", "success"), 0, "{when}: {m}");
        assert_eq!(
            widened.ruleset(),
            rules,
            "{when}: the audit rewrote the rules"
        );
        assert!(node.srv.events().is_empty(), "{:?}", node.srv.events());
        assert!(pod_writes(&node).is_empty(), "{:?}", pod_writes(&node));
    };
    check("three rounds after the patches");
    // The watch delivered both (logged once each), and rounds after that nothing changed either.
    for pod in ["opted-out", "widened"] {
        wait_log(
            &agent,
            &format!(
                "audit: pod default/{pod}: its labels or annotations changed since it started"
            ),
        );
    }
    let r1 = rounds(&scrape(agent.port));
    wait_metrics(&agent, "two more rounds", |m| rounds(m) >= r1 + 2.0);
    check("after the watch delivered the patches");
    // Flushed: both still audited, repaired in place with the rules ADD programmed, not the new exclusion.
    opted.sh("iptables-nft -t nat -F");
    widened.sh("iptables-nft -t nat -F");
    wait_metrics(&agent, "both repairs counted", |m| {
        metric(m, "repair", "success") == 2
    });
    wait_metrics(&agent, "the three pods redirected again", |m| {
        pods_in(m, "redirected") == Some(3.0)
    });
    let add = fine.pod.save("iptables-nft-save");
    for p in [&opted, &widened] {
        assert_eq!(
            p.pod.save("iptables-nft-save"),
            add,
            "the repaired pod's rules vs ADD's"
        );
    }
    let log = agent.log();
    assert_eq!(log.matches("changed since it started").count(), 2, "{log}");
}

/// The audit reads what CHECK reads after our redirect too: `TEE` in mangle POSTROUTING (a copy of the
/// app's traffic out of the pod) and a `REDIRECT` after our jump in nat PREROUTING (what our chains let
/// through sent to the app) make their pods bypassed, the rule named; a pod without them is redirected.
#[test]
fn audit_names_rules_after_our_redirect_as_bypasses() {
    if !require_root() {
        return;
    }
    let node = Node::new(95);
    node.record_backend("nft");
    let tee = Audited::new(&node, "tee", false);
    tee.sh("iptables-nft -t mangle -A POSTROUTING -p tcp -j TEE --gateway 10.0.0.1");
    let jumped = Audited::new(&node, "jumped", false);
    jumped.sh("iptables-nft -t nat -A PREROUTING -p tcp --dport 8081 -j REDIRECT --to-ports 8080");
    let _ok = Audited::new(&node, "ok", false);
    let sa = service_account(&node);
    let out = one_shot(&node, &sa, &[], false);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let show = format!("{text}\nstderr:\n{}", String::from_utf8_lossy(&out.stderr));
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{show}");
    assert!(
        lines[0].starts_with("default/jumped bypassed ")
            && lines[0].contains("-t nat PREROUTING after our jump, on traffic ours lets through"),
        "{show}"
    );
    assert_eq!(lines[1], "default/ok redirected", "{show}");
    assert!(
        lines[2].starts_with("default/tee bypassed ")
            && lines[2].contains("-t mangle POSTROUTING runs after our redirect and can undo it"),
        "{show}"
    );
    assert_eq!(out.status.code(), Some(1), "{show}");
}
