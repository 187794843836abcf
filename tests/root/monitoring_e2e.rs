//! The monitoring kit against a real Prometheus (Debian's `prometheus`, on 127.0.0.1 at a free port, its
//! storage in a temp dir, killed at the end) scraping a running `install-cni` (with the HTTPS API double, the
//! pod cache and the in-process repair agent) through the documented scrape job: its relabelling, metrics
//! path and port as shipped, with the pods given by a file (`file_sd_configs` carrying the `__meta_kubernetes_*`
//! labels pod discovery would give, from the base DaemonSet) instead of the API server; decoy pods the job
//! must drop beside it. Its rules are the shipped ones rendered with every `for` at 5 s.
//!
//! The plugin is exec'd like a runtime for pods that are redirected (iptables and nftables, from the cache),
//! skipped (no sidecar), redirected from the API server (the cache off in the pod's configuration) and
//! failing (a malformed annotation). Then every expression of the dashboard and the rules must evaluate
//! without error, the ones in [`EXPECT_DATA`] must return data (the core panels numbers), every rule must be
//! healthy, the failing-ADD alert must be pending or firing, and `promtool check metrics` must accept the
//! agent's exposition.

use crate::support::e2e::Node;
use crate::support::install::node::get;
use crate::support::install::{agent_dir::AgentDir, Proc};
use crate::support::monitoring::*;
use crate::support::prometheus::*;
use crate::support::*;
use serde_json::json;
use std::time::Duration;

const PRIMARY: &str =
    r#"{"cniVersion":"1.0.0","name":"k8s-pod-network","plugins":[{"type":"ptp"}]}"#;
/// The node name the API double's pods are bound to, and the pod discovery would report.
const NODE: &str = "node1";

