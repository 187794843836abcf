//! `istio_cni_repair_pods_repaired_total{type,result}`, process-wide (a part of the installer's `/metrics`
//! and of the standalone agent's, [`crate::agents::standalone::serve`]). A series appears after its first increment, as upstream.

use crate::metrics::{Cells, Counters, Family};
use std::sync::atomic::AtomicU64;

pub const NAME: &str = "istio_cni_repair_pods_repaired_total";

static REPAIRED: Family = Family {
    name: NAME,
    help: "Total number of pods repaired by repair controller",
    labels: &["result", "type"],
    value: |i, l| match l {
        0 => ["success", "skip", "fail"][i % 3],
        _ => ["label", "delete", "repair"][i / 3],
    },
};
static COUNTS: Counters<9> = Cells::new([const { AtomicU64::new(0) }; 9], 0);

/// The connections a repair in place found opened while the pod's rules were missing.
pub const GAP: &str = "istio_cni_repair_gap_connections_total";

static GAP_FAMILY: Family = Family {
    name: GAP,
    help: "Connections a repair in place found opened while the pod's rules were missing: ended, left open (their capture could not be judged), or not read (the lookup failed).",
    labels: &["result"],
    value: |i, _| ["ended", "left_open", "unread"][i],
};
static GAP_COUNTS: Counters<3> = Cells::new([const { AtomicU64::new(0) }; 3], 0);

/// Counts `n` connections from a repaired pod's gap with `result` ∈ ended/left_open/unread.
pub fn gap(result: &str, n: u64) {
    if let Some(c) = GAP_COUNTS.cell(&GAP_FAMILY, &[result]) {
        c.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Counts one outcome; `kind` ∈ label/delete/repair, `result` ∈ success/skip/fail.
pub fn inc(kind: &str, result: &str) {
    COUNTS.inc(&REPAIRED, &[result, kind]);
}

/// The series seen so far (nothing before the first increment).
pub fn render(out: &mut String) {
    COUNTS.render(&REPAIRED, out);
    GAP_COUNTS.render(&GAP_FAMILY, out);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn series_appear_after_first_increment() {
        let text = || crate::metrics::text(render);
        inc("bogus", "success");
        inc("label", "skip");
        let text = text();
        assert!(!text.contains("type=\"bogus\""), "{text}");
        assert!(
            text.starts_with("# HELP istio_cni_repair_pods_repaired_total Total number"),
            "{text}"
        );
        assert!(
            text.contains("istio_cni_repair_pods_repaired_total{result=\"skip\",type=\"label\"}"),
            "{text}"
        );
        gap("ended", 2);
        gap("left_open", 1);
        gap("bogus", 1);
        let t = crate::metrics::text(render);
        assert!(
            t.contains(
                "# TYPE istio_cni_repair_gap_connections_total counter\n\
                 istio_cni_repair_gap_connections_total{result=\"ended\"} 2\n\
                 istio_cni_repair_gap_connections_total{result=\"left_open\"} 1\n"
            ),
            "{t}"
        );
        assert!(!t.contains("unread") && !t.contains("bogus"), "{t}");
    }
}
