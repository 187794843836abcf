//! The loop's decisions, pure: what it knows ([`Pass`]) and what just happened ([`Event`]) in, what it does
//! next ([`Step`]) out. [`super::run_loop`] performs the steps and reports their events; nothing here
//! reads a file, a clock or a descriptor (the times come with the events).
//!
//! | event | when | step |
//! |---|---|---|
//! | signal (stop descriptor, at the top, in a round, in a wait) | | end: stopped |
//! | the node taken back from a newer agent | | everything dirty, then as "this agent owns the node" |
//! | this agent owns the node (top of a pass) | first pass, or binaries changed | install the binaries |
//! | | first pass, or token or run dir changed | write the kubeconfig |
//! | | else | a round |
//! | binaries installed | first pass, or token or run dir changed | write the kubeconfig |
//! | | else | a round |
//! | kubeconfig written | | a round |
//! | binaries or kubeconfig failed | first pass, or `--once` | fail |
//! | | else | that step (and what the pass had still to do) dirty again; wait the backoff |
//! | file changed (in a round, in a wait) | | top of a pass, the change dirty |
//! | timer (a wait ran out) | `--once` deadline passed | end: timed out |
//! | | else | top of a pass |
//! | readiness (valid, `--once`) | | end: installed |
//! | other CNI's file used (pinned name preempted) | | wait, saying so once per [`CONFLICT_LOG_INTERVAL`] |
//! | our binary cannot run (missing, not a regular file, not executable) | not just reinstalled for it | top of a pass, the binaries dirty |
//! | | else, `--once` | fail |
//! | | else | wait for a change, saying so |
//! | our entry missing | we had written it and the token bucket is empty (another CNI keeps rewriting) | wait for a token, saying so once per [`CONFLICT_LOG_INTERVAL`] |
//! | | else | write our configuration |
//! | a newer agent owns the node (before the write) | | top of a pass (it yields there) |
//! | no primary configuration yet | | wait for a change, saying so once until written |
//! | configuration written | | backoff reset; top of a pass |
//! | configuration write failed | `--once` | fail |
//! | | else | wait the backoff |

use super::watch::Changes;
use super::End;
use crate::error::Error;
use crate::kube::Backoff;
use std::time::{Duration, Instant};

pub const BURST: f64 = 20.0;
pub const REFILL_PER_S: f64 = 5.0;
pub const CONFLICT_LOG_INTERVAL: Duration = Duration::from_secs(30);
const MAX_ERROR_BACKOFF: Duration = Duration::from_secs(30);

/// What happened: the outcome of the last [`Step`].
#[derive(Debug)]
pub enum Event {
    /// The stop descriptor fired.
    Signal,
    /// Top of a pass: no newer agent owns the node.
    Owner,
    /// Top of a pass: the newer agent is gone and this one took the node back.
    TookBack,
    Binaries,
    Kubeconfig,
    Failed(Failure, Error),
    /// A round or a wait ended on a change.
    Changed(Changes),
    /// A wait ran out; `deadline`: the `--once` deadline has passed.
    Timer {
        deadline: bool,
    },
    /// `--once`: valid and ready.
    Ready,
    /// Our plugin binary cannot be run (missing, not a regular file, not executable).
    Binary(String),
    /// The runtime uses another file than the pinned one, without our entry: nothing to rewrite.
    Preempted {
        reason: String,
        at: Instant,
    },
    /// Our entry is missing or wrong; `installed`: we had written it (someone undid it).
    Invalid {
        reason: String,
        installed: bool,
        at: Instant,
    },
    /// Before the write: a newer agent owns the node.
    Newer,
    /// No primary configuration to write into yet.
    Waiting(String),
    Written,
}

/// The step that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    Binaries,
    Kubeconfig,
    Config,
}

/// What to do next.
#[derive(Debug)]
pub enum Step {
    /// Check the stop descriptor and the lease (waiting while a newer agent owns the node).
    Top,
    Binaries,
    /// `rotation`: log a rewrite as a service account change (not on the first pass).
    Kubeconfig {
        rotation: bool,
    },
    Round,
    /// Unless a newer agent owns the node, write our configuration (`reason`: why).
    Write(String),
    /// Log `say`, then wait for a change, the stop, `limit` or the `--once` deadline.
    Wait {
        limit: Option<Duration>,
        say: Say,
    },
    /// End with this error.
    Fail(Error),
    End(End),
}

/// What a wait logs first.
#[derive(Debug)]
pub enum Say {
    Nothing,
    /// A step failed; retried after the delay.
    Retry(Error, Duration),
    /// Reinstalls throttled (the count so far).
    Conflict(String, u64),
    Preempted(String),
    /// Our binary still cannot run after installing it again.
    Binary(String),
    /// No primary configuration yet.
    Waiting(String),
}

/// A token bucket limiting reinstalls: burst [`BURST`], [`REFILL_PER_S`] a second.
#[derive(Debug)]
struct Bucket {
    tokens: f64,
    last: Instant,
}

impl Bucket {
    /// Takes a token at `now`, or says how long until one is available.
    fn take(&mut self, now: Instant) -> Result<(), Duration> {
        let refill = now.saturating_duration_since(self.last).as_secs_f64() * REFILL_PER_S;
        self.tokens = (self.tokens + refill).min(BURST);
        self.last = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - self.tokens) / REFILL_PER_S))
        }
    }
}

