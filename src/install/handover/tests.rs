//! The decision table, row by row.

use super::*;
use crate::kube::status;

fn obj(text: &str) -> Object {
    json::parse_object(text, "test").unwrap()
}

/// A DaemonSet like our manifests' and upstream's chart: Linux nodes, every taint tolerated.
fn daemonset(extra_meta: &str) -> Object {
    obj(&format!(
        r#"{{"metadata":{{"name":"istio-cni-node","namespace":"istio-system"{extra_meta}}},
            "spec":{{"template":{{"metadata":{{}},"spec":{{
                "nodeSelector":{{"kubernetes.io/os":"linux"}},
                "tolerations":[{{"effect":"NoSchedule","operator":"Exists"}},{{"effect":"NoExecute","operator":"Exists"}}]}}}}}}}}"#
    ))
}

fn node(os: &str) -> Object {
    obj(&format!(
        r#"{{"metadata":{{"name":"node-1","labels":{{"kubernetes.io/os":"{os}"}}}}}}"#
    ))
}

fn looked(ds: Lookup, node: Option<Lookup>) -> Facts {
    Facts::Looked {
        namespace: "istio-system".into(),
        name: "istio-cni-node".into(),
        named_by: "owner of pod istio-system/istio-cni-node-abcde".into(),
        ds,
        node_name: "node-1".into(),
        node,
    }
}

fn both(facts: &Facts) -> (Decision, Decision) {
    (decide(facts, false), decide(facts, true))
}

fn api(code: u16) -> crate::Error {
    status::decode(code, b"").into_error()
}

/// A GET answered with this status.
fn got(code: u16) -> Lookup {
    Lookup::from_result(Err(api(code)))
}

/// Our DaemonSet found (as our manifests have it), and the node lookup's result.
fn present(node: Option<Lookup>) -> Facts {
    looked(Lookup::Found(daemonset("")), node)
}

#[test]
fn present_not_deleting_and_still_scheduled_here_keeps() {
    let f = present(Some(Lookup::Found(node("linux"))));
    for d in [decide(&f, false), decide(&f, true)] {
        assert_eq!((d.verdict, d.rule), (Verdict::Keep, Rule::Replacement));
        let line = d.to_string();
        assert!(
            line.starts_with("leaving the istio-cni entry")
                && line.contains("istio-system/istio-cni-node")
                && line.contains("node-1")
                && line.ends_with("(rule replacement)"),
            "{line}"
        );
    }
}

#[test]
fn being_deleted_cleans_up() {
    let f = looked(
        Lookup::Found(daemonset(r#","deletionTimestamp":"2026-01-01T00:00:00Z""#)),
        Some(Lookup::Found(node("linux"))),
    );
    let (d, owned) = both(&f);
    assert_eq!(
        (d.verdict, d.rule),
        (Verdict::Cleanup, Rule::DaemonSetDeleting)
    );
    assert_eq!(
        owned, d,
        "a definite answer does not depend on ISTIO_OWNED_CNI_CONFIG"
    );
    assert!(d.to_string().starts_with("removing the istio-cni entry"));
}

#[test]
fn absent_cleans_up() {
    let f = looked(got(404), None);
    let (d, owned) = both(&f);
    assert_eq!((d.verdict, d.rule), (Verdict::Cleanup, Rule::DaemonSetGone));
    assert_eq!(owned.verdict, Verdict::Cleanup);
}

#[test]
fn affinity_or_selector_no_longer_matching_cleans_up() {
    let f = present(Some(Lookup::Found(node("windows"))));
    let (d, owned) = both(&f);
    assert_eq!(
        (d.verdict, d.rule),
        (Verdict::Cleanup, Rule::NotScheduledHere)
    );
    assert!(d.reason.contains("kubernetes.io/os=linux"), "{}", d.reason);
    assert_eq!(owned.verdict, Verdict::Cleanup);
    let mut ds = daemonset("");
    let affinity = obj(
        r#"{"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":[
            {"matchExpressions":[{"key":"pool","operator":"In","values":["mesh"]}]}]}}}"#,
    );
    if let Some(json::Value::Object(spec)) = ds.get_mut("spec") {
        if let Some(json::Value::Object(t)) = spec.get_mut("template") {
            if let Some(json::Value::Object(s)) = t.get_mut("spec") {
                s.insert("affinity".into(), json::Value::Object(affinity));
            }
        }
    }
    let d = decide(
        &looked(Lookup::Found(ds), Some(Lookup::Found(node("linux")))),
        false,
    );
    assert_eq!(d.rule, Rule::NotScheduledHere, "{d}");
    assert!(d.reason.contains("required node affinity"), "{}", d.reason);
}

#[test]
fn node_gone_cleans_up() {
    let f = present(Some(got(404)));
    assert_eq!(decide(&f, true).rule, Rule::NodeGone);
    assert_eq!(decide(&f, true).verdict, Verdict::Cleanup);
}

#[test]
fn unauthorized_cleans_up() {
    for f in [looked(got(401), None), present(Some(got(401)))] {
        let (d, owned) = both(&f);
        assert_eq!((d.verdict, d.rule), (Verdict::Cleanup, Rule::Unauthorized));
        assert_eq!(owned.verdict, Verdict::Cleanup);
        assert!(d.reason.contains("401"), "{}", d.reason);
    }
}

