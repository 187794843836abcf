//! The monitoring kit (`manifests/monitoring`) without a server: one source for both rules files (`render
//! --check`, and the PrometheusRule's groups equal to the plain file's), `promtool check rules` on every rules
//! file, `promtool test rules` with a firing and a quiet case for every alert, the alerts' labels and
//! annotations, the dashboard's structure (every panel has queries, every query is one the end-to-end test
//! asks Prometheus, the variables exist, every metric it reads exists in `src/`), and the scrape
//! configuration against the DaemonSet. Debian's `promtool` (package `prometheus`, `scripts/setup base`).

use crate::support::monitoring::*;
use crate::support::TempDir;
use serde_yaml::Value as Yaml;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

fn promtool(args: &[&str]) -> std::process::Output {
    Command::new(tool("promtool"))
        .args(args)
        .output()
        .expect("run promtool")
}

fn text(o: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The kit copied into a temp dir (to break a copy on purpose).
fn kit_copy() -> TempDir {
    let d = TempDir::new("monitoring-kit");
    let status = Command::new("cp")
        .arg("-a")
        .arg(format!("{}/.", kit().display()))
        .arg(d.path())
        .status()
        .unwrap();
    assert!(status.success());
    d
}

fn plain() -> Vec<Rule> {
    rules_of(&yaml(&plain_rules_text()))
}

fn operator_doc() -> Yaml {
    yaml(&std::fs::read_to_string(kit().join("prometheusrule.yaml")).unwrap())
}

/// Seconds in a Prometheus duration ("5m", "1h30m", "0").
fn seconds(d: &str) -> u64 {
    if d.is_empty() || d == "0" {
        return 0;
    }
    let mut total = 0;
    let mut n = String::new();
    let mut chars = d.chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_ascii_digit() {
            n.push(c);
            continue;
        }
        let unit = if c == 'm' && chars.peek() == Some(&'s') {
            chars.next();
            "ms"
        } else {
            match c {
                'y' => "y",
                'w' => "w",
                'd' => "d",
                'h' => "h",
                'm' => "m",
                's' => "s",
                _ => panic!("{d}: not a duration"),
            }
        };
        let v: u64 = std::mem::take(&mut n).parse().expect(d);
        total += match unit {
            "y" => v * 365 * 86400,
            "w" => v * 7 * 86400,
            "d" => v * 86400,
            "h" => v * 3600,
            "m" => v * 60,
            "s" => v,
            _ => 0,
        };
    }
    total
}

#[test]
fn one_source_renders_both_rules_files_and_they_hold_the_same_groups() {
    run_ok(render_cmd(&["--check"]));
    let op = operator_doc();
    assert_eq!(ystr(&op, "apiVersion"), "monitoring.coreos.com/v1");
    assert_eq!(ystr(&op, "kind"), "PrometheusRule");
    let spec = op.get("spec").expect("spec").clone();
    assert_eq!(
        spec,
        yaml(&plain_rules_text()),
        "prometheusrule.yaml's spec and prometheus/istio-cni-node.rules.yaml differ"
    );

    // The check fails on a drifted copy, and names the file.
    let copy = kit_copy();
    let f = copy.join("prometheusrule.yaml");
    let drifted = std::fs::read_to_string(&f)
        .unwrap()
        .replace("for: 5m", "for: 6m");
    std::fs::write(&f, drifted).unwrap();
    let out = Command::new("python3")
        .arg(copy.join("render"))
        .arg("--check")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("prometheusrule.yaml"), "{}", text(&out));
}

#[test]
fn render_refuses_bad_settings_naming_them() {
    for (args, want) in [
        (
            vec!["--set", "NOPE=1", "--rules", "-"],
            "--set NOPE: no such setting",
        ),
        (
            vec!["--set", "ADD_FAILURES_FOR=5 minutes", "--rules", "-"],
            "ADD_FAILURES_FOR='5 minutes': not a Prometheus duration",
        ),
        (
            vec!["--set", "AGENT_GONE_WINDOW=0m", "--rules", "-"],
            "AGENT_GONE_WINDOW='0m': not a positive Prometheus duration",
        ),
        (
            vec!["--set", "ADD_LATENCY_P99_SECONDS=-1", "--rules", "-"],
            "not a non-negative number",
        ),
        (
            vec!["--set", r#"JOB=a"b"#, "--rules", "-"],
            "not a label value",
        ),
    ] {
        let out = render_cmd(&args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out));
        assert!(text(&out).contains(want), "{args:?}: {}", text(&out));
        assert!(out.stdout.is_empty(), "nothing written on an error");
    }
    // A setting the template does not use, and a placeholder no setting fills.
    let copy = kit_copy();
    let settings = copy.join("settings.env");
    let mut s = std::fs::read_to_string(&settings).unwrap();
    s.push_str("UNUSED_FOR=1m\n");
    std::fs::write(&settings, &s).unwrap();
    let out = Command::new("python3")
        .arg(copy.join("render"))
        .arg("--check")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("UNUSED_FOR"), "{}", text(&out));
    std::fs::write(&settings, s.replace("NOT_READY_FOR=5m\n", "")).unwrap();
    let out = Command::new("python3")
        .arg(copy.join("render"))
        .arg("--check")
        .output()
        .unwrap();
    assert!(text(&out).contains("NOT_READY_FOR"), "{}", text(&out));
}