/// What the loop knows between steps.
#[derive(Debug)]
pub struct Pass {
    /// Nothing installed yet: a failing step ends the run.
    first: bool,
    /// `--once`: any failure ends the run.
    once: bool,
    /// Changed since the binaries and kubeconfig were last done.
    dirty: Changes,
    bucket: Bucket,
    conflicts: u64,
    conflict_said: Option<Instant>,
    preempt_said: Option<Instant>,
    waiting_said: bool,
    /// The binaries were installed again because ours could not run, and nothing else happened since:
    /// still unusable, it is waited for, not installed again and again.
    bin_retried: bool,
    backoff: Backoff,
    /// The last validity warning logged (each is logged once: [`super::round::round`]).
    pub warned: Option<String>,
}

impl Pass {
    pub fn new(once: bool, now: Instant) -> Pass {
        Pass {
            first: true,
            once,
            dirty: Changes::default(),
            bucket: Bucket {
                tokens: BURST,
                last: now,
            },
            conflicts: 0,
            conflict_said: None,
            preempt_said: None,
            waiting_said: false,
            bin_retried: false,
            backoff: Backoff::new(Duration::from_millis(200), MAX_ERROR_BACKOFF),
            warned: None,
        }
    }

    /// The binaries, the kubeconfig or a round, as the first pass and the changes need.
    fn refresh(&mut self, binaries_done: bool) -> Step {
        let d = self.dirty;
        if !binaries_done && (self.first || d.bin) {
            Step::Binaries
        } else if self.first || d.service_account || d.run {
            Step::Kubeconfig {
                rotation: !self.first,
            }
        } else {
            self.round()
        }
    }

    fn round(&mut self) -> Step {
        self.first = false;
        self.dirty = Changes::default();
        Step::Round
    }

    /// Waits the backoff after a failed step (ends the run on the first pass or with `--once`).
    fn retry(&mut self, e: Error, fatal: bool) -> Step {
        if fatal {
            return Step::Fail(e);
        }
        let delay = self.backoff.next_delay();
        Step::Wait {
            limit: Some(delay),
            say: Say::Retry(e, delay),
        }
    }
}

/// Whether a throttled message is due at `at` (said last at `said`); notes it said when due.
fn due(said: &mut Option<Instant>, at: Instant) -> bool {
    let due = said.map_or(true, |t| {
        at.saturating_duration_since(t) >= CONFLICT_LOG_INTERVAL
    });
    if due {
        *said = Some(at);
    }
    due
}

/// The decision table (the module's doc lists its rows).
pub fn next(p: &mut Pass, ev: Event) -> Step {
    // Only the steps of the pass that installed the binaries again keep them marked as just retried.
    if !matches!(
        ev,
        Event::Owner | Event::Binaries | Event::Kubeconfig | Event::Binary(_)
    ) {
        p.bin_retried = false;
    }
    match ev {
        Event::Signal => Step::End(End::Stopped),
        Event::TookBack => {
            p.dirty = Changes {
                conf: true,
                service_account: true,
                bin: true,
                run: true,
            };
            p.refresh(false)
        }
        Event::Owner => p.refresh(false),
        Event::Binaries => p.refresh(true),
        Event::Kubeconfig => p.round(),
        Event::Failed(Failure::Config, e) => p.retry(e, p.once),
        Event::Failed(f, e) => {
            // The failed step is to do again, and so is whatever this pass had still to do after it (a
            // token change that came with a binary change must not wait for the next token change); the
            // binaries are not redone when it was the kubeconfig that failed after them.
            p.dirty.bin = f == Failure::Binaries;
            p.dirty.service_account |= f == Failure::Kubeconfig;
            p.retry(e, p.first || p.once)
        }
        Event::Changed(c) => {
            p.dirty.merge(c);
            Step::Top
        }
        Event::Timer { deadline: true } => Step::End(End::TimedOut),
        Event::Timer { deadline: false } => Step::Top,
        Event::Ready => Step::End(End::Installed),
        Event::Preempted { reason, at } => {
            let say = due(&mut p.preempt_said, at);
            let since = p
                .preempt_said
                .map_or(Duration::ZERO, |t| at.saturating_duration_since(t));
            Step::Wait {
                limit: Some(CONFLICT_LOG_INTERVAL.saturating_sub(since)),
                say: if say {
                    Say::Preempted(reason)
                } else {
                    Say::Nothing
                },
            }
        }
        Event::Invalid {
            reason,
            installed,
            at,
        } => match installed.then(|| p.bucket.take(at)) {
            Some(Err(delay)) => {
                p.conflicts += 1;
                let say = due(&mut p.conflict_said, at);
                Step::Wait {
                    limit: Some(delay),
                    say: if say {
                        Say::Conflict(reason, p.conflicts)
                    } else {
                        Say::Nothing
                    },
                }
            }
            _ => Step::Write(reason),
        },
        Event::Binary(reason) => {
            if !std::mem::replace(&mut p.bin_retried, true) {
                p.dirty.bin = true;
                Step::Top
            } else if p.once {
                Step::Fail(Error::other(format!(
                    "{reason}: still so after installing it again"
                )))
            } else {
                Step::Wait {
                    limit: None,
                    say: Say::Binary(reason),
                }
            }
        }
        Event::Newer => Step::Top,
        Event::Waiting(why) => {
            let say = !std::mem::replace(&mut p.waiting_said, true);
            Step::Wait {
                limit: None,
                say: if say { Say::Waiting(why) } else { Say::Nothing },
            }
        }
        Event::Written => {
            p.waiting_said = false;
            p.backoff.reset();
            Step::Top
        }
    }
}

#[cfg(test)]
#[path = "next_tests.rs"]
mod tests;
