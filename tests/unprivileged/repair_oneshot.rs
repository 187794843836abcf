//! Every repair vector through the real agent (`istio-cni-repair --run-as-daemon=false`) against the HTTPS
//! API double, which enforces field selectors and delete preconditions: detection and the action are
//! verified from the requests the double recorded, its resulting state, the Events and the counters the
//! one-shot pass prints. Vectors whose configuration enables no mode are run in label mode with a probe
//! label, so their detection result is observable (broken ⇔ the pod gets labeled).

use crate::support::repair::*;
use istio_cni::json::{self, Object, Value};
use std::collections::{BTreeMap, BTreeSet};

const PROBE_KEY: &str = "conformance.test/broken";

fn args_for(cfg: &Object, probe: bool) -> Vec<String> {
    let code = match cfg.get("InitExitCode") {
        Some(Value::Number(n)) => n.to_string(),
        other => panic!("InitExitCode {other:?}"),
    };
    let mut a = vec![
        format!("--repair-node-name={NODE}"),
        format!(
            "--repair-sidecar-annotation={}",
            s(cfg, "SidecarAnnotation")
        ),
        format!(
            "--repair-init-container-name={}",
            s(cfg, "InitContainerName")
        ),
        format!(
            "--repair-init-container-termination-message={}",
            s(cfg, "InitTerminationMsg")
        ),
        format!("--repair-init-container-exit-code={code}"),
        format!("--repair-label-selectors={}", s(cfg, "LabelSelectors")),
        format!("--repair-field-selectors={}", s(cfg, "FieldSelectors")),
    ];
    if probe {
        a.push("--repair-label-pods=true".into());
        a.push(format!("--repair-broken-pod-label-key={PROBE_KEY}"));
        a.push("--repair-broken-pod-label-value=true".into());
    } else {
        for (k, f) in [
            ("RepairPods", "repair-repair-pods"),
            ("DeletePods", "repair-delete-pods"),
            ("LabelPods", "repair-label-pods"),
        ] {
            a.push(format!("--{f}={}", flag(cfg, k)));
        }
        a.push(format!(
            "--repair-broken-pod-label-key={}",
            s(cfg, "LabelKey")
        ));
        a.push(format!(
            "--repair-broken-pod-label-value={}",
            s(cfg, "LabelValue")
        ));
    }
    a
}

fn event_reasons(api: &Api, name: &str) -> Vec<(String, String, String)> {
    api.srv
        .events()
        .iter()
        .filter(|e| {
            json::obj_of(e, "involvedObject").and_then(|o| json::str_of(o, "name")) == Some(name)
        })
        .map(|e| {
            (
                s(e, "type").to_string(),
                s(e, "reason").to_string(),
                s(e, "message").to_string(),
            )
        })
        .collect()
}

