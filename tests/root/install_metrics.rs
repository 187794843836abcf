//! The installer's `/metrics` after start and one ADD (root: the ADD programs a real pod namespace): every
//! series operators read to trust a node agent is there, with its labels, HELP and TYPE, and the whole
//! exposition parses with a real Prometheus text parser (the `prometheus-parse` crate; every line must be a
//! HELP, a TYPE or a sample).
//!
//! `install-cni` runs against the HTTPS API double with the in-process repair agent and the pod cache (their
//! one pod watch is the `pods` watch), and the plugin is exec'd like a runtime with the node's run dir, so its
//! ADD records go through the real relay socket: one ADD served by the pod cache, one with the cache off in
//! its configuration (`source="api"`, `reason="disabled"`).

use crate::support::e2e::Node;
use crate::support::install::agent_dir::AgentDir;
use crate::support::install::node::get;
use crate::support::*;
use prometheus_parse::{LineInfo, SampleType, Scrape, Value};
use std::time::Duration;

const PRIMARY: &str =
    r#"{"cniVersion":"1.0.0","name":"k8s-pod-network","plugins":[{"type":"ptp"}]}"#;

/// The exposition, checked line by line, then parsed.
fn scrape(text: &str) -> Scrape {
    for line in text.lines() {
        match LineInfo::parse(line) {
            LineInfo::Ignored => panic!("not a Prometheus text line: {line:?}\n{text}"),
            // The parser skips a sample whose value it cannot read; we do not.
            LineInfo::Sample { value, .. } => assert!(
                matches!(value, "+Inf" | "-Inf" | "NaN") || value.parse::<f64>().is_ok(),
                "bad sample value in {line:?}"
            ),
            _ => {}
        }
    }
    Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).expect("the exposition parses")
}

/// The TYPE line's kind of `name`.
fn type_of(text: &str, name: &str) -> Option<SampleType> {
    text.lines().find_map(|l| match LineInfo::parse(l) {
        LineInfo::Type {
            metric_name,
            metric_alias,
            sample_type,
        } if metric_name == name || metric_alias.as_deref() == Some(name) => Some(sample_type),
        _ => None,
    })
}

/// The samples of `name` (a histogram's buckets are grouped under its name, its `_sum` and `_count` are
/// samples of their own).
fn samples<'a>(s: &'a Scrape, name: &str) -> Vec<&'a prometheus_parse::Sample> {
    s.samples.iter().filter(|x| x.metric == name).collect()
}

/// HELP and TYPE present, TYPE as `kind`.
fn documented(text: &str, s: &Scrape, name: &str, kind: SampleType) {
    assert!(s.docs.contains_key(name), "no HELP for {name}:\n{text}");
    assert_eq!(type_of(text, name), Some(kind), "TYPE of {name}:\n{text}");
}

