//! How long the node's pod watch took at its latest (re)start, for `/metrics`:
//! `istio_cni_kube_watch_first_response_seconds{watch="pods"}` (from the first request of the (re)start, the
//! first LIST page or, resuming from a resource version, the WATCH, until the API server's answer: the whole
//! page, or the watch's response head) and `istio_cni_kube_watch_initial_list_seconds{watch="pods"}` (from
//! the (re)start until its initial state was delivered: the last LIST page handled; only (re)starts that
//! list update it). Process-wide; a series appears once the watch answered.

use crate::metrics::{header, sample};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

pub const FIRST_RESPONSE: &str = "istio_cni_kube_watch_first_response_seconds";
pub const INITIAL_LIST: &str = "istio_cni_kube_watch_initial_list_seconds";
/// The watch's name on `/metrics` (its `watch` label).
pub const WATCH: &str = "pods";

/// The latest first response and initial list, in seconds (`f64` bits; 0: not yet).
static LATEST: [AtomicU64; 2] = [const { AtomicU64::new(0) }; 2];

fn set(i: usize, d: Duration) {
    LATEST[i].store(d.as_secs_f64().to_bits(), Ordering::Relaxed);
}

/// One (re)start of the watch: create it when the (re)start begins, then tell it when the API server first
/// answered and when the initial state was delivered.
#[derive(Debug)]
pub struct Timing {
    began: Instant,
    answered: bool,
}

impl Timing {
    pub fn start() -> Timing {
        Timing {
            began: Instant::now(),
            answered: false,
        }
    }

    /// The API server answered (only the first call of a (re)start counts).
    pub fn answered(&mut self) {
        if !std::mem::replace(&mut self.answered, true) {
            set(0, self.began.elapsed());
        }
    }

    /// The initial state is delivered (the last LIST page handled, or the initial-events-end bookmark).
    pub fn listed(&mut self) {
        self.answered();
        set(1, self.began.elapsed());
    }
}

/// The two gauges, each once the watch answered (nothing before).
pub fn render(out: &mut String) {
    for (i, metric, help) in [
        (0, FIRST_RESPONSE, "Seconds from the latest (re)start of an API watch to the API server's first answer (the first LIST page, or the WATCH response when resuming)."),
        (1, INITIAL_LIST, "Seconds from the latest (re)start of an API watch that listed to its initial state delivered (the last LIST page handled)."),
    ] {
        let v = f64::from_bits(LATEST[i].load(Ordering::Relaxed));
        if v > 0.0 {
            header(out, metric, "gauge", help);
            sample(out, metric, &[("watch", WATCH)], v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latest_restart_wins_and_a_rewatch_leaves_the_list_time() {
        let mut t = Timing::start();
        t.answered();
        t.listed();
        let text = crate::metrics::text(render);
        for (name, kind) in [(FIRST_RESPONSE, "gauge"), (INITIAL_LIST, "gauge")] {
            assert!(
                text.contains(&format!("# TYPE {name} {kind}\n{name}{{watch=\"pods\"}} ")),
                "{text}"
            );
        }
        let before = LATEST[1].load(Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(2));
        // A re-watch from a resource version: answered, no list.
        let mut w = Timing::start();
        w.answered();
        assert_eq!(LATEST[1].load(Ordering::Relaxed), before);
        assert!(LATEST[0].load(Ordering::Relaxed) > 0);
    }
}