#[test]
fn every_vector_through_the_agent_and_the_api_double() {
    let all = cases();
    assert_eq!(all.len(), 51, "repair/cases.json entry count");
    let mut fixtures: BTreeMap<(String, String), Object> = BTreeMap::new();
    for c in &all {
        let pod = obj(c, "pod");
        fixtures.insert(
            (s(c, "era").into(), s(obj(pod, "metadata"), "name").into()),
            pod.clone(),
        );
    }
    let mut checked = 0;
    for c in &all {
        let name = s(c, "name");
        let era = s(c, "era");
        let cfg = json::obj_of(c, "strict_config").unwrap_or_else(|| obj(c, "config"));
        let exp = obj(c, "expected");
        let act = obj(exp, "action");
        let probe = !(flag(cfg, "RepairPods") || flag(cfg, "DeletePods") || flag(cfg, "LabelPods"));
        let pod_name = s(obj(obj(c, "pod"), "metadata"), "name").to_string();

        let api = Api::new("vec");
        let mut seeded: BTreeMap<String, Object> = BTreeMap::new();
        let scenario =
            json::obj_of(c, "scenario").and_then(|sc| json::arr_of(sc, "pods_in_cluster"));
        let mut names: Vec<String> = match scenario {
            Some(list) => list
                .iter()
                .map(|v| match v {
                    Value::String(x) => x.clone(),
                    _ => panic!(),
                })
                .collect(),
            None => vec![],
        };
        if !names.contains(&pod_name) {
            names.push(pod_name.clone());
        }
        for n in &names {
            let fixture = if *n == pod_name {
                obj(c, "pod")
            } else {
                &fixtures[&(era.to_string(), n.clone())]
            };
            let stored = api.add(&on_node(fixture, NODE));
            seeded.insert(n.clone(), stored);
        }
        let out = api.run_once(&args_for(cfg, probe));
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        let status_path = format!("/api/v1/namespaces/default/pods/{pod_name}/status");
        let pod_path = format!("/api/v1/namespaces/default/pods/{pod_name}");
        let patches = api.writes_to("PATCH", &status_path);
        let deletes = api.writes_to("DELETE", &pod_path);
        let ctx = || format!("{name}\n{}\nwrites: {:?}", show(&out), api.writes());

        if probe {
            assert_eq!(out.status.code(), Some(0), "{}", ctx());
            // Acted on ⇔ broken, and (1.9 list cases) selected by the label selector too.
            let broken = flag(exp, "broken");
            let acted = match exp.get("listed") {
                Some(Value::Bool(l)) => *l,
                _ => broken,
            };
            assert_eq!(
                patches.len(),
                usize::from(acted),
                "{}: broken={broken}\n{}",
                name,
                ctx()
            );
            if let Some(Value::Array(order)) = exp.get("list_order") {
                // 1.9 list: the label selector applies server-side, then the predicate.
                let want: BTreeSet<String> = order
                    .iter()
                    .map(|v| match v {
                        Value::String(x) => format!("/api/v1/namespaces/default/pods/{x}/status"),
                        _ => panic!(),
                    })
                    .collect();
                let got: BTreeSet<String> = api
                    .writes()
                    .into_iter()
                    .filter(|r| r.method == "PATCH")
                    .map(|r| r.path)
                    .collect();
                assert_eq!(got, want, "{}: listed pods\n{}", name, ctx());
            }
            checked += 1;
            continue;
        }

        match s(act, "type") {
            "none" => {
                assert!(patches.is_empty() && deletes.is_empty(), "{}", ctx());
            }
            "label" => {
                assert_eq!(out.status.code(), Some(0), "{}", ctx());
                assert_eq!(patches.len(), 1, "{}", ctx());
                let want_body = match act.get("body") {
                    Some(Value::Object(b)) => b.clone(),
                    // 1.9 PUT the whole pod; we send master's merge patch with the same label.
                    _ => json::parse_object(
                        &format!(
                            r#"{{"metadata":{{"labels":{{"{}":"{}"}}}}}}"#,
                            s(cfg, "LabelKey"),
                            s(cfg, "LabelValue")
                        ),
                        "want",
                    )
                    .unwrap(),
                };
                assert_eq!(
                    json::to_compact(&Value::Object(parse_body(&patches[0]))),
                    json::to_compact(&Value::Object(want_body)),
                    "{}",
                    ctx()
                );
                let after = api.srv.pod("default", &pod_name).unwrap();
                let labels = json::obj_of(obj(&after, "metadata"), "labels").unwrap();
                assert_eq!(
                    json::str_of(labels, s(cfg, "LabelKey")),
                    Some(s(cfg, "LabelValue")),
                    "{}",
                    ctx()
                );
            }
            "skip" => {
                assert!(patches.is_empty() && deletes.is_empty(), "{}", ctx());
                assert!(metric(&stdout, "label", "skip") >= 1, "{}", ctx());
            }
            "delete" => {
                assert_eq!(out.status.code(), Some(0), "{}", ctx());
                assert_eq!(deletes.len(), 1, "{}", ctx());
                let body = parse_body(&deletes[0]);
                assert_eq!(s(&body, "kind"), "DeleteOptions", "{}", ctx());
                let pre = obj(&body, "preconditions");
                let stored = obj(&seeded[&pod_name], "metadata");
                assert_eq!(s(pre, "uid"), s(stored, "uid"), "{}", ctx());
                assert_eq!(
                    s(pre, "resourceVersion"),
                    s(stored, "resourceVersion"),
                    "{}",
                    ctx()
                );
                assert!(
                    api.srv.pod("default", &pod_name).is_none(),
                    "{}: still there\n{}",
                    name,
                    ctx()
                );
            }
            "repair" => {
                // No network namespace owns this fixture (no pod IP): the agent must try repair in
                // place (not fall back to delete or label) and write nothing to the pod.
                assert!(patches.is_empty() && deletes.is_empty(), "{}", ctx());
                assert!(metric(&stdout, "repair", "fail") >= 1, "{}", ctx());
                checked += 1;
                continue;
            }
            t => panic!("{name}: action type {t}"),
        }
        if let Some(ev) = json::obj_of(act, "event") {
            let want = (
                s(ev, "type").to_string(),
                s(ev, "reason").to_string(),
                s(ev, "message").to_string(),
            );
            assert!(
                event_reasons(&api, &pod_name).contains(&want),
                "{}: event {want:?}\n{}",
                name,
                ctx()
            );
        }
        if let Some(m) = json::obj_of(exp, "metric") {
            let l = obj(m, "labels");
            let n = match m.get("increment") {
                Some(Value::Number(n)) => n.to_string().parse::<u64>().unwrap(),
                _ => 1,
            };
            assert_eq!(
                metric(&stdout, s(l, "type"), s(l, "result")),
                n,
                "{}",
                ctx()
            );
        }
        checked += 1;
    }
    assert_eq!(checked, 51);
}

