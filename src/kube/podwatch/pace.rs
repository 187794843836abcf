//! Pacing for the watch loop: how long to wait before every restart (backoff with jitter, reset after a
//! watch that stayed up), and a limiter for log lines that would repeat on every restart.
//! Pure logic; the randomness for the jitter is passed in.

use crate::kube::Backoff;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// First wait before a restart (client-go's reflector: 800 ms).
pub const RESTART_INITIAL: Duration = Duration::from_millis(800);
/// Longest wait before a restart.
pub const RESTART_MAX: Duration = Duration::from_secs(30);
/// A watch that stayed up this long was healthy: the next restart starts the backoff again.
pub const HEALTHY_WATCH: Duration = Duration::from_secs(60);
/// Jitter: each wait is stretched by up to this fraction of itself, so agents on many nodes that lost
/// the API server together do not come back in step.
pub const JITTER: f64 = 0.5;
/// A log line of one kind is written at most once per this window; the others are counted.
pub const LOG_WINDOW: Duration = Duration::from_secs(60);

/// `d` stretched by `JITTER * r / u64::MAX` of itself.
pub fn jittered(d: Duration, r: u64) -> Duration {
    d.mul_f64(1.0 + JITTER * (r as f64 / u64::MAX as f64))
}

/// A random `u64` from the standard library's per-process random hash keys.
pub fn random() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.finish()
}

/// The wait before each restart of the list/watch loop.
#[derive(Debug)]
pub struct Pace {
    backoff: Backoff,
}

impl Default for Pace {
    fn default() -> Self {
        Pace {
            backoff: Backoff::new(RESTART_INITIAL, RESTART_MAX),
        }
    }
}

impl Pace {
    /// The wait before the next restart, after a watch (or list) that lasted `lived` and `delivered`
    /// changes (ADDED/MODIFIED/DELETED events, not bookmarks); `r` is random. A watch that lasted
    /// [`HEALTHY_WATCH`] or delivered changes resets the backoff first: the server was working.
    pub fn next(&mut self, lived: Duration, delivered: bool, r: u64) -> Duration {
        if delivered || lived >= HEALTHY_WATCH {
            self.backoff.reset();
        }
        jittered(self.backoff.next_delay(), r)
    }
}

/// Writes each kind of line at most once per window and says how many were held back.
#[derive(Debug)]
pub struct LogLimit {
    window: Duration,
    seen: HashMap<&'static str, (Instant, u64)>,
}

impl LogLimit {
    pub fn new(window: Duration) -> LogLimit {
        LogLimit {
            window,
            seen: HashMap::new(),
        }
    }

    /// When a line of `kind` may be written at `now`, `Some` [`held_note`] to end it with (how many were held
    /// back since the last one written); `None` (and counted) otherwise.
    pub fn allow(&mut self, kind: &'static str, now: Instant) -> Option<String> {
        match self.seen.get_mut(kind) {
            Some((last, held)) if now.saturating_duration_since(*last) < self.window => {
                *held += 1;
                None
            }
            Some((last, held)) => {
                let n = *held;
                (*last, *held) = (now, 0);
                Some(held_note(n, self.window))
            }
            None => {
                self.seen.insert(kind, (now, 0));
                Some(String::new())
            }
        }
    }
}

/// " (N similar messages in the last 60s not shown)" or "".
pub fn held_note(n: u64, window: Duration) -> String {
    if n == 0 {
        String::new()
    } else {
        format!(
            " ({n} similar message{} in the last {}s not shown)",
            if n == 1 { "" } else { "s" },
            window.as_secs()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restarts_back_off_with_jitter_and_reset_after_a_healthy_watch() {
        let mut p = Pace::default();
        let ms = |d: Duration| d.as_millis();
        assert_eq!(ms(p.next(Duration::ZERO, false, 0)), 800);
        assert_eq!(ms(p.next(Duration::ZERO, false, 0)), 1600);
        assert_eq!(ms(p.next(Duration::from_secs(59), false, u64::MAX)), 4800);
        for _ in 0..10 {
            p.next(Duration::ZERO, false, 0);
        }
        assert_eq!(p.next(Duration::ZERO, false, 0), RESTART_MAX);
        assert_eq!(ms(p.next(HEALTHY_WATCH, false, 0)), 800);
        p.next(Duration::ZERO, false, 0);
        assert_eq!(ms(p.next(Duration::ZERO, true, 0)), 800);
        assert_eq!(ms(jittered(Duration::from_secs(2), u64::MAX / 2)), 2500);
    }

    #[test]
    fn a_hot_loop_is_at_most_a_few_restarts_per_minute() {
        let mut p = Pace::default();
        let mut t = Duration::ZERO;
        let mut n = 0;
        while t < Duration::from_secs(60) {
            t += p.next(Duration::ZERO, false, random());
            n += 1;
        }
        assert!(n <= 8, "{n} restarts in a minute");
    }

    #[test]
    fn log_lines_of_one_kind_once_per_window() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut l = LogLimit::new(s(60));
        assert_eq!(l.allow("gone", t0).as_deref(), Some(""));
        assert_eq!(l.allow("gone", t0 + s(1)), None);
        assert_eq!(l.allow("gone", t0 + s(59)), None);
        assert_eq!(l.allow("other", t0 + s(59)).as_deref(), Some(""));
        assert_eq!(
            l.allow("gone", t0 + s(60)).as_deref(),
            Some(" (2 similar messages in the last 60s not shown)")
        );
        assert_eq!(l.allow("gone", t0 + s(61)), None);
        assert_eq!(held_note(0, s(60)), "");
        assert_eq!(
            held_note(2, s(60)),
            " (2 similar messages in the last 60s not shown)"
        );
    }
}
