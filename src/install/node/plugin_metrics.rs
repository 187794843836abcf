//! What the plugin reports about its ADDs, on the installer's `/metrics`: the records it relays
//! ([`crate::addrecord`]) become `istio_cni_plugin_add_duration_seconds{backend,result}` (a histogram
//! from 0.1 ms to 10 s) and `istio_cni_pod_lookups_total{source,reason}` (`source="cache"`, or
//! `source="api"` with the reason the cache did not answer). Process-wide. The series this node's ADDs are
//! expected to report are there at 0 from the start ([`expect`]), the others appear at their first record.

use crate::addrecord::{AddRecord, Backend, Outcome};
use crate::metrics::{Cells, Counters, Family, Histogram};
use crate::podcache::{Miss, Source};
use std::sync::atomic::AtomicU64;

pub const ADD_DURATION: &str = "istio_cni_plugin_add_duration_seconds";
pub const POD_LOOKUPS: &str = "istio_cni_pod_lookups_total";

static ADDS: Family = Family {
    name: ADD_DURATION,
    help: "Duration of the CNI plugin's ADD on this node (from reading its input to its reply), by rule backend and result, as the plugin reports it.",
    labels: &["backend", "result"],
    value: |i, l| match l {
        0 => Backend::ALL[i / 3].name(),
        _ => Outcome::ALL[i % 3].name(),
    },
};
static ADD_CELLS: Cells<Histogram, 9> = Cells::new([const { Histogram::new() }; 9], 0);

/// `source="cache"`, then `source="api"` with every [`Miss`] as its reason.
static LOOKUPS: Family = Family {
    name: POD_LOOKUPS,
    help: "Pod objects the CNI plugin read for ADD, by source (the node's pod cache, or the API server and why not the cache).",
    labels: &["reason", "source"],
    value: |i, l| match (i, l) {
        (0, 0) => "",
        (0, _) => "cache",
        (_, 0) => Miss::ALL[i - 1].name(),
        _ => "api",
    },
};
static LOOKUP_CELLS: Counters<15> = Cells::new([const { AtomicU64::new(0) }; 15], 0);

/// Shows at 0 the series this node's ADDs report, so Prometheus sees the first ADD of each kind (the first
/// failed one, say) as an increase rather than a new series: those of the node's rule backend (`nftables`
/// or not: iptables), and of `none` (skipped, or failed before the pod was read); the lookups from the
/// cache and every reason it can miss for when `pod_cache`, else the `disabled` ones.
pub fn expect(nftables: bool, pod_cache: bool) {
    // ADDS' series: backend × result, 3 × 3 (iptables, nftables, none × redirected, skipped, failed).
    let ours = 3 * usize::from(nftables);
    ADD_CELLS.show(1 << ours | 1 << (ours + 2) | 1 << 7 | 1 << 8);
    // LOOKUPS' series: cache, then the API with each of Miss::ALL (disabled first, other last).
    let disabled = 1 << 1;
    LOOKUP_CELLS.show(match pod_cache {
        true => (1 << 15) - 1 - disabled - (1 << 14),
        false => disabled,
    });
}

/// Counts one ADD record.
pub fn observe(r: &AddRecord) {
    if let Some(h) = ADD_CELLS.cell(&ADDS, &[r.backend.name(), r.outcome.name()]) {
        h.observe(r.seconds);
    }
    match r.source {
        Some(Source::Cache) => LOOKUP_CELLS.inc(&LOOKUPS, &["", "cache"]),
        Some(Source::Api(m)) => LOOKUP_CELLS.inc(&LOOKUPS, &[m.name(), "api"]),
        None => {}
    }
}

/// Handles a datagram from the relay socket if it is a record and carries no log line; `false` for a log
/// line, alone or in a record with its ADD's line (counted here, relayed by the caller). A record we cannot
/// read is dropped, not logged as a line.
pub fn take(data: &[u8]) -> bool {
    if !data.starts_with(crate::addrecord::PREFIX.as_bytes()) {
        return false;
    }
    let Some(o) = AddRecord::object(data) else {
        return true;
    };
    if let Some(r) = AddRecord::of(&o) {
        observe(&r);
    }
    !o.contains_key("msg")
}

/// The series with a value, or expected ([`expect`]).
pub fn render(out: &mut String) {
    ADD_CELLS.render(&ADDS, out);
    LOOKUP_CELLS.render(&LOOKUPS, out);
}

#[cfg(test)]
mod tests {
    use super::*;

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
            source: Some(Source::Api(Miss::NoSocket)),
        };
        assert!(take(r.encode().as_bytes()));
        observe(&AddRecord {
            source: Some(Source::Cache),
            ..r
        });
        let text = crate::metrics::text(render);
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

    #[test]
    fn the_expected_series_are_there_at_zero_and_a_records_line_is_relayed() {
        let count = |b: &str, r: &str| {
            let s = format!("{ADD_DURATION}_count{{backend=\"{b}\",result=\"{r}\"}} ");
            let text = crate::metrics::text(render);
            text.lines()
                .find_map(|l| l.strip_prefix(s.as_str())?.parse::<u64>().ok())
        };
        expect(true, false);
        for (b, r) in [
            ("nftables", "failed"),
            ("none", "failed"),
            ("none", "skipped"),
        ] {
            assert!(count(b, r).is_some(), "{b}/{r}");
        }
        let text = crate::metrics::text(render);
        assert!(
            text.contains("istio_cni_pod_lookups_total{reason=\"disabled\",source=\"api\"} "),
            "{text}"
        );
        assert!(!text.contains("reason=\"other\""), "{text}");
        // This plugin's one datagram per ADD, its record carrying its last line: counted, then relayed.
        let before = count("nftables", "failed").unwrap_or(0);
        let new = br#"{"record":"add","seconds":0.010000,"backend":"nftables","result":"failed","level":"error","msg":"ADD: failed"}"#;
        assert!(!take(new));
        assert_eq!(count("nftables", "failed"), Some(before + 1));
        // An older plugin's (during a roll): the record alone, counted and not relayed, then its line.
        let old = br#"{"record":"add","seconds":0.002931,"backend":"nftables","result":"failed","source":"api","reason":"disabled"}"#;
        assert!(take(old));
        assert!(!take(br#"{"level":"error","msg":"ADD: failed"}"#));
        assert_eq!(count("nftables", "failed"), Some(before + 2));
    }
}
