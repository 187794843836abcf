//! The monitoring kit (`manifests/monitoring`) as the tests read it: the rules (rendered by its `render`
//! script from `rules.yaml.in` and `settings.env`), the dashboard's queries and variables, the scrape
//! configuration, and Debian's `promtool` and `prometheus` (the `prometheus` package, `scripts/setup base`).
//! [`super::prometheus`] runs a real server for the end-to-end test (`tests/root/monitoring_e2e.rs`).
//!
//! Every PromQL expression the kit ships is a [`Query`] named by where it comes from (`panel "<title>" <refId>`,
//! `annotation "<name>"`, `record <name>`, `alert <name>`); [`EXPECT_DATA`] says which of them the end-to-end
//! test must see return data.

use serde_json::Value as Json;
use serde_yaml::Value as Yaml;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The queries that must return data once the end-to-end test's agent has been scraped and its ADDs
/// (redirected, skipped, failed; from the cache and from the API server) recorded, and its audit has
/// completed rounds (`AUDIT_INTERVAL=1s`; every state's series is there from the start). Every other query must
/// evaluate without error: the repair panel (no pod is broken there), the alerts that must not fire, the
/// alerts annotation.
pub const EXPECT_DATA: &[&str] = &[
    r#"panel "Agents ready" A"#,
    r#"panel "Agents not ready" A"#,
    r#"panel "Agents not answering scrapes" A"#,
    r#"panel "Failed ADDs (1 h)" A"#,
    r#"panel "Readiness by node" A"#,
    r#"panel "Start-up to first ready" A"#,
    r#"panel "ADD rate by backend and result" A"#,
    r#"panel "ADD failures by node" A"#,
    r#"panel "ADD latency p50 and p99 by backend and result" A"#,
    r#"panel "ADD latency p50 and p99 by backend and result" B"#,
    r#"panel "Pod lookups by source" A"#,
    r#"panel "API lookups by reason" A"#,
    r#"panel "Lookups from the API server, cache enabled" A"#,
    r#"panel "Pod cache answers by result" A"#,
    r#"panel "Pods in the pod cache" A"#,
    r#"panel "Watch first response" A"#,
    r#"panel "Watch initial list" A"#,
    r#"panel "Watch restarts (1 h)" A"#,
    r#"panel "Audit verdicts" A"#,
    r#"panel "Pods missing or bypassed by node" A"#,
    r#"panel "Audit rounds" A"#,
    r#"panel "Audit round duration" A"#,
    "record node:istio_cni_agent_up:max",
    "record node_backend_result:istio_cni_plugin_add:rate5m",
    "record node_backend_result_le:istio_cni_plugin_add_duration_seconds_bucket:rate5m",
    "record node_backend:istio_cni_plugin_add_duration_seconds:p50_5m",
    "record node_backend:istio_cni_plugin_add_duration_seconds:p99_5m",
    "record node_source_reason:istio_cni_pod_lookups:rate5m",
    "record node:istio_cni_pod_lookups_api:ratio_rate5m",
    "alert IstioCniAddFailures",
];

/// The core panels: their data must be numbers (a quantile of no ADDs is NaN), not only series.
pub const CORE: &[&str] = &[
    r#"panel "ADD rate by backend and result" A"#,
    r#"panel "ADD latency p50 and p99 by backend and result" A"#,
    r#"panel "ADD latency p50 and p99 by backend and result" B"#,
    r#"panel "Pod lookups by source" A"#,
];

/// `manifests/monitoring`.
pub fn kit() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests/monitoring")
}

/// `name` on PATH (or in /usr/bin, /usr/sbin), or a failure saying what installs it.
pub fn tool(name: &str) -> PathBuf {
    let path = std::env::var("PATH").unwrap_or_default();
    let found = path
        .split(':')
        .chain(["/usr/bin", "/usr/sbin"])
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!("{name} not found: Debian's `prometheus` package provides it (scripts/setup base installs it)")
        });
    found
}

