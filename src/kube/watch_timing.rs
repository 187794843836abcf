//! How long each of the process's API watches took at its latest (re)start, for `/metrics`:
//! `istio_cni_kube_watch_first_response_seconds{watch}` (from the first request of the (re)start, the first
//! LIST page or, resuming from a resource version, the WATCH, until the API server's answer: the whole page,
//! or the watch's response head) and `istio_cni_kube_watch_initial_list_seconds{watch}` (from the (re)start
//! until its initial state was delivered: the last LIST page handled; only (re)starts that list update it).
//! Process-wide, keyed by the watch's name (`pods`); a series appears once its watch answered.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub const FIRST_RESPONSE: &str = "istio_cni_kube_watch_first_response_seconds";
pub const INITIAL_LIST: &str = "istio_cni_kube_watch_initial_list_seconds";

#[derive(Default, Clone, Copy)]
struct Latest {
    first_response: Option<Duration>,
    initial_list: Option<Duration>,
}

static LATEST: Mutex<BTreeMap<&'static str, Latest>> = Mutex::new(BTreeMap::new());

fn update(name: &'static str, f: impl FnOnce(&mut Latest)) {
    let mut m = match LATEST.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    };
    f(m.entry(name).or_default());
}

/// One (re)start of the watch `name`: create it when the (re)start begins, then tell it when the API
/// server first answered and when the initial state was delivered.
#[derive(Debug)]
pub struct Timing {
    name: &'static str,
    began: Instant,
    answered: bool,
}

impl Timing {
    pub fn start(name: &'static str) -> Timing {
        Timing {
            name,
            began: Instant::now(),
            answered: false,
        }
    }

    /// The API server answered (only the first call of a (re)start counts).
    pub fn answered(&mut self) {
        if !self.answered {
            self.answered = true;
            let d = self.began.elapsed();
            update(self.name, |l| l.first_response = Some(d));
        }
    }

    /// The initial state is delivered (the last LIST page handled, or the initial-events-end bookmark).
    pub fn listed(&mut self) {
        self.answered();
        let d = self.began.elapsed();
        update(self.name, |l| l.initial_list = Some(d));
    }
}

/// The two gauges for every watch that answered so far (nothing before any).
pub fn render(out: &mut String) {
    let m = match LATEST.lock() {
        Ok(g) => g.clone(),
        Err(p) => p.into_inner().clone(),
    };
    for (metric, help, pick) in [
        (
            FIRST_RESPONSE,
            "Seconds from the latest (re)start of an API watch to the API server's first answer (the first LIST page, or the WATCH response when resuming).",
            (|l: &Latest| l.first_response) as fn(&Latest) -> Option<Duration>,
        ),
        (
            INITIAL_LIST,
            "Seconds from the latest (re)start of an API watch that listed to its initial state delivered (the last LIST page handled).",
            |l: &Latest| l.initial_list,
        ),
    ] {
        let series: Vec<(&str, Duration)> =
            m.iter().filter_map(|(k, l)| pick(l).map(|d| (*k, d))).collect();
        if series.is_empty() {
            continue;
        }
        crate::metrics::header(out, metric, "gauge", help);
        for (k, d) in series {
            crate::metrics::sample(out, metric, &[("watch", k)], d.as_secs_f64());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latest_restart_wins_and_a_rewatch_leaves_the_list_time() {
        let mut t = Timing::start("test-watch");
        t.answered();
        t.listed();
        let text = crate::metrics::text(render);
        assert!(
            text.contains("istio_cni_kube_watch_first_response_seconds{watch=\"test-watch\"} "),
            "{text}"
        );
        assert!(
            text.contains("istio_cni_kube_watch_initial_list_seconds{watch=\"test-watch\"} "),
            "{text}"
        );
        let before = LATEST.lock().unwrap()["test-watch"].initial_list;
        std::thread::sleep(Duration::from_millis(2));
        // A re-watch from a resource version: answered, no list.
        let mut w = Timing::start("test-watch");
        w.answered();
        let now = LATEST.lock().unwrap()["test-watch"];
        assert_eq!(now.initial_list, before);
        assert!(now.first_response.is_some());
        assert!(text.contains("# TYPE istio_cni_kube_watch_first_response_seconds gauge\n"));
    }
}
