//! The pod cache's series on the installer's `/metrics`, process-wide:
//! `istio_cni_pod_cache_lookups_total{result}` (every [`Answer`] from the first lookup on),
//! `istio_cni_pod_cache_pods` (pods held) and `istio_cni_pod_cache_watch_restarts_total` (watches opened
//! after the first). Nothing is rendered until the cache runs.

use super::Answer;
use crate::metrics::{header, sample, Cells, Counters, Family};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

static RUNNING: AtomicBool = AtomicBool::new(false);
static LOOKUPS: Family = Family {
    name: "istio_cni_pod_cache_lookups_total",
    help: "Pod lookups the node's pod cache answered, by result.",
    labels: &["result"],
    value: |i, _| Answer::ALL[i].name(),
};
static COUNTS: Counters<6> = Cells::new([const { AtomicU64::new(0) }; 6], 0);
static PODS: AtomicU64 = AtomicU64::new(0);
static RESTARTS: AtomicU64 = AtomicU64::new(0);

/// The cache is serving: its series appear, every answer's from the start.
pub fn started() {
    RUNNING.store(true, Ordering::Relaxed);
    COUNTS.show(u64::MAX);
}

pub fn lookup(a: Answer) {
    COUNTS.inc(&LOOKUPS, &[a.name()]);
}

pub fn set_pods(n: usize) {
    PODS.store(n as u64, Ordering::Relaxed);
}

pub fn watch_restarted() {
    RESTARTS.fetch_add(1, Ordering::Relaxed);
}

/// The cache's series (nothing while the cache is not running).
pub fn render(out: &mut String) {
    if !RUNNING.load(Ordering::Relaxed) {
        return;
    }
    COUNTS.render(&LOOKUPS, out);
    for (name, kind, help, n) in [
        (
            "istio_cni_pod_cache_pods",
            "gauge",
            "Pods of this node held by the pod cache.",
            &PODS,
        ),
        (
            "istio_cni_pod_cache_watch_restarts_total",
            "counter",
            "Times the node's pod watch was opened again after the first.",
            &RESTARTS,
        ),
    ] {
        header(out, name, kind, help);
        sample(out, name, &[], n.load(Ordering::Relaxed) as f64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn series_after_start() {
        started();
        lookup(Answer::UidMismatch);
        set_pods(3);
        let t = crate::metrics::text(render);
        let mismatches = t.lines().find_map(|l| {
            l.strip_prefix("istio_cni_pod_cache_lookups_total{result=\"uid_mismatch\"} ")
        });
        assert!(mismatches.is_some_and(|n| n != "0"), "{t}");
        for a in Answer::ALL {
            assert!(
                t.contains(&format!(
                    "istio_cni_pod_cache_lookups_total{{result=\"{}\"}} ",
                    a.name()
                )),
                "{t}"
            );
        }
        assert!(t.contains("istio_cni_pod_cache_pods 3\n"), "{t}");
        assert!(
            t.contains("istio_cni_pod_cache_watch_restarts_total "),
            "{t}"
        );
    }
}
