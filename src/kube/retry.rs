//! Retries with backoff under a total deadline.
//!
//! [`get_pod_with_retry`] retries transient failures (refused/reset connections, timeouts, 5xx, 429) **and
//! 404**: upstream retries every failure 30 times, and a pod that is not found during ADD is almost always
//! a race with its creation reaching the API server's cache, so 404 is retried until the deadline too. It
//! fails fast on permanent failures: 401, 403 and other 4xx, TLS verification failures, bad requests.

use std::time::{Duration, Instant};

use super::client::Client;
use super::status::ApiErrorExt;
use crate::error::{Context, Error, Result};
use crate::json::Object;

/// Exponential backoff: `initial`, doubling up to `max`.
#[derive(Debug, Clone)]
pub struct Backoff {
    next: Duration,
    initial: Duration,
    max: Duration,
}

impl Backoff {
    pub fn new(initial: Duration, max: Duration) -> Backoff {
        Backoff {
            next: initial,
            initial,
            max,
        }
    }

    /// The delay before the next attempt; doubles each call up to `max`.
    pub fn next_delay(&mut self) -> Duration {
        let d = self.next;
        self.next = (self.next * 2).min(self.max);
        d
    }

    /// Back to `initial` (after a success).
    pub fn reset(&mut self) {
        self.next = self.initial;
    }
}

/// Is this error worth another attempt at a pod GET?
pub fn retriable_for_get(e: &Error) -> bool {
    e.is_transient() || e.is_not_found()
}

/// Shortest time worth an attempt; below it we give up rather than send a doomed request.
const MIN_ATTEMPT: Duration = Duration::from_millis(50);

/// GET a pod, retrying transient failures and 404 with backoff (100 ms doubling to 1 s) until `deadline`
/// (total, measured from the call). Each attempt's own time limit is the client's total timeout, capped
/// by what is left of the deadline. Permanent failures return at once.
pub fn get_pod_with_retry(c: &Client, ns: &str, name: &str, deadline: Duration) -> Result<Object> {
    let start = Instant::now();
    let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(1));
    let mut attempt = 0u32;
    loop {
        attempt += 1;
        let left = deadline.saturating_sub(start.elapsed());
        let per_try = c.timeouts().total.min(left.max(MIN_ATTEMPT));
        let err = match c.get_pod_within(ns, name, per_try) {
            Ok(pod) => return Ok(pod),
            Err(e) => e,
        };
        if !retriable_for_get(&err) {
            return Err(err).context(format!(
                "giving up on attempt {attempt} (not a transient failure)"
            ));
        }
        let left = deadline.saturating_sub(start.elapsed());
        let delay = backoff.next_delay();
        if left < delay + MIN_ATTEMPT {
            return Err(err).context(format!(
                "gave up after {attempt} attempts in {:.1}s (deadline {:.1}s)",
                start.elapsed().as_secs_f64(),
                deadline.as_secs_f64()
            ));
        }
        log::debug!("get pod {ns}/{name}: attempt {attempt} failed, retrying in {delay:?}: {err}");
        std::thread::sleep(delay);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kube::status;

    #[test]
    fn backoff_doubles_to_the_cap_and_resets() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_millis(350));
        let got: Vec<u128> = (0..4).map(|_| b.next_delay().as_millis()).collect();
        assert_eq!(got, vec![100, 200, 350, 350]);
        b.reset();
        assert_eq!(b.next_delay(), Duration::from_millis(100));
    }

    #[test]
    fn what_a_pod_get_retries() {
        let api = |c: u16| status::decode(c, b"").into_error();
        assert!(retriable_for_get(&api(404)));
        assert!(retriable_for_get(&api(503)));
        assert!(retriable_for_get(&api(429)));
        assert!(!retriable_for_get(&api(401)));
        assert!(!retriable_for_get(&api(403)));
        assert!(retriable_for_get(&status::transport(
            status::REASON_REFUSED,
            "x"
        )));
        assert!(!retriable_for_get(&status::transport(
            status::REASON_TLS_VERIFY,
            "x"
        )));
        assert!(!retriable_for_get(&Error::config("bad kubeconfig")));
    }
}
