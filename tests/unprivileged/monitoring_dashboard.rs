//! The monitoring kit's dashboard and scrape configuration (`manifests/monitoring`) without a server: the
//! dashboard's variables and panels, every expression in it one the end-to-end test asks Prometheus, every
//! metric it or a rule reads present in `src/`; the plain scrape job and the PodMonitor selecting the base
//! DaemonSet's pods and port and labelling the node.

use crate::support::monitoring::*;
use serde_yaml::Value as Yaml;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

fn plain() -> Vec<Rule> {
    rules_of(&yaml(&plain_rules_text()))
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
    for o in EXPECT_DATA.iter().chain(CORE) {
        assert!(origins.contains_key(o), "no query {o}");
    }
    for o in CORE {
        assert!(EXPECT_DATA.contains(o), "{o}");
    }
    // The audit's panels all return data in the end-to-end test (its agent audits).
    for q in all
        .iter()
        .filter(|q| q.origin.starts_with("panel") && q.expr.contains("istio_cni_audit_"))
    {
        assert!(EXPECT_DATA.contains(&q.origin.as_str()), "{}", q.origin);
    }

    // Every metric read exists in src/, and every recorded series read is recorded.
    let src = source_text();
    let recorded: BTreeSet<String> = plain()
        .into_iter()
        .filter(|r| r.kind == "record")
        .map(|r| r.name)
        .collect();
    for q in &all {
        for m in metric_names(&q.expr) {
            assert!(
                src.contains(&format!("\"{m}\"")) || src.contains(&format!("{m} ")),
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

#[test]
fn scrape_configuration_and_pod_monitor_select_the_daemonset_and_label_the_node() {
    let ds = daemonset_pod();
    let labels: BTreeMap<String, String> = ds.labels.iter().cloned().collect();
    let (port, ns) = (ds.port_name.clone(), ds.namespace.clone());
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