#[test]
fn promtool_checks_every_rules_file() {
    let d = TempDir::new("promtool-check");
    // The PrometheusRule's groups as a rules file, and the end-to-end test's copy.
    let spec = operator_doc().get("spec").unwrap().clone();
    let files = [
        kit().join("prometheus/istio-cni-node.rules.yaml"),
        d.write(
            "prometheusrule-spec.yaml",
            serde_yaml::to_string(&spec).unwrap(),
        ),
        d.write("e2e.rules.yaml", rules_with_for("5s")),
    ];
    let want = plain().len();
    for f in &files {
        let out = promtool(&["check", "rules", &f.display().to_string()]);
        assert!(out.status.success(), "{}: {}", f.display(), text(&out));
        assert!(
            text(&out).contains(&format!("SUCCESS: {want} rules found")),
            "{}",
            text(&out)
        );
    }
    // The check can fail: an expression Prometheus cannot parse.
    let bad = d.write(
        "bad.rules.yaml",
        plain_rules_text().replace(
            "max by (node) (istio_cni_install_ready)",
            "max by (node) (istio_cni_install_ready",
        ),
    );
    let out = promtool(&["check", "rules", &bad.display().to_string()]);
    assert!(!out.status.success(), "{}", text(&out));
}

/// The unit tests' cases: (alert, eval_time in seconds, expected alerts).
fn unit_cases(doc: &Yaml) -> Vec<(String, u64, Vec<Yaml>)> {
    let mut out = vec![];
    for t in doc.get("tests").and_then(Yaml::as_sequence).expect("tests") {
        for c in t
            .get("alert_rule_test")
            .and_then(Yaml::as_sequence)
            .into_iter()
            .flatten()
        {
            out.push((
                ystr(c, "alertname").to_string(),
                seconds(ystr(c, "eval_time")),
                c.get("exp_alerts")
                    .and_then(Yaml::as_sequence)
                    .cloned()
                    .unwrap_or_default(),
            ));
        }
    }
    out
}

#[test]
fn promtool_unit_tests_pass_with_a_firing_and_a_quiet_case_for_every_alert() {
    let tests = kit().join("tests/alerts.test.yaml");
    let out = promtool(&["test", "rules", &tests.display().to_string()]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("SUCCESS"), "{}", text(&out));

    let doc = yaml(&std::fs::read_to_string(&tests).unwrap());
    let cases = unit_cases(&doc);
    for r in plain().iter().filter(|r| r.kind == "alert") {
        let mine: Vec<_> = cases.iter().filter(|(a, ..)| *a == r.name).collect();
        let fires: Vec<_> = mine.iter().filter(|(_, _, e)| !e.is_empty()).collect();
        assert!(!fires.is_empty(), "{}: no unit test where it fires", r.name);
        // Quiet after its `for`: not merely still pending.
        assert!(
            mine.iter()
                .any(|(_, t, e)| e.is_empty() && *t > seconds(&r.for_)),
            "{}: no unit test where it stays quiet after its for ({})",
            r.name,
            r.for_
        );
        for (_, _, exp) in fires {
            for a in exp {
                let labels = a.get("exp_labels").expect("exp_labels");
                assert!(
                    !ystr(labels, "severity").is_empty(),
                    "{}: {labels:?}",
                    r.name
                );
                let ann = a.get("exp_annotations").expect("exp_annotations");
                let node = ystr(labels, "node");
                for k in ["summary", "description"] {
                    assert!(
                        ystr(ann, k).contains(node),
                        "{}: the {k} names the node {node:?}",
                        r.name
                    );
                }
            }
        }
    }
    for (a, ..) in &cases {
        assert!(
            plain().iter().any(|r| r.kind == "alert" && r.name == *a),
            "unit test of an alert that does not exist: {a}"
        );
    }

    // The unit tests can fail: with a lower failure threshold, the quiet case (one pod retried by the
    // kubelet) pages.
    let d = TempDir::new("promtool-test");
    d.write(
        "rules.yaml",
        run_ok(render_cmd(&[
            "--set",
            "ADD_FAILURES_PER_SECOND=0.05",
            "--rules",
            "-",
        ])),
    );
    let t = std::fs::read_to_string(&tests)
        .unwrap()
        .replace("../prometheus/istio-cni-node.rules.yaml", "rules.yaml");
    let tf = d.write("alerts.test.yaml", t);
    let out = promtool(&["test", "rules", &tf.display().to_string()]);
    assert!(!out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("IstioCniAddFailures"), "{}", text(&out));
}