#[test]
fn every_metric_is_there_after_start_and_an_add_and_parses() {
    if !require_root() {
        return;
    }
    let node = Node::new(61);
    let root = AgentDir::new("metrics", node.srv.token(), node.srv.ca_pem());
    root.write("conf/10-ptp.conflist", PRIMARY);
    let (health, metrics) = (free_port(), free_port());
    let env = root.env(
        &node.dir.join("run"),
        Some(node.srv.addr()),
        (health, metrics),
        &[
            ("REPAIR_ENABLED", "true"),
            ("REPAIR_NODE_NAME", "node1"),
            ("NATIVE_NFTABLES", "true"),
        ],
    );
    let proc = root.spawn(&env);
    let metrics_text = || get(metrics, "/metrics").map(|(_, b)| b).unwrap_or_default();
    poll_until(
        "ready, and the pod watch listed",
        Duration::from_secs(20),
        || {
            get(health, "/readyz").is_some_and(|(c, _)| c == 200)
                && metrics_text()
                    .contains("istio_cni_kube_watch_initial_list_seconds{watch=\"pods\"}")
        },
    );

    // One ADD of a sidecar pod, as a runtime runs it, with the node's run dir (relay socket included): its
    // pod comes from the node's pod cache. Then one with the cache off in its configuration: from the API.
    let pod = node.bare_pod("metrics-app", 61).with_native_nftables();
    pod.add().assert_success();
    let uncached = node
        .bare_pod("metrics-api", 62)
        .with_native_nftables()
        .without_pod_cache();
    uncached.add().assert_success();
    let both = "istio_cni_plugin_add_duration_seconds_count{backend=\"nftables\",result=\"redirected\"} 2\n";
    poll_until(
        "both ADD records reached /metrics",
        Duration::from_secs(10),
        || metrics_text().contains(both),
    );
    let text = metrics_text();
    let s = scrape(&text);

    // The existing series, unchanged.
    documented(&text, &s, "istio_cni_install_ready", SampleType::Gauge);
    assert_eq!(
        samples(&s, "istio_cni_install_ready")[0].value,
        Value::Gauge(1.0)
    );
    documented(&text, &s, "istio_cni_installs_total", SampleType::Counter);
    assert!(samples(&s, "istio_cni_installs_total")
        .iter()
        .any(|x| x.labels.get("result") == Some("SUCCESS")));

    // Start-up: process start → first ready.
    documented(
        &text,
        &s,
        "istio_cni_startup_ready_seconds",
        SampleType::Gauge,
    );
    match samples(&s, "istio_cni_startup_ready_seconds")[..] {
        [x] => assert!(
            matches!(x.value, Value::Gauge(v) if v > 0.0 && v < 20.0),
            "{x:?}"
        ),
        ref other => panic!("{other:?}"),
    }

    // The watch gauges, labelled with the watch.
    for name in [
        "istio_cni_kube_watch_first_response_seconds",
        "istio_cni_kube_watch_initial_list_seconds",
    ] {
        documented(&text, &s, name, SampleType::Gauge);
        let xs = samples(&s, name);
        assert!(
            xs.iter().any(|x| x.labels.get("watch") == Some("pods")
                && matches!(x.value, Value::Gauge(v) if v > 0.0)),
            "{name}: {xs:?}"
        );
    }

    // The ADD histogram: two redirected nftables ADDs, every bucket and the +Inf one. The other series
    // this node's ADDs can report (nftables failed; none skipped or failed) are there at 0 from the start.
    let name = "istio_cni_plugin_add_duration_seconds";
    documented(&text, &s, name, SampleType::Histogram);
    let total = |x: &prometheus_parse::Sample| match &x.value {
        Value::Histogram(b) => b.last().map_or(0.0, |c| c.count),
        v => panic!("{v:?}"),
    };
    let h = samples(&s, name);
    let mut zero: Vec<_> = (h.iter().filter(|x| total(x) == 0.0))
        .map(|x| (x.labels.get("backend"), x.labels.get("result")))
        .collect();
    zero.sort();
    let expected = [
        ("nftables", "failed"),
        ("none", "failed"),
        ("none", "skipped"),
    ];
    assert_eq!(zero, expected.map(|(b, r)| (Some(b), Some(r))), "{h:?}");
    let h: Vec<_> = h.into_iter().filter(|x| total(x) > 0.0).collect();
    assert_eq!(h.len(), 1, "{h:?}");
    assert_eq!(h[0].labels.get("backend"), Some("nftables"), "{h:?}");
    assert_eq!(h[0].labels.get("result"), Some("redirected"), "{h:?}");
    match &h[0].value {
        Value::Histogram(b) => {
            assert_eq!(b.len(), 17, "0.1 ms … 10 s and +Inf: {b:?}");
            assert!(b
                .last()
                .is_some_and(|x| x.less_than.is_infinite() && x.count == 2.0));
            assert!(b.windows(2).all(|w| w[0].count <= w[1].count), "{b:?}");
        }
        v => panic!("{v:?}"),
    }
    assert!(text.contains(both), "{text}");

    // Where the pod object came from.
    documented(
        &text,
        &s,
        "istio_cni_pod_lookups_total",
        SampleType::Counter,
    );
    let l = samples(&s, "istio_cni_pod_lookups_total");
    // With the cache on, every reason it can miss for is there at 0 from the start.
    let zero: Vec<_> = (l.iter().filter(|x| x.value == Value::Counter(0.0)))
        .map(|x| (x.labels.get("source"), x.labels.get("reason")))
        .collect();
    assert_eq!(zero.len(), 12, "{l:?}");
    assert!(zero
        .iter()
        .all(|(s, r)| *s == Some("api") && !matches!(r, Some("disabled" | "other") | None)));
    let l: Vec<_> = l
        .into_iter()
        .filter(|x| x.value != Value::Counter(0.0))
        .collect();
    assert_eq!(l.len(), 2, "{l:?}");
    let source = |src: &str| {
        l.iter()
            .find(|x| x.labels.get("source") == Some(src))
            .copied()
    };
    let cache = source("cache").expect("a source=\"cache\" series");
    assert_eq!(cache.labels.get("reason"), None, "{l:?}");
    assert_eq!(cache.value, Value::Counter(1.0));
    let api = source("api").expect("a source=\"api\" series");
    assert_eq!(api.labels.get("reason"), Some("disabled"), "{l:?}");
    assert_eq!(api.value, Value::Counter(1.0));

    // The records did not replace the plugin's log lines: they are still relayed.
    for name in ["metrics-app", "metrics-api"] {
        assert!(
            proc.stderr().contains(&format!("ADD default/{name}")),
            "{}",
            proc.stderr()
        );
    }
}
