//! SIGTERM during a rolling update versus an uninstall, against the API double: the installer reads its own
//! pod, its DaemonSet and its node, and leaves the entry, the binary and the kubeconfig in place for the next
//! agent (which takes them over without ever writing a config that lacks our entry, watched with inotify),
//! or removes them when the DaemonSet is gone, being deleted or no longer runs on the node, when the token
//! is refused, or (upstream's default) when there is no answer. Timings are printed, never asserted; the
//! bound on the decision is asserted with a margin only a hang would break.

use crate::support::install::cluster::*;
use kube_double::Fault;
use std::fs;
use std::time::{Duration, Instant};

#[test]
fn a_rolling_update_keeps_everything_and_the_next_agent_takes_over() {
    let c = Cluster::new("handover");
    let a = c.start("istio-cni-node-aaaaa", &[]);
    let ready_a = c.wait_ready(&a);
    let before = c.state();
    assert!(before.iter().all(Option::is_some) && c.entries() == 1);

    let watch = ConfWatch::start(c.conf.clone());
    let (exit_a, log_a) = c.stop(a);
    let line = c.assert_decision(&log_a, "replacement", true);
    assert_eq!(
        c.state(),
        before,
        "primary, binary and kubeconfig byte for byte"
    );
    assert!(
        line.contains(&format!("{NS}/{DS}")) && line.contains(NODE),
        "{line}"
    );
    // Three GETs: our pod, the DaemonSet, the node (its template asks for a Linux node).
    let paths: Vec<String> = c.api.requests().iter().map(|r| r.path.clone()).collect();
    for p in [
        format!("/api/v1/namespaces/{NS}/pods/istio-cni-node-aaaaa"),
        format!("/apis/apps/v1/namespaces/{NS}/daemonsets/{DS}"),
        format!("/api/v1/nodes/{NODE}"),
    ] {
        assert!(paths.contains(&p), "{p} not asked: {paths:?}");
    }

    // The next agent takes over the kept state: a changed setting, so it rewrites the entry (in place).
    c.api.delete_pod(NS, "istio-cni-node-aaaaa").unwrap();
    let t = Instant::now();
    let b = c.start(
        "istio-cni-node-bbbbb",
        &[("EXCLUDE_NAMESPACES", "kube-system")],
    );
    let ready_b = c.wait_ready(&b);
    let start_to_ready = t.elapsed();
    let (versions, bad) = watch.finish();
    assert!(bad.is_empty(), "{}\n{}", bad.join("\n"), b.stderr());
    assert!(versions >= 1, "the new entry was written");
    let text = fs::read_to_string(c.conf.join(PRIMARY)).unwrap();
    assert!(
        text.contains("\"kube-system\"") && c.entries() == 1,
        "{text}"
    );
    println!(
        "handover: agent A ready in {:.1} ms; SIGTERM -> exit {:.1} ms; agent B start -> ready {:.1} ms \
         (/readyz polled from {:.1} ms); {versions} primary version(s) seen, all with the entry",
        ready_a.as_secs_f64() * 1e3,
        exit_a.as_secs_f64() * 1e3,
        start_to_ready.as_secs_f64() * 1e3,
        ready_b.as_secs_f64() * 1e3
    );

    // The same settings again: nothing to rewrite at all.
    let (_, log_b) = c.stop(b);
    c.assert_decision(&log_b, "replacement", true);
    let kept = c.state();
    let watch = ConfWatch::start(c.conf.clone());
    let b2 = c.start(
        "istio-cni-node-ccccc",
        &[("EXCLUDE_NAMESPACES", "kube-system")],
    );
    c.wait_ready(&b2);
    let (versions, bad) = watch.finish();
    assert!(
        bad.is_empty() && versions == 0,
        "{versions} writes: {bad:?}"
    );
    assert_eq!(c.state(), kept);

    // The DaemonSet is deleted (uninstall): the agent removes everything.
    assert!(c.api.delete_daemonset(NS, DS));
    let (exit, log) = c.stop(b2);
    c.assert_decision(&log, "daemonset-gone", false);
    println!(
        "uninstall: SIGTERM -> exit {:.1} ms",
        exit.as_secs_f64() * 1e3
    );
}

#[test]
fn a_daemonset_being_deleted_or_no_longer_here_is_an_uninstall() {
    let c = Cluster::new("handover-gone");
    let p = c.start("istio-cni-node-aaaaa", &[]);
    c.wait_ready(&p);
    assert!(c.api.mark_daemonset_deleting(NS, DS));
    let (_, log) = c.stop(p);
    c.assert_decision(&log, "daemonset-deleting", false);

    // The node is relabelled so the template's nodeSelector no longer matches.
    c.api.add_daemonset(&daemonset_json()).unwrap();
    let p = c.start("istio-cni-node-bbbbb", &[]);
    c.wait_ready(&p);
    c.api.add_node(&node_json("windows")).unwrap();
    let (_, log) = c.stop(p);
    let line = c.assert_decision(&log, "not-scheduled-here", false);
    assert!(line.contains("kubernetes.io/os=linux"), "{line}");

    // The node object is gone.
    c.api.add_node(&node_json("linux")).unwrap();
    let p = c.start("istio-cni-node-ccccc", &[]);
    c.wait_ready(&p);
    assert!(c.api.delete_node(NODE));
    let (_, log) = c.stop(p);
    c.assert_decision(&log, "node-gone", false);
}

#[test]
fn a_refused_token_is_an_uninstall() {
    let c = Cluster::new("handover-401");
    let p = c.start("istio-cni-node-aaaaa", &[]);
    c.wait_ready(&p);
    c.api.set_token("another-token");
    let (_, log) = c.stop(p);
    c.assert_decision(&log, "unauthorized", false);
}