/// `install-cni` for `node` (the API double, the pod cache, the in-process repair agent), ready and its pod
/// watch listed; its health and metrics ports. Started again on other ports should one it was given be
/// taken in between (free ports are found by binding and releasing; other tests run alongside).
fn start_agent(node: &Node, root: &AgentDir) -> (Proc, u16, u16) {
    root.write("conf/10-ptp.conflist", PRIMARY);
    for attempt in 1.. {
        let (health, metrics) = (free_port(), free_port());
        let env = root.env(
            &node.dir.join("run"),
            Some(node.srv.addr()),
            (health, metrics),
            &[
                ("REPAIR_ENABLED", "true"),
                ("REPAIR_NODE_NAME", NODE),
                ("AUDIT_INTERVAL", "1s"),
            ],
        );
        let mut agent = root.spawn(&env);
        let metrics_text = || get(metrics, "/metrics").map(|(_, b)| b).unwrap_or_default();
        let deadline = std::time::Instant::now() + BOUND;
        loop {
            if get(health, "/readyz").is_some_and(|(c, _)| c == 200)
                && metrics_text()
                    .contains(r#"istio_cni_kube_watch_initial_list_seconds{watch="pods"}"#)
            {
                return (agent, health, metrics);
            }
            if let Ok(Some(st)) = agent.child.try_wait() {
                let log = agent.stderr();
                assert!(
                    log.contains("in use") && attempt < 5,
                    "install-cni exited ({st}):\n{log}"
                );
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the agent not ready, or its pod watch not listed, within {BOUND:?}; /metrics:\n{}\nlog:\n{}",
                metrics_text(),
                agent.stderr()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    unreachable!()
}

#[test]
fn prometheus_scrapes_the_agent_and_every_dashboard_and_alert_query_works() {
    if !require_root() {
        return;
    }
    let started = std::time::Instant::now();
    let node = Node::new(67);
    let root = AgentDir::new("monitoring", node.srv.token(), node.srv.ca_pem());
    let (agent, health, metrics) = start_agent(&node, &root);
    let metrics_text = || get(metrics, "/metrics").map(|(_, b)| b).unwrap_or_default();

    // Prometheus: the agent's pod, and pods the job must drop (another app's metrics port, the agent's port
    // without that name, an evicted agent pod), all as pod discovery would report them.
    let ds = daemonset_pod();
    let agent_addr = format!("127.0.0.1:{metrics}");
    let other_app = vec![("k8s-app".to_string(), "kube-dns".to_string())];
    let targets = json!([
        sd_target(
            &agent_addr,
            NODE,
            &ds.namespace,
            "istio-cni-node-e2e",
            "Running",
            &ds.labels,
            &ds.container,
            &ds.port_name
        ),
        sd_target(
            &agent_addr,
            NODE,
            &ds.namespace,
            "coredns-e2e",
            "Running",
            &other_app,
            "coredns",
            &ds.port_name
        ),
        sd_target(
            &format!("127.0.0.1:{health}"),
            NODE,
            &ds.namespace,
            "istio-cni-node-e2e",
            "Running",
            &ds.labels,
            &ds.container,
            ""
        ),
        sd_target(
            &agent_addr,
            NODE,
            &ds.namespace,
            "istio-cni-node-evicted",
            "Failed",
            &ds.labels,
            &ds.container,
            &ds.port_name
        ),
    ]);
    let rules = rules_with_for("5s");
    let prom = Prometheus::start(
        &prometheus_config(),
        &[
            ("targets.json", &targets.to_string()),
            ("rules.yaml", &rules),
        ],
    );
    let job = settings().into_iter().find(|(k, _)| k == "JOB").unwrap().1;
    poll_query(
        &prom,
        "the agent scraped",
        &format!(r#"up{{job="{job}"}} == 1"#),
        |r| r.len() == 1,
    );
    let t = prom.api("/api/v1/targets", &[]).unwrap();
    let active = t["activeTargets"].as_array().unwrap();
    assert_eq!(active.len(), 1, "only the agent's pod is kept: {t}");
    let l = &active[0]["labels"];
    assert_eq!(
        (
            &l["job"],
            &l["node"],
            &l["namespace"],
            &l["pod"],
            &l["container"]
        ),
        (
            &json!(job),
            &json!(NODE),
            &json!(ds.namespace),
            &json!("istio-cni-node-e2e"),
            &json!(ds.container)
        ),
        "{l}"
    );
    assert_eq!(
        active[0]["scrapeUrl"],
        json!(format!("http://{agent_addr}/metrics"))
    );
    assert_eq!(t["droppedTargets"].as_array().unwrap().len(), 3, "{t}");

    // ADDs, one of each kind first: a labelled series appears at its first record, and rate() needs two
    // samples of it, so the series must be scraped before the ADDs that should count.
    let redirected_ipt = node.bare_pod("mon-ipt", 1);
    let redirected_nft = node.bare_pod("mon-nft", 2).with_native_nftables();
    let mut skipped = node.pod_without_api_object("mon-plain");
    skipped.uid = node.add_plain_pod("mon-plain");
    let from_api = node.bare_pod("mon-api", 3).without_pod_cache();
    let failing = node.bare_pod_with(
        "mon-bad",
        4,
        r#""traffic.sidecar.istio.io/excludeOutboundIPRanges": "*""#,
        "",
    );
    let add_all = |failures: usize| {
        redirected_ipt.add().assert_success();
        redirected_nft.add().assert_success();
        skipped.add().assert_success();
        from_api.add().assert_success();
        for _ in 0..failures {
            failing.add().assert_cni_error(100);
        }
    };
    let every_kind = || {
        let t = metrics_text();
        let adds: Vec<&str> = t
            .lines()
            .filter(|l| l.starts_with("istio_cni_plugin_add_duration_seconds_count{"))
            .collect();
        ["failed", "redirected", "skipped"]
            .iter()
            .all(|r| adds.iter().any(|l| l.contains(&format!("result=\"{r}\""))))
            && t.contains(r#"istio_cni_pod_lookups_total{source="cache"}"#)
            && t.contains(r#"source="api"}"#)
    };
    // Again should a record be dropped (the relay socket's queue full), bounded.
    for attempt in 0.. {
        add_all(1);
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while !every_kind() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        if every_kind() {
            break;
        }
        assert!(
            attempt < 10,
            "the agent never counted one ADD of each kind:\n{}",
            metrics_text()
        );
    }
    let adds = "sum by (result) (istio_cni_plugin_add_duration_seconds_count)";
    poll_query(&prom, "the first ADDs scraped", adds, |r| {
        labels_of(r, "result") == ["failed", "redirected", "skipped"]
    });
    poll_query(
        &prom,
        "both lookup sources scraped",
        "sum by (source) (istio_cni_pod_lookups_total)",
        |r| labels_of(r, "source") == ["api", "cache"],
    );
    // Then the ones that count: 45 failures within the 5 m window are 0.15 failed ADDs per second, above
    // the default threshold (0.1), as a node failing every pod start would show.
    for _ in 0..3 {
        add_all(0);
    }
    add_all(45);
    // Prometheus has what the agent counted. (A record is dropped when the relay socket's queue is full, so
    // the agent's count, not ours.)
    let failed_now = || -> f64 {
        metrics_text()
            .lines()
            .filter(|l| {
                l.starts_with("istio_cni_plugin_add_duration_seconds_count{")
                    && l.contains(r#"result="failed""#)
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    let counted = failed_now();
    assert!(counted > 1.0, "{}", metrics_text());
    poll_query(
        &prom,
        "every ADD scraped",
        r#"sum(istio_cni_plugin_add_duration_seconds_count{result="failed"})"#,
        |r| r.first().is_some_and(|s| sample_value(s) >= counted),
    );

    // The agent's real exposition passes promtool's lint.
    let text = metrics_text();
    let mut check = std::process::Command::new(tool("promtool"));
    check
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped());
    let mut child = check
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), text.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics: {}{}\n{text}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    // The failing-ADD alert: pending or firing (its copy's `for` is 5 s).
    let deadline = std::time::Instant::now() + BOUND;
    loop {
        let alerts = prom.api("/api/v1/alerts", &[]).unwrap();
        let add = alerts["alerts"].as_array().unwrap().iter().find(|a| {
            a["labels"]["alertname"] == "IstioCniAddFailures" && a["labels"]["node"] == NODE
        });
        if add.is_some_and(|a| a["state"] == "pending" || a["state"] == "firing") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "IstioCniAddFailures neither pending nor firing within {BOUND:?}: {alerts}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }

    // Every query of the dashboard (the node variable at all nodes, and at this node) and of the rules
    // evaluates; those in EXPECT_DATA return data, the core panels numbers.
    let queries = all_queries();
    for q in &queries {
        for node_regex in [".*", NODE] {
            let expr = with_node(&q.expr, node_regex);
            let data = EXPECT_DATA.contains(&q.origin.as_str());
            let core = CORE.contains(&q.origin.as_str());
            let r = poll_query(&prom, &q.origin, &expr, |r| {
                !data || (!r.is_empty() && (!core || r.iter().any(|s| sample_value(s).is_finite())))
            });
            if q.origin == r#"panel "Pod lookups by source" A"# {
                assert_eq!(labels_of(&r, "source"), ["api", "cache"], "{expr}");
            }
        }
    }
    // The node variable lists this node.
    let d = dashboard();
    let var = d["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "node")
        .unwrap();
    let promql = label_values_promql(var["query"]["query"].as_str().unwrap()).unwrap();
    let r = prom.query(&promql).unwrap();
    assert_eq!(labels_of(&r, "node"), [NODE], "{promql}");

    // Every rule loaded (the shipped ones, by name) and evaluated without error.
    let mut want: Vec<String> = rule_queries(&rules_of(&yaml(&plain_rules_text())))
        .into_iter()
        .map(|q| q.origin)
        .collect();
    let groups = prom.api("/api/v1/rules", &[]).unwrap();
    let mut got = vec![];
    for g in groups["groups"].as_array().unwrap() {
        for r in g["rules"].as_array().unwrap() {
            let kind = if r["type"] == "alerting" {
                "alert"
            } else {
                "record"
            };
            got.push(format!("{kind} {}", r["name"].as_str().unwrap()));
            assert_eq!(r["health"], "ok", "{r}");
        }
    }
    got.sort();
    want.sort();
    assert_eq!(got, want);

    eprintln!(
        "monitoring e2e: {} queries evaluated, {} with data, in {:?}",
        queries.len(),
        EXPECT_DATA.len(),
        started.elapsed()
    );
    drop(prom);
    drop(agent);
}
