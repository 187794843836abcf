//! Every repair conformance vector (shared/conformance/repair/cases.json) against the pure detection,
//! selector matching, action choice and request texts.

use istio_cni::json::{self, Object, Value};
use istio_cni::kube::request as kube_request;
use istio_cni::repair::detect::{choose_action, needs_repair, Action, Detector};
use istio_cni::repair::options::Options;
use istio_cni::repair::request;
use istio_cni::repair::selector::LabelSelector;
use std::collections::BTreeMap;

use crate::support::repair::{conformance_dir, s};

/// A request's JSON body, compact (keys sorted).
fn body_of(req: &kube_request::Request) -> String {
    let body = req.body.as_deref().expect("a body");
    json::to_compact(&json::parse(body, "ours").unwrap())
}
fn b(o: &Object, k: &str) -> bool {
    matches!(o.get(k), Some(Value::Bool(true)))
}
fn obj<'a>(o: &'a Object, k: &str) -> &'a Object {
    json::obj_of(o, k).unwrap_or_else(|| panic!("object {k} missing"))
}

/// The Go zero-valued `RepairConfig` of a case.
fn options(c: &Object) -> Options {
    let code = match c.get("InitExitCode") {
        Some(Value::Number(n)) => n.to_string().parse().unwrap(),
        other => panic!("InitExitCode {other:?}"),
    };
    Options {
        enabled: b(c, "Enabled"),
        node_name: s(c, "NodeName").into(),
        label_key: s(c, "LabelKey").into(),
        label_value: s(c, "LabelValue").into(),
        repair_pods: b(c, "RepairPods"),
        delete_pods: b(c, "DeletePods"),
        label_pods: b(c, "LabelPods"),
        sidecar_annotation: s(c, "SidecarAnnotation").into(),
        init_container_name: s(c, "InitContainerName").into(),
        init_termination_msg: s(c, "InitTerminationMsg").into(),
        init_exit_code: code,
        label_selectors: s(c, "LabelSelectors").into(),
        field_selectors: s(c, "FieldSelectors").into(),
    }
}

fn load() -> Vec<Object> {
    let path = conformance_dir().join("repair/cases.json");
    let text = std::fs::read_to_string(&path).unwrap();
    let v = json::parse(&text, "cases.json").unwrap();
    let Value::Array(a) = v else {
        panic!("not an array")
    };
    a.into_iter()
        .map(|e| match e {
            Value::Object(o) => o,
            _ => panic!("entry is not an object"),
        })
        .collect()
}

