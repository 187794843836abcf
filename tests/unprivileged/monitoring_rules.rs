//! The monitoring kit's rules (`manifests/monitoring`) without a server: one source for both rules files
//! (`render --check`, and the PrometheusRule's groups equal to the plain file's), `render` refusing bad
//! settings, `promtool check rules` on every rules file, `promtool test rules` with a firing and a quiet case
//! for every alert, and the alerts' labels, annotations and runbooks. Debian's `promtool` (package
//! `prometheus`, `scripts/setup base`).

use crate::support::monitoring::*;
use crate::support::TempDir;
use serde_yaml::Value as Yaml;
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
    let mut files: Vec<_> = std::fs::read_dir(kit().join("tests"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".test.yaml"))
        .collect();
    files.sort();
    assert!(!files.is_empty());
    let mut cases = vec![];
    for f in &files {
        let out = promtool(&["test", "rules", &f.display().to_string()]);
        assert!(out.status.success(), "{}", text(&out));
        assert!(text(&out).contains("SUCCESS"), "{}", text(&out));
        cases.extend(unit_cases(&yaml(&std::fs::read_to_string(f).unwrap())));
    }
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
    let t = std::fs::read_to_string(kit().join("tests/pods.test.yaml"))
        .unwrap()
        .replace("../prometheus/istio-cni-node.rules.yaml", "rules.yaml");
    let tf = d.write("pods.test.yaml", t);
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
