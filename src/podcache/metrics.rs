//! The pod cache's series on the installer's `/metrics`, process-wide:
//! `istio_cni_pod_cache_lookups_total{result}` (every [`Answer`] from the first lookup on),
//! `istio_cni_pod_cache_pods` (pods held) and `istio_cni_pod_cache_watch_restarts_total` (watches opened
//! after the first). Nothing is rendered until the cache runs.

use super::Answer;
use crate::metrics::{header, sample, Counters, Family};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

static RUNNING: AtomicBool = AtomicBool::new(false);
static LOOKUPS: Counters<1, 6> = Family::new(
    "istio_cni_pod_cache_lookups_total",
    "counter",
    "Pod lookups the node's pod cache answered, by result.",
    ["result"],
    {
        let mut s = [[""]; 6];
        let mut i = 0;
        while i < 6 {
            s[i] = [Answer::ALL[i].name()];
            i += 1;
        }
        s
    },
    [const { AtomicU64::new(0) }; 6],
    u64::MAX,
);
static PODS: AtomicU64 = AtomicU64::new(0);
static RESTARTS: AtomicU64 = AtomicU64::new(0);

/// The cache is serving: its series appear.
pub fn started() {
    RUNNING.store(true, Ordering::Relaxed);
}

pub fn lookup(a: Answer) {
    LOOKUPS.inc([a.name()]);
}

pub fn lookups(a: Answer) -> u64 {
    LOOKUPS.get([a.name()])
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
    LOOKUPS.render(out);
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
        let before = lookups(Answer::UidMismatch);
        lookup(Answer::UidMismatch);
        assert_eq!(lookups(Answer::UidMismatch), before + 1);
        set_pods(3);
        let t = crate::metrics::exposition(&[render]);
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