/// Runs `cmd`; its stdout, or a failure with both streams.
pub fn run_ok(mut cmd: Command) -> String {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    let (o, e) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success(),
        "{cmd:?}: {}\nstdout:\n{o}\nstderr:\n{e}",
        out.status
    );
    o.into_owned()
}

/// `manifests/monitoring/render ARGS` (python3).
pub fn render_cmd(args: &[&str]) -> Command {
    let mut c = Command::new("python3");
    c.arg(kit().join("render")).args(args);
    c
}

/// The settings of `settings.env`, in order.
pub fn settings() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(kit().join("settings.env")).expect("settings.env");
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (k, v) = l.split_once('=').expect("NAME=VALUE");
            (k.to_string(), v.to_string())
        })
        .collect()
}

/// The plain rules file at the default settings (as committed).
pub fn plain_rules_text() -> String {
    std::fs::read_to_string(kit().join("prometheus/istio-cni-node.rules.yaml")).expect("rules file")
}

/// A rules file rendered with every `for` set to `for_` (the end-to-end test's copy: the same groups and
/// expressions, quicker to fire).
pub fn rules_with_for(for_: &str) -> String {
    let sets: Vec<String> = settings()
        .into_iter()
        .filter(|(k, _)| k.ends_with("_FOR"))
        .map(|(k, _)| format!("{k}={for_}"))
        .collect();
    let mut args = vec![];
    for s in &sets {
        args.extend(["--set", s.as_str()]);
    }
    args.extend(["--rules", "-"]);
    run_ok(render_cmd(&args))
}

pub fn yaml(text: &str) -> Yaml {
    serde_yaml::from_str(text).unwrap_or_else(|e| panic!("YAML: {e}\n{text}"))
}

/// `v[key]` as a string ("" when missing or not a string).
pub fn ystr<'a>(v: &'a Yaml, key: &str) -> &'a str {
    v.get(key).and_then(Yaml::as_str).unwrap_or("")
}

#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    pub group: String,
    /// "record" or "alert".
    pub kind: &'static str,
    pub name: String,
    pub expr: String,
    /// The alert's `for` ("" for none).
    pub for_: String,
    pub rule: Yaml,
}

/// The rules of a rules document (`groups:`).
pub fn rules_of(doc: &Yaml) -> Vec<Rule> {
    let groups = doc
        .get("groups")
        .and_then(Yaml::as_sequence)
        .expect("groups: a list");
    let mut out = vec![];
    for g in groups {
        for r in g.get("rules").and_then(Yaml::as_sequence).expect("rules") {
            let (kind, name) = match (r.get("record"), r.get("alert")) {
                (Some(n), None) => ("record", n),
                (None, Some(n)) => ("alert", n),
                _ => panic!("a rule is a record or an alert: {r:?}"),
            };
            out.push(Rule {
                group: ystr(g, "name").to_string(),
                kind,
                name: name.as_str().expect("a rule's name").to_string(),
                expr: ystr(r, "expr").trim().to_string(),
                for_: ystr(r, "for").to_string(),
                rule: r.clone(),
            });
        }
    }
    out
}

/// One PromQL expression the kit ships, named by where it comes from.
#[derive(Debug, Clone, PartialEq)]
pub struct Query {
    pub origin: String,
    pub expr: String,
}

pub fn dashboard() -> Json {
    let text = std::fs::read_to_string(kit().join("grafana-dashboard.json")).expect("dashboard");
    serde_json::from_str(&text).expect("the dashboard is JSON")
}

/// The dashboard's panels, those inside rows included.
pub fn panels(d: &Json) -> Vec<&Json> {
    fn walk<'a>(ps: &'a Json, out: &mut Vec<&'a Json>) {
        for p in ps.as_array().into_iter().flatten() {
            out.push(p);
            if let Some(inner) = p.get("panels") {
                walk(inner, out);
            }
        }
    }
    let mut out = vec![];
    walk(&d["panels"], &mut out);
    out
}