#[test]
fn every_alert_has_a_severity_a_summary_and_a_description_naming_the_node() {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let alerts: Vec<Rule> = plain().into_iter().filter(|r| r.kind == "alert").collect();
    assert!(alerts.len() >= 8, "{alerts:?}");
    for a in &alerts {
        let sev = a.rule["labels"]["severity"].as_str().unwrap_or("");
        assert!(
            matches!(sev, "critical" | "warning"),
            "{}: severity {sev:?}",
            a.name
        );
        let summary = a.rule["annotations"]["summary"].as_str().unwrap_or("");
        let desc = a.rule["annotations"]["description"].as_str().unwrap_or("");
        assert!(!summary.is_empty() && desc.len() > 100, "{}", a.name);
        // Every alert but "no agent at all" is about one node, and says which.
        if a.name != "IstioCniAgentAbsent" {
            for t in [summary, desc] {
                assert!(t.contains("{{ $labels.node }}"), "{}: {t}", a.name);
            }
        }
        // A runbook in the README's Monitoring section.
        assert!(
            readme.contains(&format!("#### {}", a.name)),
            "README: no runbook heading for {}",
            a.name
        );
    }
    // Every setting argued in the README.
    for (k, v) in settings() {
        assert!(
            readme.contains(&format!("`{k}`")),
            "README: setting {k} (default {v}) not documented"
        );
    }
}

/// Every `expr` anywhere in a JSON document.
fn exprs_anywhere(v: &serde_json::Value, out: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, x) in m {
                if k == "expr" {
                    out.push(x.as_str().unwrap_or("<not a string>").to_string());
                } else {
                    exprs_anywhere(x, out);
                }
            }
        }
        serde_json::Value::Array(a) => a.iter().for_each(|x| exprs_anywhere(x, out)),
        _ => {}
    }
}

/// The `istio_cni_*` metric names an expression reads (a histogram's `_bucket`, `_count`, `_sum` as the
/// histogram).
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let b = expr.as_bytes();
    let mut i = 0;
    while let Some(p) = expr[i..].find("istio_cni_") {
        let start = i + p;
        // Not the tail of a recorded series' name (node:istio_cni_...).
        let prev = start.checked_sub(1).map(|j| b[j]);
        let mut end = start;
        while end < b.len() && (b[end].is_ascii_alphanumeric() || b[end] == b'_' || b[end] == b':')
        {
            end += 1;
        }
        if prev != Some(b':') && !prev.is_some_and(|c| c.is_ascii_alphanumeric() || c == b'_') {
            let mut n = expr[start..end].to_string();
            for suffix in ["_bucket", "_count", "_sum"] {
                if let Some(s) = n.strip_suffix(suffix) {
                    n = s.to_string();
                }
            }
            if !n.contains(':') {
                out.insert(n);
            }
        }
        i = end.max(start + 1);
    }
    out
}

fn source_text() -> String {
    fn walk(d: &Path, out: &mut String) {
        for e in std::fs::read_dir(d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push_str(&std::fs::read_to_string(&p).unwrap());
            }
        }
    }
    let mut s = String::new();
    walk(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), &mut s);
    s
}

/// The audit's series (issue 30): not in `src/` yet.
const AUDIT_METRICS: [&str; 3] = [
    "istio_cni_audit_pods",
    "istio_cni_audit_rounds_total",
    "istio_cni_audit_round_duration_seconds",
];

