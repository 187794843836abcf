//! The audit's series, through the one formatter ([`crate::metrics`]): `istio_cni_audit_pods{state}` (the
//! last completed round's verdicts, every state shown at 0 from the start), `istio_cni_audit_rounds_total`
//! and `istio_cni_audit_round_duration_seconds` (the last round's time spent verifying and acting, its
//! pauses between pods left out). What the audit's actions did is the repair counter's
//! (`istio_cni_repair_pods_repaired_total{type,result}`). Rendered only in a process whose audit runs.

use super::verdict::STATES;
use crate::metrics::{header, sample};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

pub const PODS: &str = "istio_cni_audit_pods";
pub const ROUNDS: &str = "istio_cni_audit_rounds_total";
pub const DURATION: &str = "istio_cni_audit_round_duration_seconds";

/// The last round's count per state ([`STATES`]' order).
static COUNTS: [AtomicU64; 4] = [const { AtomicU64::new(0) }; 4];
static ROUND_COUNT: AtomicU64 = AtomicU64::new(0);
/// The last round's seconds (`f64` bits).
static LAST_SECONDS: AtomicU64 = AtomicU64::new(0);
/// Whether this process audits (its series are rendered only then).
static ON: AtomicBool = AtomicBool::new(false);

/// The audit runs: its series are shown from now on, at 0 until the first round completes.
pub fn enable() {
    ON.store(true, Ordering::Relaxed);
}

/// A round completed: `counts` per state (in [`STATES`]' order), `seconds` spent.
pub fn round(counts: [u64; 4], seconds: f64) {
    for (c, n) in COUNTS.iter().zip(counts) {
        c.store(n, Ordering::Relaxed);
    }
    LAST_SECONDS.store(seconds.to_bits(), Ordering::Relaxed);
    ROUND_COUNT.fetch_add(1, Ordering::Relaxed);
}

/// The audit's series, every one from the start (nothing when it does not run in this process).
pub fn render(out: &mut String) {
    if !ON.load(Ordering::Relaxed) {
        return;
    }
    let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
    header(
        out,
        PODS,
        "gauge",
        "Running sidecar pods of this node by the audit's verdict in its last completed round.",
    );
    for (state, c) in STATES.iter().zip(&COUNTS) {
        sample(out, PODS, &[("state", state)], get(c) as f64);
    }
    header(out, ROUNDS, "counter", "Audit rounds completed.");
    sample(out, ROUNDS, &[], get(&ROUND_COUNT) as f64);
    header(out, DURATION, "gauge", "Seconds the last audit round spent verifying and acting (its pauses between pods left out).");
    sample(out, DURATION, &[], f64::from_bits(get(&LAST_SECONDS)));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The exact text an operator's dashboards and alerts read: names, HELP and TYPE lines are written out
    /// here, not built from this module's constants, so renaming a series fails this test.
    #[test]
    fn every_state_is_there_at_zero_from_the_start_and_a_round_sets_them() {
        assert_eq!(
            crate::metrics::text(render),
            "",
            "nothing while the audit is off"
        );
        enable();
        let text = |[r, m, b, u]: [u64; 4], rounds: u64, seconds: &str| {
            format!(
                "# HELP istio_cni_audit_pods Running sidecar pods of this node by the audit's verdict in its last completed round.\n\
                 # TYPE istio_cni_audit_pods gauge\n\
                 istio_cni_audit_pods{{state=\"redirected\"}} {r}\n\
                 istio_cni_audit_pods{{state=\"missing\"}} {m}\n\
                 istio_cni_audit_pods{{state=\"bypassed\"}} {b}\n\
                 istio_cni_audit_pods{{state=\"unverifiable\"}} {u}\n\
                 # HELP istio_cni_audit_rounds_total Audit rounds completed.\n\
                 # TYPE istio_cni_audit_rounds_total counter\n\
                 istio_cni_audit_rounds_total {rounds}\n\
                 # HELP istio_cni_audit_round_duration_seconds Seconds the last audit round spent verifying and acting (its pauses between pods left out).\n\
                 # TYPE istio_cni_audit_round_duration_seconds gauge\n\
                 istio_cni_audit_round_duration_seconds {seconds}\n"
            )
        };
        assert_eq!(crate::metrics::text(render), text([0; 4], 0, "0"));
        round([3, 1, 0, 2], 0.25);
        assert_eq!(crate::metrics::text(render), text([3, 1, 0, 2], 1, "0.25"));
    }
}
