use super::once::{parse_args, report};
use super::verdict::Verdict;
use super::*;
use crate::json::{self, Value};
use crate::repair::options::Options;

pub(super) fn det() -> Detector {
    Detector::new(Options {
        node_name: "n1".into(),
        ..Options::default()
    })
    .unwrap()
}

/// The plugin configuration of the base install: kube-system excluded, the agent in istio-system.
pub(super) fn conf() -> NetConf {
    crate::cni::conf::parse(
        r#"{"cniVersion":"1.0.0","name":"n","type":"istio-cni","exclude_namespaces":["kube-system"],
            "pod_namespace":"istio-system"}"#,
    )
    .unwrap()
}

pub(super) fn pod(extra_spec: &str, status: &str, meta: &str) -> Object {
    json::parse_object(
        &format!(
            r#"{{"metadata":{{"name":"p","namespace":"ns","uid":"u-1","resourceVersion":"5"{meta},
                 "annotations":{{"sidecar.istio.io/status":"{{}}"}}}},
               "spec":{{"nodeName":"n1","containers":[{{"name":"app"}},{{"name":"istio-proxy"}}]{extra_spec}}},
               "status":{{{status}}}}}"#
        ),
        "pod",
    )
    .unwrap()
}

pub(super) const RUNNING: &str =
    r#""phase":"Running","podIP":"10.1.2.3","podIPs":[{"ip":"10.1.2.3"}]"#;