#[test]
fn dashboard_has_its_variables_and_every_panel_queries_what_the_e2e_test_asks() {
    let d = dashboard();
    assert!(d["uid"].as_str().is_some_and(|u| !u.is_empty()));
    assert!(d["schemaVersion"].as_u64().is_some());
    let ds = serde_json::json!({"type": "prometheus", "uid": "${datasource}"});

    // Variables: the data source, and the node (from the agents' own series, all or several).
    let vars = d["templating"]["list"].as_array().expect("templating.list");
    let var = |name: &str| {
        vars.iter()
            .find(|v| v["name"] == name)
            .unwrap_or_else(|| panic!("no variable {name}"))
    };
    let dsv = var("datasource");
    assert_eq!(dsv["type"], "datasource");
    assert_eq!(dsv["query"], "prometheus");
    let node = var("node");
    assert_eq!(node["type"], "query");
    assert_eq!(node["datasource"], ds);
    assert_eq!(node["includeAll"], true);
    assert_eq!(node["multi"], true);
    assert_eq!(node["allValue"], ".*");
    let nq = node["query"]["query"].as_str().expect("node query");
    assert_eq!(node["definition"].as_str(), Some(nq));
    let promql = label_values_promql(nq).expect("label_values(METRIC, node)");
    assert!(promql.starts_with("group by (node) "), "{promql}");

    // Panels: rows aside, each has the data source variable, queries with distinct refIds, each query
    // filtered by the node variable; ids unique; the grid 24 wide without overlaps.
    let mut ids = BTreeSet::new();
    let mut cells: Vec<(String, [i64; 4])> = vec![];
    for p in panels(&d) {
        let title = p["title"].as_str().unwrap_or("");
        assert!(!title.is_empty(), "a panel without a title: {p}");
        assert!(
            ids.insert(p["id"].as_u64().expect("id")),
            "{title}: duplicate id"
        );
        let g = &p["gridPos"];
        let rect = ["x", "y", "w", "h"].map(|k| {
            g[k].as_i64()
                .unwrap_or_else(|| panic!("{title}: gridPos.{k}"))
        });
        assert!(
            rect[0] >= 0 && rect[2] > 0 && rect[0] + rect[2] <= 24,
            "{title}: {g}"
        );
        for (other, r) in &cells {
            let apart = rect[0] + rect[2] <= r[0]
                || r[0] + r[2] <= rect[0]
                || rect[1] + rect[3] <= r[1]
                || r[1] + r[3] <= rect[1];
            assert!(apart, "{title} overlaps {other}");
        }
        cells.push((title.to_string(), rect));
        if p["type"] == "row" {
            continue;
        }
        assert_eq!(p["datasource"], ds, "{title}");
        let targets = p["targets"].as_array().filter(|t| !t.is_empty());
        let targets = targets.unwrap_or_else(|| panic!("{title}: no query"));
        let mut refs = BTreeSet::new();
        for t in targets {
            assert_eq!(t["datasource"], ds, "{title}");
            assert!(
                refs.insert(t["refId"].as_str().expect("refId")),
                "{title}: refIds"
            );
            let e = t["expr"].as_str().unwrap_or("");
            assert!(
                e.contains(r#"node=~"$node""#),
                "{title}: not filtered by node: {e}"
            );
        }
    }

    // Every expression anywhere in the dashboard is one the end-to-end test asks Prometheus (all_queries),
    // and every classification names an existing query.
    let all = all_queries();
    let mut anywhere = vec![];
    exprs_anywhere(&d, &mut anywhere);
    assert!(anywhere.len() >= 20, "{anywhere:?}");
    for e in &anywhere {
        assert!(
            all.iter().any(|q| q.expr == *e),
            "not asked by the e2e test: {e}"
        );
    }
    let origins: BTreeMap<&str, &str> = all
        .iter()
        .map(|q| (q.origin.as_str(), q.expr.as_str()))
        .collect();
    assert_eq!(origins.len(), all.len(), "two queries share an origin");
    for o in EXPECT_DATA.iter().chain(AWAITING_AUDIT).chain(CORE) {
        assert!(origins.contains_key(o), "no query {o}");
    }
    for o in AWAITING_AUDIT {
        assert!(!EXPECT_DATA.contains(o), "{o}");
    }
    for o in CORE {
        assert!(EXPECT_DATA.contains(o), "{o}");
    }
    // The audit's panels are all listed (so that they are switched on together when the audit lands).
    let audit: Vec<&str> = all
        .iter()
        .filter(|q| q.origin.starts_with("panel") && q.expr.contains("istio_cni_audit_"))
        .map(|q| q.origin.as_str())
        .collect();
    assert_eq!(audit, AWAITING_AUDIT.to_vec());

    // Every metric read exists in src/ (the audit's excepted), and every recorded series read is recorded.
    let src = source_text();
    let recorded: BTreeSet<String> = plain()
        .into_iter()
        .filter(|r| r.kind == "record")
        .map(|r| r.name)
        .collect();
    for q in &all {
        for m in metric_names(&q.expr) {
            assert!(
                src.contains(&format!("\"{m}\""))
                    || src.contains(&format!("{m} "))
                    || AUDIT_METRICS.contains(&m.as_str()),
                "{}: {m} is not a metric of src/",
                q.origin
            );
        }
        for word in q
            .expr
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        {
            if word.contains(':') && word.contains("istio_cni") {
                assert!(
                    recorded.contains(word),
                    "{}: {word} is recorded by no rule",
                    q.origin
                );
            }
        }
    }
    // The metric check can fail.
    assert!(!src.contains("\"istio_cni_pod_cache_podz\""));
    assert_eq!(
        metric_names("rate(istio_cni_pod_cache_podz_count[5m])"),
        BTreeSet::from(["istio_cni_pod_cache_podz".to_string()])
    );
}

/// The base DaemonSet's pod labels, its metrics port's name, and the namespace of the base.
fn daemonset() -> (BTreeMap<String, String>, String, String) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests/base");
    let ds = yaml(&std::fs::read_to_string(root.join("daemonset.yaml")).unwrap());
    let k = yaml(&std::fs::read_to_string(root.join("kustomization.yaml")).unwrap());
    let tmpl = &ds["spec"]["template"];
    let labels = tmpl["metadata"]["labels"]
        .as_mapping()
        .unwrap()
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().unwrap().to_string(),
                v.as_str().unwrap().to_string(),
            )
        })
        .collect();
    let c = &tmpl["spec"]["containers"][0];
    let port = c["ports"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|p| p["containerPort"].as_u64() == Some(15014))
        .expect("the container port 15014 (MONITORING_PORT)");
    (
        labels,
        ystr(port, "name").to_string(),
        ystr(&k, "namespace").to_string(),
    )
}