/// Every query of the dashboard: each panel's targets, each annotation's.
pub fn dashboard_queries(d: &Json) -> Vec<Query> {
    let mut out = vec![];
    for p in panels(d) {
        let title = p["title"].as_str().unwrap_or("");
        for t in p["targets"].as_array().into_iter().flatten() {
            out.push(Query {
                origin: format!("panel {title:?} {}", t["refId"].as_str().unwrap_or("?")),
                expr: t["expr"].as_str().unwrap_or("").to_string(),
            });
        }
    }
    for a in d["annotations"]["list"].as_array().into_iter().flatten() {
        if let Some(e) = a["expr"].as_str() {
            out.push(Query {
                origin: format!("annotation {:?}", a["name"].as_str().unwrap_or("")),
                expr: e.to_string(),
            });
        }
    }
    out
}

/// The rules' queries.
pub fn rule_queries(rules: &[Rule]) -> Vec<Query> {
    rules
        .iter()
        .map(|r| Query {
            origin: format!("{} {}", r.kind, r.name),
            expr: r.expr.clone(),
        })
        .collect()
}

/// Every query the kit ships: the dashboard's and the (committed, default) rules'.
pub fn all_queries() -> Vec<Query> {
    let mut q = dashboard_queries(&dashboard());
    q.extend(rule_queries(&rules_of(&yaml(&plain_rules_text()))));
    q
}

/// A dashboard expression as Prometheus takes it: the node variable at `node_regex`.
pub fn with_node(expr: &str, node_regex: &str) -> String {
    expr.replace("$node", node_regex)
}

/// A Grafana `label_values(METRIC, LABEL)` variable query as PromQL: `group by (LABEL) (METRIC)`.
pub fn label_values_promql(q: &str) -> Option<String> {
    let inner = q.trim().strip_prefix("label_values(")?.strip_suffix(')')?;
    let (metric, label) = inner.rsplit_once(',')?;
    Some(format!("group by ({}) ({})", label.trim(), metric.trim()))
}

/// The scrape configuration snippet (a list holding our one job).
pub fn scrape_job() -> Yaml {
    let text =
        std::fs::read_to_string(kit().join("prometheus/scrape-config.yaml")).expect("snippet");
    let doc = yaml(&text);
    let jobs = doc
        .as_sequence()
        .expect("the snippet is a list of scrape configs");
    assert_eq!(jobs.len(), 1, "one job in the snippet");
    jobs[0].clone()
}

/// The base DaemonSet's pod as pod discovery describes it: namespace, pod labels, container, the port named
/// like the one at 15014.
pub struct DaemonSetPod {
    pub namespace: String,
    pub labels: Vec<(String, String)>,
    pub container: String,
    pub port_name: String,
}

impl DaemonSetPod {
    pub fn label(&self, k: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(x, _)| x == k)
            .map(|(_, v)| v.as_str())
    }
}

pub fn daemonset_pod() -> DaemonSetPod {
    let base = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests/base");
    let ds = yaml(&std::fs::read_to_string(base.join("daemonset.yaml")).unwrap());
    let k = yaml(&std::fs::read_to_string(base.join("kustomization.yaml")).unwrap());
    let tmpl = &ds["spec"]["template"];
    let c = &tmpl["spec"]["containers"][0];
    let port = c["ports"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|p| p["containerPort"].as_u64() == Some(15014))
        .expect("container port 15014");
    DaemonSetPod {
        namespace: ystr(&k, "namespace").into(),
        labels: tmpl["metadata"]["labels"]
            .as_mapping()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.as_str().unwrap().into(), v.as_str().unwrap().into()))
            .collect(),
        container: ystr(c, "name").into(),
        port_name: ystr(port, "name").into(),
    }
}

/// Seconds in a Prometheus duration ("5m", "1h30m", "0").
pub fn seconds(d: &str) -> u64 {
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