#[test]
fn only_running_redirected_pod_network_pods_are_audited() {
    let d = det();
    let p = admit(&d, &conf(), &pod("", RUNNING, "")).expect("a running sidecar pod is audited");
    assert_eq!(p.facts.key(), "ns/p");
    assert_eq!(
        (p.facts.uid.as_str(), p.facts.pod_ip.as_str()),
        ("u-1", "10.1.2.3")
    );
    assert!(p.facts.selected);
    // The decision is kept, not the pod.
    assert!(matches!(p.plan, Ok(PodPlan::Redirect(_))), "{:?}", p.plan);
    assert!(admit(&d, &conf(), &pod(r#","hostNetwork":true"#, RUNNING, "")).is_none());
    assert!(
        admit(&d, &conf(), &pod("", r#""phase":"Pending""#, "")).is_none(),
        "no pod IP yet"
    );
    assert!(admit(
        &d,
        &conf(),
        &pod("", &RUNNING.replace("Running", "Succeeded"), "")
    )
    .is_none());
    assert!(admit(
        &d,
        &conf(),
        &pod(
            "",
            RUNNING,
            r#","deletionTimestamp":"2024-01-01T00:00:00Z""#
        )
    )
    .is_none());
    // No sidecar: the decision skips it.
    let plain = json::parse_object(
        r#"{"metadata":{"name":"q","namespace":"ns","uid":"u-2"},"spec":{"containers":[{"name":"app"}]},
            "status":{"phase":"Running","podIP":"10.1.2.4"}}"#,
        "pod",
    )
    .unwrap();
    assert!(admit(&d, &conf(), &plain).is_none());
    // A pod whose decision fails (a bad annotation) stays: its verification says why.
    let bad = pod("", RUNNING, "").clone();
    let text = json::to_compact(&Value::Object(bad)).replace(
        r#""sidecar.istio.io/status":"{}""#,
        r#""sidecar.istio.io/status":"{}","traffic.sidecar.istio.io/includeInboundPorts":"x""#,
    );
    let bad = json::parse_object(&text, "pod").unwrap();
    let bad = admit(&d, &conf(), &bad).expect("kept");
    assert!(bad.plan.unwrap_err().contains("includeInboundPorts"));
}

#[test]
fn a_pod_the_plugin_leaves_alone_is_not_audited_whatever_its_sidecar() {
    let d = det();
    let in_ns = |ns: &str, name: &str| {
        let text = json::to_compact(&Value::Object(pod("", RUNNING, "")))
            .replace(r#""namespace":"ns""#, &format!(r#""namespace":"{ns}""#))
            .replace(r#""name":"p""#, &format!(r#""name":"{name}""#));
        json::parse_object(&text, "pod").unwrap()
    };
    assert!(admit(&d, &conf(), &in_ns("ns", "p")).is_some());
    // exclude_namespaces: ADD's shortcut, so the audit's too.
    assert!(admit(&d, &conf(), &in_ns("kube-system", "coredns")).is_none());
    // The agent's own pod.
    assert!(admit(&d, &conf(), &in_ns("istio-system", "istio-cni-node-x1")).is_none());
    assert!(admit(&d, &conf(), &in_ns("istio-system", "other")).is_some());
    // Without exclusions, the same pod is audited.
    let open =
        crate::cni::conf::parse(r#"{"cniVersion":"1.0.0","name":"n","type":"istio-cni"}"#).unwrap();
    assert!(admit(&d, &open, &in_ns("kube-system", "coredns")).is_some());
}

#[test]
fn the_sink_keeps_the_node_pods_and_forgets_gone_ones_by_uid() {
    let store = Shared::default();
    let mut s = AuditSink {
        det: det(),
        conf: conf(),
        store: store.clone(),
    };
    s.pod(&pod("", RUNNING, ""));
    assert!(!lock(&store).listed);
    s.list_done();
    assert!(lock(&store).listed);
    // What the audit found stays with the pod through the watch's updates of it, not another UID's.
    let seen = verdict::Seen {
        uid: "u-1".into(),
        verdict: Verdict::Missing("m".into()),
        backoff: verdict::Backoff::default(),
    };
    lock(&store).pods.get_mut("ns/p").unwrap().seen = Some(seen.clone());
    s.pod(&pod("", RUNNING, ""));
    assert_eq!(lock(&store).pods["ns/p"].seen, Some(seen));
    let text = json::to_compact(&Value::Object(pod("", RUNNING, ""))).replace("u-1", "u-9");
    s.pod(&json::parse_object(&text, "pod").unwrap());
    assert_eq!(lock(&store).pods["ns/p"].seen, None);
    s.gone("ns/p", "u-9");
    s.pod(&pod("", RUNNING, ""));
    s.gone("ns/p", "other-uid");
    assert_eq!(
        lock(&store).pods.len(),
        1,
        "another pod's DELETED does not remove it"
    );
    s.gone("ns/p", "u-1");
    assert!(lock(&store).pods.is_empty());
    s.pod(&pod("", RUNNING, ""));
    s.pod(&pod(r#","hostNetwork":true"#, RUNNING, ""));
    assert!(
        lock(&store).pods.is_empty(),
        "a pod that no longer qualifies is dropped"
    );
}

/// `pod` with `from` replaced by `to` in its JSON.
fn edited(pod: &Object, from: &str, to: &str) -> Object {
    let text = json::to_compact(&Value::Object(pod.clone()));
    assert!(text.contains(from), "{from} not in {text}");
    json::parse_object(&text.replace(from, to), "pod").unwrap()
}

const STATUS: &str = r#""sidecar.istio.io/status":"{}""#;

fn sink() -> (AuditSink, Shared) {
    let store = Shared::default();
    let s = AuditSink {
        det: det(),
        conf: conf(),
        store: store.clone(),
    };
    (s, store)
}

fn plan(store: &Shared) -> Option<Decided> {
    lock(store).pods.get("ns/p").map(|p| p.plan.clone())
}

/// The base pod labeled `sidecar.istio.io/inject=false`.
fn labeled() -> Object {
    pod(
        "",
        RUNNING,
        r#","labels":{"sidecar.istio.io/inject":"false"}"#,
    )
}

/// The base pod annotated `traffic.sidecar.istio.io/excludeOutboundIPRanges=0.0.0.0/0` (a new version).
fn excluded() -> Object {
    let p = edited(
        &pod("", RUNNING, ""),
        STATUS,
        r#""sidecar.istio.io/status":"{}","traffic.sidecar.istio.io/excludeOutboundIPRanges":"0.0.0.0/0""#,
    );
    edited(&p, r#""resourceVersion":"5""#, r#""resourceVersion":"9""#)
}

#[test]
fn an_opt_out_label_or_a_lost_status_on_a_running_pod_leaves_it_audited_with_its_plan() {
    let (mut s, store) = sink();
    let first = pod("", RUNNING, "");
    s.pod(&first);
    let started = plan(&store).expect("admitted");
    assert!(matches!(started, Ok(PodPlan::Redirect(_))), "{started:?}");
    // `kubectl label pod p sidecar.istio.io/inject=false` on the running pod: the plugin decided at ADD,
    // the rules are there; it stays audited, with its plan.
    assert!(matches!(
        crate::pod_rules::decide(&labeled(), Some(&conf())),
        Ok(PodPlan::Skip(_))
    ));
    s.pod(&labeled());
    assert_eq!(plan(&store), Some(started.clone()), "the label took it out");
    assert!(lock(&store).pods["ns/p"].changed_logged);
    // Its sidecar status annotation removed: the same.
    s.pod(&edited(&first, STATUS, r#""other":"x""#));
    assert_eq!(plan(&store), Some(started));
}

#[test]
fn an_exclusion_annotated_onto_a_running_pod_is_neither_verified_nor_repaired_in() {
    let (mut s, store) = sink();
    s.pod(&pod("", RUNNING, ""));
    let started = plan(&store).expect("admitted");
    // `kubectl annotate pod p traffic.sidecar.istio.io/excludeOutboundIPRanges=0.0.0.0/0`: verified and
    // repaired in place with the rules it started with, never the new exclusion.
    let wide = crate::pod_rules::decide(&excluded(), Some(&conf()));
    assert!(matches!(wide, Ok(PodPlan::Redirect(_))) && wide != started);
    s.pod(&excluded());
    assert_eq!(plan(&store), Some(started), "the annotation got in");
    let kept = lock(&store).pods["ns/p"].clone();
    assert_eq!(kept.facts.resource_version, "9", "its facts are the latest");
    assert!(kept.changed_logged);
}

#[test]
fn a_pod_recreated_or_with_a_new_sandbox_is_decided_afresh_and_a_skipped_uid_stays_skipped() {
    let (mut s, store) = sink();
    let first = pod("", RUNNING, "");
    s.pod(&first);
    let started = plan(&store).expect("admitted");
    let wide = crate::pod_rules::decide(&excluded(), Some(&conf()));
    s.pod(&excluded());
    assert_eq!(plan(&store), Some(started.clone()));
    // Its sandbox recreated (a new pod IP): ADD ran again with the pod as it is.
    s.pod(&edited(&excluded(), "10.1.2.3", "10.1.2.9"));
    assert_eq!(plan(&store), Some(wide.clone()));
    // Recreated under its name (a new UID): decided afresh.
    s.pod(&first);
    assert_eq!(plan(&store), Some(started.clone()));
    s.pod(&edited(&excluded(), "u-1", "u-2"));
    assert_eq!(plan(&store), Some(wide));
    s.pod(&edited(&labeled(), "u-1", "u-3"));
    assert_eq!(
        plan(&store),
        None,
        "a new pod labeled inject=false is left alone"
    );
    // A pod first seen left alone stays so for its UID: its label removed later, not audited.
    s.pod(&edited(&first, "u-1", "u-3"));
    assert_eq!(plan(&store), None);
    assert!(lock(&store).skipped["ns/p"].changed_logged);
    s.gone("ns/p", "u-3");
    assert!(lock(&store).skipped.is_empty() && lock(&store).pods.is_empty());
    s.pod(&edited(&first, "u-1", "u-3"));
    assert_eq!(
        plan(&store),
        Some(started),
        "gone, then seen again: first seen"
    );
    // A pod that stops running is forgotten, left alone or not.
    s.pod(&edited(&labeled(), "u-1", "u-4"));
    assert_eq!(lock(&store).skipped.len(), 1);
    s.pod(&edited(
        &edited(&labeled(), "u-1", "u-4"),
        r#""phase":"Running""#,
        r#""phase":"Succeeded""#,
    ));
    assert!(lock(&store).skipped.is_empty() && lock(&store).pods.is_empty());
}

#[test]
fn the_one_shot_exits_1_for_a_missing_or_bypassed_pod_and_3_for_an_unverifiable_one() {
    assert_eq!(parse_args(&[]), Ok(Some(super::once::Args::default())));
    let a = parse_args(&["--json".into(), "--host-proc=/proc".into()])
        .unwrap()
        .unwrap();
    assert!(a.json);
    assert_eq!(a.host_proc.as_deref(), Some("/proc"));
    assert_eq!(
        parse_args(&["--host-proc=/p".into()])
            .unwrap()
            .unwrap()
            .host_proc
            .as_deref(),
        Some("/p")
    );
    assert!(parse_args(&["--host-proc".into(), "/proc".into()]).is_err());
    assert_eq!(parse_args(&["--help".into()]), Ok(None));
    assert!(parse_args(&["--bogus".into()])
        .unwrap_err()
        .contains("--bogus"));
    let ok = vec![
        ("a/x".to_string(), Verdict::Redirected),
        (
            "a/y".to_string(),
            Verdict::Unverifiable("no host /proc".into()),
        ),
    ];
    assert_eq!(
        report(&ok, false),
        ("a/x redirected\na/y unverifiable no host /proc\n".into(), 3)
    );
    assert_eq!(report(&ok[..1], false).1, 0);
    let mut bad = ok.clone();
    bad.push((
        "b/z".into(),
        Verdict::Missing("IPv4: missing -t nat -N ISTIO_OUTPUT".into()),
    ));
    let (text, code) = report(&bad, true);
    assert_eq!(code, 1);
    let v = crate::json::parse(&text, "t").unwrap();
    let crate::json::Value::Array(items) = v else {
        panic!("{text}")
    };
    assert_eq!(items.len(), 3);
    assert_eq!(report(&[], false), (String::new(), 0));
}