#[test]
fn scrape_configuration_and_pod_monitor_select_the_daemonset_and_label_the_node() {
    let (labels, port, ns) = daemonset();
    let job_setting = settings().into_iter().find(|(k, _)| k == "JOB").unwrap().1;

    // The plain job: pod discovery in the DaemonSet's namespace; keeps its pods and port; node relabelled.
    let job = scrape_job();
    assert_eq!(ystr(&job, "job_name"), job_setting);
    let sd = &job["kubernetes_sd_configs"][0];
    assert_eq!(ystr(sd, "role"), "pod");
    assert_eq!(
        sd["namespaces"]["names"],
        Yaml::Sequence(vec![Yaml::from(ns.clone())])
    );
    let relabel = job["relabel_configs"].as_sequence().unwrap();
    let keeps: Vec<(&str, &str)> = relabel
        .iter()
        .filter(|r| ystr(r, "action") == "keep")
        .map(|r| (r["source_labels"][0].as_str().unwrap(), ystr(r, "regex")))
        .collect();
    assert!(
        keeps.contains(&(
            "__meta_kubernetes_pod_label_k8s_app",
            labels["k8s-app"].as_str()
        )),
        "{keeps:?}"
    );
    assert!(
        keeps.contains(&("__meta_kubernetes_pod_container_port_name", port.as_str())),
        "{keeps:?}"
    );
    assert!(relabel.iter().any(|r| r["source_labels"][0].as_str()
        == Some("__meta_kubernetes_pod_node_name")
        && ystr(r, "target_label") == "node"));

    // The PodMonitor: the same pods, port and node label; the job from the pods' k8s-app label.
    let pm = yaml(&std::fs::read_to_string(kit().join("podmonitor.yaml")).unwrap());
    assert_eq!(ystr(&pm, "kind"), "PodMonitor");
    let spec = &pm["spec"];
    let job_label = ystr(spec, "jobLabel");
    assert_eq!(
        labels.get(job_label),
        Some(&job_setting),
        "the job name comes from the pods' {job_label} label"
    );
    for (k, v) in spec["selector"]["matchLabels"].as_mapping().unwrap() {
        assert_eq!(
            labels.get(k.as_str().unwrap()).map(String::as_str),
            v.as_str(),
            "selector {k:?}"
        );
    }
    assert_eq!(
        spec["namespaceSelector"]["matchNames"],
        Yaml::Sequence(vec![Yaml::from(ns)])
    );
    let ep = &spec["podMetricsEndpoints"][0];
    assert_eq!(ystr(ep, "port"), port);
    assert_eq!(ystr(ep, "path"), ystr(&job, "metrics_path"));
    assert!(ep["relabelings"]
        .as_sequence()
        .unwrap()
        .iter()
        .any(
            |r| r["sourceLabels"][0].as_str() == Some("__meta_kubernetes_pod_node_name")
                && ystr(r, "targetLabel") == "node"
        ));
}
