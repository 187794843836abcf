//! Retries with backoff under a total deadline.
//!
//! [`get_pod_with_retry`] retries transient failures (refused/reset connections, timeouts, 5xx, 429) **and
//! 404**: upstream retries every failure 30 times, and a pod that is not found during ADD is almost always
//! a race with its creation reaching the API server's cache, so 404 is retried until the deadline too. It
//! fails fast on permanent failures: 401, 403 and other 4xx, TLS verification failures, bad requests.

use std::time::{Duration, Instant};

use super::client::Client;
use super::status::{self, ApiErrorExt};
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

/// Each attempt gets at most this share of the deadline (and never more than the client's own limit), so
/// one stalled request (TLS done, then silence) leaves time for at least three more-or-less full attempts.
pub const DEADLINE_SHARE: u32 = 4;

/// No attempt is cut shorter than this by [`DEADLINE_SHARE`] (a TLS handshake to a busy API server takes
/// a while); only a shorter deadline or client limit makes it shorter.
const MIN_CAP: Duration = Duration::from_millis(500);

/// How long one attempt may take under `deadline` with a client whose own per-request limit is
/// `client_total`.
pub fn attempt_cap(deadline: Duration, client_total: Duration) -> Duration {
    (deadline / DEADLINE_SHARE)
        .max(MIN_CAP.min(deadline))
        .min(client_total)
        .max(MIN_ATTEMPT)
}

/// Extra time an attempt's watchdog allows the transport to report its own timeout first.
const WATCHDOG_GRACE: Duration = Duration::from_millis(30);

/// "1 attempt", "3 attempts".
fn attempts(n: u32) -> String {
    if n == 1 {
        "1 attempt".into()
    } else {
        format!("{n} attempts")
    }
}

/// One attempt, bounded by `limit` whatever the transport does: the HTTP client enforces its own
/// timeouts, but it may overshoot them (a read started with no time left gets a 1 s socket timeout), so
/// the attempt runs on a helper thread and we stop waiting for it `limit` (+ a small grace) after it
/// started. A thread left behind ends at its own transport timeout; its result is dropped.
fn bounded_attempt(
    c: &Client,
    ns: &str,
    name: &str,
    limit: Duration,
) -> (Result<Object>, Option<Duration>) {
    let (tx, rx) = std::sync::mpsc::channel();
    let (c2, ns2, name2) = (c.clone(), ns.to_string(), name.to_string());
    let spawned = std::thread::Builder::new()
        .name("pod-lookup".into())
        .spawn(move || {
            let _ = tx.send(c2.get_pod_attempt(&ns2, &name2, limit));
        });
    if spawned.is_err() {
        return c.get_pod_attempt(ns, name, limit);
    }
    match rx.recv_timeout(limit + WATCHDOG_GRACE) {
        Ok(r) => r,
        Err(_) => (
            Err(status::transport(
                status::REASON_TIMEOUT,
                format!(
                    "get pod {ns}/{name}: GET {}: no answer within {:.1}s (the limit for one attempt)",
                    c.server(),
                    limit.as_secs_f64()
                ),
            )),
            None,
        ),
    }
}

/// GET a pod, retrying transient failures and 404 with backoff (100 ms doubling to 1 s, or the server's
/// `Retry-After` when longer) until `deadline` (total, measured from the call; the call returns within
/// it, give or take a few milliseconds). Each attempt is capped by [`attempt_cap`] and by what is left of
/// the deadline. Permanent failures return at once, and so does a `Retry-After` that points past the
/// deadline.
///
/// `uid` is the runtime's `K8S_POD_UID` ("" when it gave none): a pod of that name with another UID is
/// retried like a 404 (the server may not show the new pod yet) and, at the deadline, fails the lookup: it
/// is never returned as the pod ([`super::pod::not_the_pod`]).
pub fn get_pod_with_retry(
    c: &Client,
    ns: &str,
    name: &str,
    uid: &str,
    deadline: Duration,
) -> Result<Object> {
    let start = Instant::now();
    let until = start + deadline;
    let cap = attempt_cap(deadline, c.timeouts().total);
    let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(1));
    let mut attempt = 0u32;
    loop {
        attempt += 1;
        let left = until.saturating_duration_since(Instant::now());
        let (res, retry_after) = bounded_attempt(c, ns, name, cap.min(left.max(MIN_ATTEMPT)));
        let (err, retriable) = match res {
            Ok(pod) => match super::pod::not_the_pod(&pod, ns, name, uid) {
                None => return Ok(pod),
                Some(why) => (
                    status::not_the_object(format!("get pod {ns}/{name}: {why}")),
                    true,
                ),
            },
            Err(e) => {
                let r = retriable_for_get(&e);
                (e, r)
            }
        };
        if !retriable {
            return Err(err).context(format!(
                "giving up on attempt {attempt} (not a transient failure)"
            ));
        }
        let left = until.saturating_duration_since(Instant::now());
        let mut delay = backoff.next_delay();
        let asked = retry_after.filter(|r| *r > delay);
        if let Some(r) = asked {
            delay = r;
        }
        if left < delay + MIN_ATTEMPT {
            let why = match asked {
                Some(r) => format!(
                    "; the server asked to retry after {}s (Retry-After), past the deadline",
                    r.as_secs()
                ),
                None => String::new(),
            };
            return Err(err).context(format!(
                "gave up after {} in {:.1}s (deadline {:.1}s){why}",
                attempts(attempt),
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
    fn attempts_are_a_quarter_of_the_deadline_at_most() {
        let s = Duration::from_secs;
        assert_eq!(attempt_cap(s(30), s(30)), Duration::from_millis(7500));
        assert_eq!(attempt_cap(s(30), s(2)), s(2));
        assert_eq!(attempt_cap(s(20), s(30)), s(5));
        assert_eq!(attempt_cap(Duration::ZERO, s(30)), MIN_ATTEMPT);
        assert_eq!(attempt_cap(s(1), s(30)), MIN_CAP);
        assert_eq!(
            attempt_cap(Duration::from_millis(300), s(30)),
            Duration::from_millis(300)
        );
        assert_eq!(attempts(1), "1 attempt");
        assert_eq!(attempts(2), "2 attempts");
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
