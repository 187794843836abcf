//! The audit's kept decisions across an agent restart (root): the pods of `audit_verdicts_e2e`'s patch test,
//! the agent killed (as a crash, an OOM kill or a DaemonSet roll's stop ends it) after it kept their
//! decisions, the labels and annotations patched while it is down, a new agent over the same run dir. No
//! timing is asserted: every wait is for a condition, with a generous bound.

use crate::support::audit::*;
use crate::support::e2e::*;
use crate::support::repair::{metric, scrape, wait_until, Agent};
use crate::support::*;

#[test]
fn audit_a_pod_patched_while_the_agent_was_down_keeps_the_decision_it_started_with() {
    if !require_root() {
        return;
    }
    let node = Node::new(98);
    node.record_backend("nft");
    let fine = Audited::new(&node, "fine", false);
    let opted = Audited::new(&node, "opted-out", false);
    let widened = Audited::new(&node, "widened", false);
    let mut agent = Agent::start(&node, &["--audit-interval=1s"], &[]);
    wait_metrics(&agent, "the three pods redirected in a round", |m| {
        pods_in(m, "redirected") == Some(3.0)
    });
    // Its kept decisions reach the run dir within a second or so of the first list. The assertions
    // below are what count: without the kept decisions they fail there, this wait only lets a
    // working agent write before it is killed.
    let kept = node.dir.join("run/audit-decisions");
    let _ = wait_until(BOUND, || {
        std::fs::read_to_string(&kept).is_ok_and(|t| {
            [&fine, &opted, &widened]
                .iter()
                .all(|p| t.contains(&p.pod.uid))
        })
    });
    agent.stop();
    let rules = widened.ruleset();
    // While no agent runs: the same patches as an operator or a pod's owner can make.
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
    let agent = Agent::start(&node, &["--audit-interval=1s"], &[]);
    wait_metrics(&agent, "two rounds after the restart", |m| rounds(m) >= 2.0);
    let m = scrape(agent.port);
    assert_eq!(
        pods_in(&m, "redirected"),
        Some(3.0),
        "the label patched while the agent was down took a pod out of the audit: {m}\n{}",
        agent.log()
    );
    assert_eq!(widened.ruleset(), rules, "the audit rewrote the rules");
    for pod in ["opted-out", "widened"] {
        wait_log(
            &agent,
            &format!(
                "audit: pod default/{pod}: its labels or annotations changed since it started"
            ),
        );
    }
    assert!(node.srv.events().is_empty(), "{:?}", node.srv.events());
    // The operators' one-shot verifies them as the agent does, from the decisions it kept.
    let out = one_shot(&node, &service_account(&node), &[], false);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let show = format!("{text}\nstderr:\n{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(
        text, "default/fine redirected\ndefault/opted-out redirected\ndefault/widened redirected\n",
        "{show}"
    );
    assert_eq!(out.status.code(), Some(0), "{show}");
    // Flushed: both repaired in place with the rules ADD programmed, not the new exclusion.
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
    assert!(pod_writes(&node).is_empty(), "{:?}", pod_writes(&node));
}
