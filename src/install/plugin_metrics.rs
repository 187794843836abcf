//! What the plugin reports about its ADDs, on the installer's `/metrics`: the records it relays
//! ([`crate::plugin::record`]) become `istio_cni_plugin_add_duration_seconds{backend,result}` (a histogram
//! from 0.1 ms to 10 s) and `istio_cni_pod_lookups_total{source,reason}` (`source="cache"`, or
//! `source="api"` with the reason the cache did not answer). Process-wide; a series appears after its first
//! record.

use crate::metrics::{self, Histogram};
use crate::plugin::record::{AddRecord, Lookup, API_REASONS, BACKENDS, OUTCOMES};
use std::sync::atomic::{AtomicU64, Ordering};

pub const ADD_DURATION: &str = "istio_cni_plugin_add_duration_seconds";
pub const POD_LOOKUPS: &str = "istio_cni_pod_lookups_total";

static ADDS: [Histogram; BACKENDS.len() * OUTCOMES.len()] =
    [const { Histogram::new() }; BACKENDS.len() * OUTCOMES.len()];
static FROM_CACHE: AtomicU64 = AtomicU64::new(0);
static FROM_API: [AtomicU64; API_REASONS.len()] = [const { AtomicU64::new(0) }; API_REASONS.len()];

/// Counts one ADD record.
pub fn observe(r: &AddRecord) {
    let b = BACKENDS.iter().position(|(x, _)| *x == r.backend);
    let o = OUTCOMES.iter().position(|(x, _)| *x == r.outcome);
    if let (Some(b), Some(o)) = (b, o) {
        ADDS[b * OUTCOMES.len() + o].observe(r.seconds);
    }
    match r.lookup {
        Some(Lookup::Cache) => {
            FROM_CACHE.fetch_add(1, Ordering::Relaxed);
        }
        Some(Lookup::Api(reason)) => {
            if let Some(i) = API_REASONS.iter().position(|x| *x == reason) {
                FROM_API[i].fetch_add(1, Ordering::Relaxed);
            }
        }
        None => {}
    }
}

/// Handles a datagram from the relay socket if it is a record; `false` for a log line.
pub fn take(data: &[u8]) -> bool {
    match AddRecord::decode(data) {
        Some(r) => {
            observe(&r);
            true
        }
        // A record we cannot read is dropped, not logged as a line.
        None => data.starts_with(crate::plugin::record::PREFIX.as_bytes()),
    }
}

/// The series seen so far ("" before the first record).
pub fn render() -> String {
    let mut out = String::new();
    let mut first = true;
    for (b, (_, backend)) in BACKENDS.iter().enumerate() {
        for (o, (_, result)) in OUTCOMES.iter().enumerate() {
            let h = &ADDS[b * OUTCOMES.len() + o];
            if h.count() == 0 {
                continue;
            }
            if std::mem::take(&mut first) {
                metrics::header(
                    &mut out,
                    ADD_DURATION,
                    "histogram",
                    "Duration of the CNI plugin's ADD on this node (from reading its input to its reply), by rule backend and result, as the plugin reports it.",
                );
            }
            h.render(
                &mut out,
                ADD_DURATION,
                &[("backend", backend), ("result", result)],
            );
        }
    }
    let cache = FROM_CACHE.load(Ordering::Relaxed);
    let api: Vec<(&str, u64)> = API_REASONS
        .iter()
        .zip(&FROM_API)
        .map(|(r, n)| (*r, n.load(Ordering::Relaxed)))
        .filter(|(_, n)| *n > 0)
        .collect();
    if cache > 0 || !api.is_empty() {
        metrics::header(
            &mut out,
            POD_LOOKUPS,
            "counter",
            "Pod objects the CNI plugin read for ADD, by source (the node's pod cache, or the API server and why not the cache).",
        );
        if cache > 0 {
            metrics::sample(&mut out, POD_LOOKUPS, &[("source", "cache")], cache as f64);
        }
        for (reason, n) in api {
            metrics::sample(
                &mut out,
                POD_LOOKUPS,
                &[("reason", reason), ("source", "api")],
                n as f64,
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugin::record::{Backend, Outcome};

    #[test]
    fn records_become_series_and_log_lines_do_not() {
        assert!(!take(br#"{"level":"info","msg":"ADD a/b: redirected"}"#));
        assert!(!take(b"plain line"));
        // Unreadable records are swallowed, never relayed as log lines.
        assert!(take(br#"{"record":"add","seconds":"x"}"#));
        let r = AddRecord {
            seconds: 0.003,
            backend: Backend::Iptables,
            outcome: Outcome::Redirected,
            lookup: Some(Lookup::Api("no_socket")),
        };
        assert!(take(r.encode().as_bytes()));
        observe(&AddRecord {
            lookup: Some(Lookup::Cache),
            ..r
        });
        let text = render();
        assert!(text.contains("# TYPE istio_cni_plugin_add_duration_seconds histogram\n"));
        assert!(
            text.contains("istio_cni_plugin_add_duration_seconds_bucket{backend=\"iptables\",result=\"redirected\",le=\"0.005\"} "),
            "{text}"
        );
        assert!(
            text.contains("istio_cni_pod_lookups_total{reason=\"no_socket\",source=\"api\"} "),
            "{text}"
        );
        assert!(
            text.contains("istio_cni_pod_lookups_total{source=\"cache\"} "),
            "{text}"
        );
    }
}