/// Upstream's chart grants no `get` on daemonsets in sidecar mode: 403, today's cleanup, and a log line
/// that names the grant to add.
#[test]
fn forbidden_daemonsets_clean_up_naming_the_missing_grant() {
    let c = Cluster::new("handover-403");
    let p = c.start("istio-cni-node-aaaaa", &[]);
    c.wait_ready(&p);
    c.api
        .set_resource_fault("daemonsets", Fault::Status(403), None);
    let (took, log) = c.stop(p);
    let line = c.assert_decision(&log, "no-answer", false);
    assert!(
        line.contains("403") && line.contains("get daemonsets.apps in namespace istio-system"),
        "{line}"
    );
    let asked = c
        .api
        .requests()
        .iter()
        .filter(|r| r.path.contains("/daemonsets/"))
        .count();
    assert!(
        (1..=3).contains(&asked),
        "a 403 is asked at most 3 times: {asked}"
    );
    println!(
        "403: SIGTERM -> exit {:.1} ms, {asked} DaemonSet GET(s)",
        took.as_secs_f64() * 1e3
    );
}

/// An API server that accepts and never answers: the decision is bounded (4 s of lookups, 5 s at most),
/// then upstream's default: cleanup, or keep with ISTIO_OWNED_CNI_CONFIG.
#[test]
fn a_hung_api_is_bounded_then_takes_upstreams_default() {
    for (owned, kept) in [("false", false), ("true", true)] {
        let c = Cluster::new("handover-hang");
        let p = c.start("istio-cni-node-aaaaa", &[("ISTIO_OWNED_CNI_CONFIG", owned)]);
        c.wait_ready(&p);
        let before = c.state();
        c.api.set_resource_fault("daemonsets", Fault::Stall, None);
        let (took, log) = c.stop(p);
        c.api.clear_resource_fault("daemonsets");
        println!(
            "hung API (owned={owned}): SIGTERM -> exit {:.1} ms",
            took.as_secs_f64() * 1e3
        );
        assert!(took < Duration::from_secs(10), "took {took:?}:\n{log}");
        let line = log
            .lines()
            .find(|l| l.contains("(rule "))
            .unwrap_or_default();
        assert!(line.contains("(rule no-answer)"), "{log}");
        if kept {
            assert!(line.contains("ISTIO_OWNED_CNI_CONFIG"), "{line}");
            assert_eq!(c.state(), before);
        } else {
            assert!(line.contains("removing"), "{line}");
            assert!(c.state()[1].is_none());
        }
    }
}

#[test]
fn turned_off_it_cleans_up_as_upstreams_sidecar_mode_does() {
    for var in ["DISABLE_SAFE_UPGRADE", "AMBIENT_DISABLE_SAFE_UPGRADE"] {
        let c = Cluster::new("handover-off");
        let p = c.start("istio-cni-node-aaaaa", &[(var, "true")]);
        c.wait_ready(&p);
        c.api.clear_requests();
        let (_, log) = c.stop(p);
        let line = c.assert_decision(&log, "disabled", false);
        assert!(line.contains(&format!("{var}=true")), "{line}");
        assert!(c.api.requests().is_empty(), "no API call when turned off");
    }
}

/// Without POD_NAME, or with our pod unreadable, upstream's DaemonSet name in POD_NAMESPACE is used.
#[test]
fn upstreams_daemonset_name_is_the_fallback() {
    let c = Cluster::new("handover-name");
    let p = c.start("istio-cni-node-aaaaa", &[("POD_NAME", "")]);
    c.wait_ready(&p);
    let (_, log) = c.stop(p);
    let line = c.assert_decision(&log, "replacement", true);
    assert!(line.contains("upstream's default name"), "{line}");

    c.api.set_resource_fault("pods", Fault::Status(403), None);
    let p = c.start("istio-cni-node-bbbbb", &[]);
    c.wait_ready(&p);
    let (_, log) = c.stop(p);
    let line = c.assert_decision(&log, "replacement", true);
    assert!(line.contains("our pod could not be read"), "{line}");
}

/// An error exit (here the first pass cannot install the binary) is followed by the kubelet restarting the
/// container: the same rule as at SIGTERM decides, so the entry stays for the restarted agent instead of a
/// crash loop opening the window; with the setting off, today's cleanup.
#[test]
fn an_error_exit_during_a_rollout_keeps_the_entry() {
    let c = Cluster::new("handover-error");
    let a = c.start("istio-cni-node-aaaaa", &[]);
    c.wait_ready(&a);
    let (_, log) = c.stop(a);
    c.assert_decision(&log, "replacement", true);
    // Something in the way of the binary: the next agent's first pass fails.
    fs::remove_file(c.bin.join("istio-cni")).unwrap();
    fs::create_dir_all(c.bin.join("istio-cni/in-the-way")).unwrap();
    for (pod, extra, kept) in [
        ("istio-cni-node-bbbbb", &[][..], true),
        (
            "istio-cni-node-ccccc",
            &[("DISABLE_SAFE_UPGRADE", "true")][..],
            false,
        ),
    ] {
        let mut p = c.start(pod, extra);
        let st = p.wait_exit(LONG);
        let log = p.stderr();
        assert!(!st.success(), "the first pass must fail:\n{log}");
        let line = log
            .lines()
            .find(|l| l.contains("error exit:"))
            .unwrap_or_else(|| panic!("no decision line:\n{log}"));
        assert_eq!(c.entries(), usize::from(kept), "{line}\n{log}");
        let rule = if kept {
            "(rule replacement)"
        } else {
            "(rule disabled)"
        };
        assert!(line.contains(rule), "{line}");
    }
}