#[test]
fn every_vector_detection_and_action() {
    let cases = load();
    assert_eq!(cases.len(), 51, "repair/cases.json entry count");
    // Pods by (era, name), for the list scenarios.
    let mut fixtures: BTreeMap<(String, String), Object> = BTreeMap::new();
    for c in &cases {
        let pod = obj(c, "pod");
        let name = s(obj(pod, "metadata"), "name").to_string();
        fixtures.insert((s(c, "era").into(), name), pod.clone());
    }
    let (mut broken_n, mut listed_n, mut bodies_n) = (0, 0, 0);
    for c in &cases {
        let name = s(c, "name");
        let era = s(c, "era");
        let opts = options(obj(c, "config"));
        let exp = obj(c, "expected");
        let det = Detector::new(opts.clone()).unwrap();
        let facts = det.facts(obj(c, "pod"));
        assert_eq!(
            needs_repair(&facts, &opts),
            b(exp, "broken"),
            "{name}: broken"
        );
        broken_n += 1;
        let act = obj(exp, "action");
        let want = match s(act, "type") {
            "none" => Action::None,
            "label" => Action::Label,
            "skip" => Action::LabelSkip,
            "delete" => Action::Delete,
            "repair" => Action::Repair,
            t => panic!("{name}: unknown action type {t}"),
        };
        let got = choose_action(&facts, &opts);
        assert_eq!(got, want, "{name}: action");

        // Master requests: method, path, content type, body, Event, metric.
        if era == "master" {
            match got {
                // Built by the same request functions the agent's API client sends.
                Action::Label => {
                    let patch = json::parse(&request::label_patch(&opts), "ours").unwrap();
                    let req = kube_request::patch_pod_status(&facts.namespace, &facts.name, &patch)
                        .unwrap();
                    assert_eq!(s(act, "method"), req.method.as_str(), "{name}");
                    assert_eq!(Some(s(act, "content_type")), req.content_type, "{name}");
                    assert_eq!(s(act, "path"), req.path, "{name}");
                    assert_eq!(body_of(&req), json::to_compact(&act["body"]), "{name}");
                    bodies_n += 1;
                }
                Action::Delete => {
                    let req = kube_request::delete_pod(
                        &facts.namespace,
                        &facts.name,
                        Some("<metadata.uid as observed>"),
                        Some("<metadata.resourceVersion as observed>"),
                    )
                    .unwrap();
                    assert_eq!(s(act, "method"), req.method.as_str(), "{name}");
                    assert_eq!(s(act, "path"), req.path, "{name}");
                    assert_eq!(body_of(&req), json::to_compact(&act["body"]), "{name}");
                    bodies_n += 1;
                }
                _ => {}
            }
            if let Some(ev) = json::obj_of(act, "event") {
                let (reason, msg) = request::event_text(got, None).unwrap();
                assert_eq!(s(ev, "type"), "Warning", "{name}");
                assert_eq!(
                    (s(ev, "reason"), s(ev, "message")),
                    (reason, msg.as_str()),
                    "{name}"
                );
            }
            if let Some(m) = json::obj_of(exp, "metric") {
                let l = obj(m, "labels");
                assert_eq!(s(l, "type"), got.metric_type(), "{name}: metric type");
                let result = if got == Action::LabelSkip {
                    "skip"
                } else {
                    "success"
                };
                assert_eq!(s(l, "result"), result, "{name}: metric result");
            }
        }

        // The 1.9 one-shot list: server-side label selector, then the predicate, sorted by ns/name.
        if let Some(Value::Bool(listed)) = exp.get("listed") {
            let sel = LabelSelector::parse(&opts.label_selectors).unwrap();
            let labels = |p: &Object| json::obj_of(obj(p, "metadata"), "labels").cloned();
            let pod = obj(c, "pod");
            assert_eq!(
                sel.matches(labels(pod).as_ref()) && needs_repair(&facts, &opts),
                *listed,
                "{name}: listed"
            );
            let scenario = obj(c, "scenario");
            let mut got_list: Vec<String> = Vec::new();
            for p in json::arr_of(scenario, "pods_in_cluster").unwrap() {
                let Value::String(pn) = p else { panic!() };
                let fixture = &fixtures[&(era.to_string(), pn.clone())];
                let f = det.facts(fixture);
                if sel.matches(labels(fixture).as_ref()) && needs_repair(&f, &opts) {
                    got_list.push(format!("{}/{}", f.namespace, f.name));
                }
            }
            got_list.sort();
            let want_list: Vec<String> = json::arr_of(exp, "list_order")
                .unwrap()
                .iter()
                .map(|v| match v {
                    Value::String(x) => format!("/{x}"),
                    _ => panic!(),
                })
                .collect();
            assert_eq!(got_list, want_list, "{name}: list order");
            listed_n += 1;
        }
    }
    assert_eq!(broken_n, 51);
    assert!(
        listed_n >= 10 && bodies_n >= 4,
        "listed {listed_n}, bodies {bodies_n}"
    );
}

/// The strict configurations (node test-node) select the pods of the controller scenarios.
#[test]
fn strict_configs_select_scenario_pods_on_their_node() {
    for c in load() {
        let Some(strict) = json::obj_of(&c, "strict_config") else {
            continue;
        };
        let det = Detector::new(options(strict)).unwrap();
        let facts = det.facts(obj(&c, "pod"));
        let node = json::obj_of(obj(&c, "pod"), "spec").and_then(|sp| json::str_of(sp, "nodeName"));
        assert_eq!(
            facts.selected,
            node == Some("test-node"),
            "{}",
            s(&c, "name")
        );
    }
}
