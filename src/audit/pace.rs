//! When each pod of a round is verified (pure): the round's pods spread evenly over the interval, one
//! every `interval / n`, the first at the round's start, so a round never bursts; a verification that ran
//! late makes the next one go at once, never two at a time. The next round starts an interval after this
//! one started, or at once when this one overran.

use std::time::{Duration, Instant};

/// When pod `i` (0-based) of a round that started at `start` is due.
pub fn due(start: Instant, interval: Duration, n: usize, i: usize) -> Instant {
    // `interval * i / n` in nanoseconds: no rounding drift across the round.
    let at = interval.as_nanos() * i as u128 / n.max(1) as u128;
    start + Duration::from_nanos(u64::try_from(at).unwrap_or(u64::MAX))
}

/// How long to wait from `now` until `at` (zero when it is past).
pub fn wait(now: Instant, at: Instant) -> Duration {
    at.saturating_duration_since(now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pods_are_spread_evenly_over_the_interval_and_never_burst() {
        let t = Instant::now();
        let iv = Duration::from_secs(60);
        // One gap between two pods of a round of 110.
        let gap = iv / 110;
        assert_eq!(due(t, iv, 4, 0), t);
        assert_eq!(due(t, iv, 4, 1), t + Duration::from_secs(15));
        assert_eq!(due(t, iv, 4, 3), t + Duration::from_secs(45));
        // The last pod of a round is due about one gap before the next round starts, and never drifts.
        assert!(due(t, iv, 110, 109) < t + iv - gap + Duration::from_micros(1));
        assert!(due(t, iv, 110, 109) > t + iv - gap - Duration::from_micros(1));
        assert_eq!(due(t, iv, 110, 110), t + iv);
        // Late: at once, not a burst of catch-ups (each pod waits for the one before it).
        assert_eq!(
            wait(t + Duration::from_secs(50), due(t, iv, 4, 3)),
            Duration::ZERO
        );
        assert_eq!(wait(t, due(t, iv, 4, 2)), Duration::from_secs(30));
    }
}
