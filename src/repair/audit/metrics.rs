//! The audit's series, through the one formatter ([`crate::metrics`]): `istio_cni_audit_pods{state}` (the
//! last completed round's verdicts, every state shown at 0 from the start), `istio_cni_audit_rounds_total`
//! and `istio_cni_audit_round_duration_seconds` (the last round's time spent verifying and acting, its
//! pauses between pods left out). What the audit's actions did is the repair counter's
//! (`istio_cni_repair_pods_repaired_total{type,result}`). Rendered only in a process whose audit runs.

use super::verdict::STATES;
use crate::metrics::{Cells, Counters, Family, Gauge};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

pub const PODS: &str = "istio_cni_audit_pods";
pub const ROUNDS: &str = "istio_cni_audit_rounds_total";
pub const DURATION: &str = "istio_cni_audit_round_duration_seconds";

static PODS_FAMILY: Family = Family {
    name: PODS,
    help: "Running sidecar pods of this node by the audit's verdict in its last completed round.",
    labels: &["state"],
    value: |i, _| STATES[i],
};
static PODS_CELLS: Cells<Gauge, 4> = Cells::new([const { Gauge::new() }; 4], 0b1111);

static ROUNDS_FAMILY: Family = Family {
    name: ROUNDS,
    help: "Audit rounds completed.",
    labels: &[],
    value: |_, _| "",
};
static ROUNDS_CELLS: Counters<1> = Cells::new([const { AtomicU64::new(0) }; 1], 1);

static DURATION_FAMILY: Family = Family {
    name: DURATION,
    help: "Seconds the last audit round spent verifying and acting (its pauses between pods left out).",
    labels: &[],
    value: |_, _| "",
};
static DURATION_CELLS: Cells<Gauge, 1> = Cells::new([const { Gauge::new() }; 1], 1);

/// Whether this process audits (its series are rendered only then).
static ON: AtomicBool = AtomicBool::new(false);

/// The audit runs: its series are shown from now on, at 0 until the first round completes.
pub fn enable() {
    ON.store(true, Ordering::Relaxed);
}

/// A round completed: `counts` per state (in [`STATES`]' order), `seconds` spent.
pub fn round(counts: [u64; 4], seconds: f64) {
    for (state, n) in STATES.iter().zip(counts) {
        if let Some(c) = PODS_CELLS.cell(&PODS_FAMILY, &[state]) {
            c.set(n as f64);
        }
    }
    DURATION_CELLS
        .cell(&DURATION_FAMILY, &[])
        .map(|c| c.set(seconds));
    ROUNDS_CELLS.inc(&ROUNDS_FAMILY, &[]);
}

/// The audit's series (nothing when it does not run in this process).
pub fn render(out: &mut String) {
    if !ON.load(Ordering::Relaxed) {
        return;
    }
    PODS_CELLS.render(&PODS_FAMILY, out);
    ROUNDS_CELLS.render(&ROUNDS_FAMILY, out);
    DURATION_CELLS.render(&DURATION_FAMILY, out);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_state_is_there_at_zero_from_the_start_and_a_round_sets_them() {
        assert_eq!(
            crate::metrics::text(render),
            "",
            "nothing while the audit is off"
        );
        enable();
        let text = crate::metrics::text(render);
        for s in STATES {
            assert!(
                text.contains(&format!("{PODS}{{state=\"{s}\"}} 0\n")),
                "{text}"
            );
        }
        assert!(
            text.contains("# TYPE istio_cni_audit_pods gauge\n"),
            "{text}"
        );
        assert!(text.contains(&format!("{ROUNDS} 0\n")), "{text}");
        assert!(
            text.contains(&format!("# TYPE {DURATION} gauge\n{DURATION} 0\n")),
            "{text}"
        );
        round([3, 1, 0, 2], 0.25);
        let text = crate::metrics::text(render);
        assert!(
            text.contains(&format!("{PODS}{{state=\"redirected\"}} 3\n")),
            "{text}"
        );
        assert!(
            text.contains(&format!("{PODS}{{state=\"bypassed\"}} 0\n")),
            "{text}"
        );
        assert!(
            text.contains(&format!("{PODS}{{state=\"unverifiable\"}} 2\n")),
            "{text}"
        );
        assert!(text.contains(&format!("{ROUNDS} 1\n")), "{text}");
        assert!(text.contains(&format!("{DURATION} 0.25\n")), "{text}");
    }
}
