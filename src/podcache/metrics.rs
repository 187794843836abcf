//! The pod cache's series on the installer's `/metrics`, process-wide:
//! `istio_cni_pod_cache_lookups_total{result}` (every [`Answer`] from the first lookup on),
//! `istio_cni_pod_cache_pods` (pods held) and `istio_cni_pod_cache_watch_restarts_total` (watches opened
//! after the first). Nothing is rendered until the cache runs.

use super::Answer;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

static RUNNING: AtomicBool = AtomicBool::new(false);
static LOOKUPS: [AtomicU64; 6] = [const { AtomicU64::new(0) }; 6];
static PODS: AtomicU64 = AtomicU64::new(0);
static RESTARTS: AtomicU64 = AtomicU64::new(0);

fn index(a: Answer) -> usize {
    Answer::ALL.iter().position(|x| *x == a).unwrap_or(0)
}

/// The cache is serving: its series appear.
pub fn started() {
    RUNNING.store(true, Ordering::Relaxed);
}

pub fn lookup(a: Answer) {
    LOOKUPS[index(a)].fetch_add(1, Ordering::Relaxed);
}

pub fn lookups(a: Answer) -> u64 {
    LOOKUPS[index(a)].load(Ordering::Relaxed)
}

pub fn set_pods(n: usize) {
    PODS.store(n as u64, Ordering::Relaxed);
}

pub fn watch_restarted() {
    RESTARTS.fetch_add(1, Ordering::Relaxed);
}

/// The Prometheus text ("" while the cache is not running).
pub fn render() -> String {
    if !RUNNING.load(Ordering::Relaxed) {
        return String::new();
    }
    let mut s = String::new();
    s.push_str("# HELP istio_cni_pod_cache_lookups_total Pod lookups the node's pod cache answered, by result.\n");
    s.push_str("# TYPE istio_cni_pod_cache_lookups_total counter\n");
    for a in Answer::ALL {
        s.push_str(&format!(
            "istio_cni_pod_cache_lookups_total{{result=\"{}\"}} {}\n",
            a.name(),
            lookups(a)
        ));
    }
    s.push_str("# HELP istio_cni_pod_cache_pods Pods of this node held by the pod cache.\n");
    s.push_str("# TYPE istio_cni_pod_cache_pods gauge\n");
    s.push_str(&format!(
        "istio_cni_pod_cache_pods {}\n",
        PODS.load(Ordering::Relaxed)
    ));
    s.push_str("# HELP istio_cni_pod_cache_watch_restarts_total Times the node's pod watch was opened again after the first.\n");
    s.push_str("# TYPE istio_cni_pod_cache_watch_restarts_total counter\n");
    s.push_str(&format!(
        "istio_cni_pod_cache_watch_restarts_total {}\n",
        RESTARTS.load(Ordering::Relaxed)
    ));
    s
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
        let t = render();
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