#[test]
fn forbidden_is_no_answer_and_names_the_grant() {
    let f = looked(got(403), None);
    assert!(matches!(got(403), Lookup::Forbidden(_)));
    let (d, owned) = both(&f);
    assert_eq!((d.verdict, d.rule), (Verdict::Cleanup, Rule::NoAnswer));
    assert!(
        d.reason
            .contains("get daemonsets.apps in namespace istio-system")
            && d.reason.contains("manifests/README.md"),
        "{}",
        d.reason
    );
    assert_eq!((owned.verdict, owned.rule), (Verdict::Keep, Rule::NoAnswer));
    assert!(
        owned.reason.contains("ISTIO_OWNED_CNI_CONFIG"),
        "{}",
        owned.reason
    );

    // Nodes forbidden: no answer when the template depends on the node...
    let f = present(Some(got(403)));
    let d = decide(&f, false);
    assert_eq!((d.verdict, d.rule), (Verdict::Cleanup, Rule::NoAnswer));
    assert!(d.reason.contains("get nodes"), "{}", d.reason);
    // ...and a keep when it runs on every node whatever its labels and taints.
    let anywhere = obj(
        r#"{"metadata":{"name":"istio-cni-node"},"spec":{"template":{"spec":{
            "tolerations":[{"operator":"Exists"}]}}}}"#,
    );
    let f = looked(Lookup::Found(anywhere.clone()), Some(got(403)));
    assert_eq!(decide(&f, false).verdict, Verdict::Keep);
    let f = looked(Lookup::Found(anywhere), None);
    assert_eq!(decide(&f, false).rule, Rule::Replacement);
}

#[test]
fn hung_or_unreachable_is_no_answer() {
    let timeout = status::transport(status::REASON_TIMEOUT, "no answer within 1.5s");
    let refused = status::transport(status::REASON_REFUSED, "dial 10.96.0.1:443");
    for e in [timeout, refused, api(503)] {
        let l = Lookup::from_result(Err(e));
        assert!(matches!(l, Lookup::Failed(_)) && l.retriable());
        let (d, owned) = both(&looked(l, None));
        assert_eq!(
            (d.verdict, d.rule),
            (Verdict::Cleanup, Rule::NoAnswer),
            "{d}"
        );
        assert_eq!((owned.verdict, owned.rule), (Verdict::Keep, Rule::NoAnswer));
    }
    // The DaemonSet answered but the node lookup ran out of time.
    let f = present(None);
    assert_eq!(decide(&f, false).rule, Rule::NoAnswer);
    let f = present(Some(Lookup::Failed("timeout".into())));
    assert_eq!(decide(&f, true).verdict, Verdict::Keep);
    assert_eq!(decide(&f, false).verdict, Verdict::Cleanup);
}

#[test]
fn definite_answers_are_not_retried() {
    assert!(!Lookup::NotFound.retriable());
    assert!(!Lookup::Unauthorized(String::new()).retriable());
    assert!(!Lookup::Found(Object::new()).retriable());
    assert!(Lookup::Forbidden(String::new()).retriable());
}

#[test]
fn disabled_or_not_a_daemonset_pod_cleans_up_at_once() {
    let d = decide(&Facts::Disabled("DISABLE_SAFE_UPGRADE=true".into()), true);
    assert_eq!((d.verdict, d.rule), (Verdict::Cleanup, Rule::Disabled));
    assert!(d.to_string().contains("DISABLE_SAFE_UPGRADE=true"));
    let d = decide(
        &Facts::NotADaemonSetPod("POD_NAMESPACE is not set".into()),
        true,
    );
    assert_eq!(
        (d.verdict, d.rule),
        (Verdict::Cleanup, Rule::NotADaemonSetPod)
    );
    assert!(d.to_string().ends_with("(rule not-a-daemonset-pod)"));
}

#[test]
fn another_live_agent_on_the_node_keeps_whatever_the_settings() {
    let who = "pod istio-system/istio-cni-node-bbbbb, generation 2";
    for (newer, rule, name) in [
        (true, Rule::Superseded, "superseded"),
        (false, Rule::HandedOver, "handed-over"),
    ] {
        let (d, owned) = both(&Facts::Peer {
            newer,
            who: who.into(),
        });
        assert_eq!((d.verdict, d.rule), (Verdict::Keep, rule));
        assert_eq!(owned, d, "ISTIO_OWNED_CNI_CONFIG changes nothing");
        let line = d.to_string();
        assert!(
            line.starts_with("leaving the istio-cni entry")
                && line.contains(who)
                && line.ends_with(&format!("(rule {name})")),
            "{line}"
        );
    }
}

/// Issue 32: an uninstall that deletes the RBAC before our pod stops. 403 on our own pod (the plugin's
/// `get pods`) and on the DaemonSet: cleanup in both layouts. Before, the owned layout kept everything
/// ("no answer"), leaving a file through which every sidecar pod fails once our token is gone.
#[test]
fn rbac_gone_cleans_up_in_both_layouts() {
    let f = Facts::RbacGone {
        pod: "pods \"istio-cni-node-abcde\" is forbidden".into(),
        daemonset: "daemonsets.apps \"istio-cni-node\" is forbidden".into(),
    };
    let (plain, owned) = both(&f);
    for d in [plain, owned] {
        assert_eq!((d.verdict, d.rule), (Verdict::Cleanup, Rule::RbacGone));
        let line = d.to_string();
        assert!(
            line.contains("RBAC is gone") && line.ends_with("(rule rbac-gone)"),
            "{line}"
        );
    }
    // A 403 on the DaemonSet alone (the upgrade grant never given) is still "no answer": kept in the
    // owned layout, as before.
    let f = looked(Lookup::Forbidden("forbidden".into()), None);
    let (plain, owned) = both(&f);
    assert_eq!(plain.verdict, Verdict::Cleanup);
    assert_eq!((owned.verdict, owned.rule), (Verdict::Keep, Rule::NoAnswer));
}