fn broken(name: &str) -> Object {
    json::parse_object(
        &format!(
            r#"{{"metadata":{{"name":"{name}","namespace":"default","annotations":{{"sidecar.istio.io/status":"{{}}"}}}},
            "spec":{{"nodeName":"{NODE}"}},
            "status":{{"initContainerStatuses":[{{"name":"istio-validation","state":{{"waiting":{{"reason":"CrashLoopBackOff"}}}},
              "lastState":{{"terminated":{{"exitCode":126,"reason":"Error"}}}}}}]}}}}"#
        ),
        "pod",
    )
    .unwrap()
}

/// Options from the environment as each era's DaemonSet sets them: 1.9's hyphenated names and master's.
#[test]
fn env_names_of_both_eras_drive_the_agent() {
    let api = Api::new("env19");
    api.add(&broken("b1"));
    let out = api
        .agent(&["--run-as-daemon=false".to_string()])
        .env("REPAIR_NODE-NAME", NODE)
        .env("REPAIR_LABEL-PODS", "true")
        .env("REPAIR_BROKEN-POD-LABEL-KEY", "era")
        .env("REPAIR_BROKEN-POD-LABEL-VALUE", "1.9")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let p = api.writes_to("PATCH", "/api/v1/namespaces/default/pods/b1/status");
    assert_eq!(p.len(), 1, "{}", show(&out));
    assert_eq!(p[0].body, r#"{"metadata":{"labels":{"era":"1.9"}}}"#);

    let api = Api::new("envmaster");
    api.add(&broken("b2"));
    let out = api
        .agent(&[])
        .env("REPAIR_NODE_NAME", NODE)
        .env("REPAIR_DELETE_PODS", "true")
        .env("REPAIR_LABEL_PODS", "true")
        .env("REPAIR_RUN_AS_DAEMON", "false")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    assert_eq!(
        api.writes_to("DELETE", "/api/v1/namespaces/default/pods/b2")
            .len(),
        1,
        "{}",
        show(&out)
    );
    assert!(api
        .writes_to("PATCH", "/api/v1/namespaces/default/pods/b2/status")
        .is_empty());
    // The node name really selects: pods elsewhere are not listed.
    let list = api
        .srv
        .requests()
        .into_iter()
        .find(|r| r.method == "GET")
        .unwrap();
    assert_eq!(
        list.param("fieldSelector").as_deref(),
        Some("spec.nodeName=test-node")
    );
}

/// A one-shot pass whose action keeps failing exits 1 after 5 attempts; bad options exit 2 (every
/// applet's code for bad flags or settings) with the option named, before any request.
#[test]
fn one_shot_failures_and_bad_options_exit_non_zero() {
    let api = Api::new("fail");
    api.add(&broken("f1"));
    api.srv.set_fault(kube_double::Fault::Status(403), None);
    let out = api.run_once(&[format!("--repair-node-name={NODE}"), "--delete-pods".into()]);
    // The LIST itself is refused: a clear error, exit 1.
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("403"),
        "{}",
        show(&out)
    );
    api.srv.clear_fault();

    // Repair in place that cannot succeed (no pod IP): 5 attempts, counted, then exit 1.
    let out = api.run_once(&[
        format!("--repair-node-name={NODE}"),
        "--repair-repair-pods=true".into(),
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(metric(&stdout, "repair", "fail"), 5, "{}", show(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("failed to parse addr"),
        "{}",
        show(&out)
    );
    assert!(
        api.writes().iter().all(|r| r.path.ends_with("/events")),
        "{:?}",
        api.writes()
    );

    let out = api.run_once(&["--label-pods=maybe".into()]);
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--label-pods"),
        "{}",
        show(&out)
    );
    let out = api.run_once(&[
        "--repair-label-selectors=a in b".into(),
        "--label-pods".into(),
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("label selector"),
        "{}",
        show(&out)
    );
    // Without a node name the agent would only ever see unscheduled pods: refuse instead.
    let out = api.run_once(&["--label-pods".into()]);
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("REPAIR_NODE_NAME"),
        "{}",
        show(&out)
    );
}

/// `--repair-run-as-daemon false` (the value as the next argument, as its usage shows it) is a one-shot
/// pass like `--repair-run-as-daemon=false`; a bare `--label-pods` is true. With stdout closed before the
/// agent starts, the pass's counters are not wanted: still exit 0, no panic.
#[test]
fn boolean_values_as_the_next_argument_and_a_closed_stdout() {
    for closed in [false, true] {
        let api = Api::new("nextarg");
        api.add(&broken("n1"));
        let mut c = api.agent(&[
            "--repair-run-as-daemon".into(),
            "false".into(),
            format!("--repair-node-name={NODE}"),
            "--label-pods".into(),
        ]);
        if closed {
            let (r, w) = nix::unistd::pipe().unwrap();
            drop(r);
            c.stdout(std::process::Stdio::from(w));
        } else {
            c.stdout(std::process::Stdio::piped());
        }
        let mut child = c.stderr(std::process::Stdio::piped()).spawn().unwrap();
        // A daemon would never exit: give the one pass a minute, then fail.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while child.try_wait().unwrap().is_none() {
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                panic!("--repair-run-as-daemon false: still running after 60 s");
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let out = child.wait_with_output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "closed={closed}: {}",
            show(&out)
        );
        assert!(!String::from_utf8_lossy(&out.stderr).contains("panicked"));
        let p = api.writes_to("PATCH", "/api/v1/namespaces/default/pods/n1/status");
        assert_eq!(p.len(), 1, "closed={closed}: {}", show(&out));
        if !closed {
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert_eq!(metric(&stdout, "label", "success"), 1, "{}", show(&out));
        }
    }
}

/// With no mode enabled the agent says at start that broken pods are only logged: each broken pod is then
/// named in the log (once per UID), with what its init container showed and why nothing is done; a healthy
/// pod is not named. Before, nothing at all was logged about a broken pod: it stayed stuck unseen.
#[test]
fn no_mode_names_each_broken_pod_in_the_log() {
    let api = Api::new("nomode");
    api.add(&broken("b1"));
    let mut healthy = broken("ok1");
    let status = json::parse_object(
        r#"{"initContainerStatuses":[{"name":"istio-validation",
            "state":{"terminated":{"exitCode":0,"reason":"Completed"}},
            "lastState":{"terminated":{"exitCode":126,"reason":"Error"}}}]}"#,
        "status",
    )
    .unwrap();
    healthy.insert("status".into(), Value::Object(status));
    api.add(&healthy);
    let out = api.run_once(&[format!("--repair-node-name={NODE}")]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = err.lines().filter(|l| l.contains("default/b1")).collect();
    assert_eq!(lines.len(), 1, "{}", show(&out));
    assert!(
        lines[0].contains("broken") && lines[0].contains("126") && lines[0].contains("no mode"),
        "{}",
        show(&out)
    );
    assert!(!err.contains("default/ok1"), "{}", show(&out));
    assert!(api.writes().is_empty(), "{:?}", api.writes());
}
