//! The controller: the pod watch's repair side ([`RepairSink`]: every pod reduced to [`PodFacts`] at once,
//! fed by [`crate::kube::podwatch`]) and a worker that keeps only the broken pods and acts on them, at most
//! [`MAX_ATTEMPTS`] times per failure streak with exponential backoff. Nothing here panics on API input;
//! API failures are logged and retried.

use super::action::Actor;
use super::detect::{choose_action, failing, needs_repair, Action, Detector, PodFacts};
use super::report::{failed_again_line, unhandled_line};
use crate::json::Object;
use crate::kube::podwatch::PodSink;
use crate::kube::ApiErrorExt;
use crate::pod_rules::Decided;
use std::collections::{BTreeMap, HashMap};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

/// Attempts per failure streak (upstream `WithMaxAttempts(5)`).
pub const MAX_ATTEMPTS: u32 = 5;
/// First retry delay; doubles per failed attempt.
pub const RETRY_BASE: Duration = Duration::from_millis(200);

/// What the watcher tells the worker.
pub enum Msg {
    /// A pod as currently seen; its `plan` is decided only for broken pods in repair mode.
    Pod {
        facts: PodFacts,
        plan: Option<Box<Decided>>,
        terminating: bool,
    },
    /// The pod is gone (DELETED, or no longer listed by a relist).
    Gone(String),
}

/// Reduces a pod object to a message (its plan decided only if repair needs it).
pub fn message(det: &Detector, pod: &Object) -> Msg {
    let facts = det.facts(pod);
    let terminating = crate::kube::PodView::of(pod).deleting;
    let keep = det.opts.repair_pods && facts.selected && needs_repair(&facts, &det.opts);
    Msg::Pod {
        facts,
        plan: keep.then(|| Box::new(crate::pod_rules::decide(pod, None))),
        terminating,
    }
}
/// The repair worker's side of the loop: each pod reduced to a [`Msg`] at once.
pub struct RepairSink {
    pub det: Detector,
    pub tx: Sender<Msg>,
}

impl PodSink for RepairSink {
    fn pod(&mut self, pod: &Object) {
        let _ = self.tx.send(message(&self.det, pod));
    }
    fn gone(&mut self, key: &str, _uid: &str) {
        let _ = self.tx.send(Msg::Gone(key.to_string()));
    }
}

struct Item {
    facts: PodFacts,
    plan: Option<Box<Decided>>,
    attempts: u32,
    due: Instant,
}

/// A pod already repaired or deleted: never acted on twice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Done {
    pub uid: String,
    /// Repaired in place: the runs of its failing init container that had started before the repair
    /// (those ended, [`super::detect::InitStatus::runs`], and one going on then: it began without the
    /// rules, so its failure says nothing about the repair).
    pub repaired_at_runs: Option<i64>,
    /// Already said that its check failed again after the repair.
    pub warned: bool,
}

impl Done {
    pub fn new(action: Action, f: &PodFacts, o: &super::options::Options) -> Done {
        Done {
            uid: f.uid.clone(),
            repaired_at_runs: (action == Action::Repair)
                .then(|| failing(f, o).map_or(0, |c| c.runs + i64::from(c.running))),
            warned: false,
        }
    }

    /// The warning, once, when `f` (this UID, still broken) shows a run of the check that ended after the
    /// repair in place: the repair did not make it pass (pure).
    pub fn failed_again(&mut self, f: &PodFacts, o: &super::options::Options) -> Option<String> {
        let at = self.repaired_at_runs?;
        let now = failing(f, o)?.runs;
        if self.warned || now <= at {
            return None;
        }
        self.warned = true;
        Some(failed_again_line(f, o))
    }
}

/// The worker's state: broken pods waiting for an action, and the pods already repaired or deleted
/// (by UID) so they are never acted on twice.
#[derive(Default)]
pub struct Worker {
    pending: BTreeMap<String, Item>,
    done: HashMap<String, Done>,
    /// Broken pods no mode acts on, already named in the log (by UID), so each is named once.
    reported: HashMap<String, String>,
    /// Pods given up on (retry budget exceeded) in this run.
    pub failed: u32,
}

impl Worker {
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    pub fn handle(&mut self, m: Msg, opts: &super::options::Options) {
        match m {
            Msg::Pod {
                facts,
                plan,
                terminating,
            } => {
                let key = facts.key();
                if !facts.selected || terminating || !needs_repair(&facts, opts) {
                    self.pending.remove(&key);
                    return;
                }
                if let Some(d) = self.done.get_mut(&key).filter(|d| d.uid == facts.uid) {
                    if let Some(line) = d.failed_again(&facts, opts) {
                        log::warn!("{line}");
                    }
                    log::debug!(
                        "pod {key} (uid {}) was already handled; skipping",
                        facts.uid
                    );
                    return;
                }
                let attempts = self.pending.get(&key).map_or(0, |i| i.attempts);
                self.pending.insert(
                    key,
                    Item {
                        facts,
                        plan,
                        attempts,
                        due: Instant::now(),
                    },
                );
            }
            Msg::Gone(key) => {
                self.pending.remove(&key);
                self.done.remove(&key);
                self.reported.remove(&key);
            }
        }
    }

    /// When the next item is due, if any.
    pub fn next_due(&self) -> Option<Instant> {
        self.pending.values().map(|i| i.due).min()
    }

    /// Acts on every due item.
    pub fn run_due(&mut self, actor: &Actor) {
        let now = Instant::now();
        let due: Vec<String> = self
            .pending
            .iter()
            .filter(|(_, i)| i.due <= now)
            .map(|(k, _)| k.clone())
            .collect();
        for key in due {
            let Some(mut item) = self.pending.remove(&key) else {
                continue;
            };
            let action = choose_action(&item.facts, &actor.opts);
            if action == Action::None {
                if self.reported.get(&key) != Some(&item.facts.uid) {
                    log::warn!("{}", unhandled_line(&item.facts, &actor.opts));
                    self.reported.insert(key, item.facts.uid.clone());
                }
                continue;
            }
            match actor.act(action, &item.facts, item.plan.as_deref()) {
                Ok(()) => {
                    if matches!(action, Action::Repair | Action::Delete) {
                        let done = Done::new(action, &item.facts, &actor.opts);
                        self.done.insert(key, done);
                    }
                }
                Err(e) if action == Action::Delete && e.is_not_found() => {
                    log::info!("pod {key} is already gone");
                }
                Err(_) => {
                    item.attempts += 1;
                    if item.attempts >= MAX_ATTEMPTS {
                        log::error!(
                            "pod {key}: retry budget exceeded after {} attempts; waiting for the pod to change",
                            item.attempts
                        );
                        self.failed += 1;
                    } else {
                        item.due = Instant::now() + RETRY_BASE * 2u32.pow(item.attempts - 1);
                        self.pending.insert(key, item);
                    }
                }
            }
        }
    }

    /// Processes messages and due items until the channel closes and nothing is pending.
    pub fn run(&mut self, rx: &Receiver<Msg>, actor: &Actor) {
        let mut open = true;
        loop {
            self.run_due(actor);
            if !open && self.pending.is_empty() {
                return;
            }
            let wait = self
                .next_due()
                .map(|d| d.saturating_duration_since(Instant::now()))
                .unwrap_or(Duration::from_secs(3600));
            if !open {
                std::thread::sleep(wait);
                continue;
            }
            match rx.recv_timeout(wait) {
                Ok(m) => {
                    self.handle(m, &actor.opts);
                    // Drain what is already queued before acting, so a burst is seen whole.
                    while let Ok(m) = rx.try_recv() {
                        self.handle(m, &actor.opts);
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => open = false,
            }
        }
    }
}

/// The worker with what it is fed and acts through, ready to run.
pub struct Runner {
    rx: Receiver<Msg>,
    actor: Actor,
}

impl Runner {
    pub fn new(rx: Receiver<Msg>, actor: Actor) -> Runner {
        Runner { rx, actor }
    }

    /// Runs on this thread until the sink is dropped and nothing is pending; the pods given up on.
    pub fn run(self) -> u32 {
        let mut worker = Worker::default();
        worker.run(&self.rx, &self.actor);
        worker.failed
    }

    /// Runs on a thread of its own (the installer's: its pod watch feeds it for as long as it lives).
    pub fn spawn(self) -> crate::Result<()> {
        std::thread::Builder::new()
            .name("repair".into())
            .spawn(move || {
                self.run();
                log::error!("repair agent stopped: the pod watch ended");
            })
            .map(|_| ())
            .map_err(|e| crate::Error::io("repair: spawn the agent", e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::repair::options::Options;

    /// `istio-validation` in `state` with `restartCount` `rc`, last terminated 126.
    fn facts(det: &Detector, state: &str, rc: i64) -> PodFacts {
        let pod = crate::json::parse_object(
            &format!(
                r#"{{"metadata":{{"name":"p","namespace":"ns","uid":"u1",
                "annotations":{{"sidecar.istio.io/status":""}}}},"spec":{{"nodeName":"n1"}},
                "status":{{"initContainerStatuses":[{{"name":"istio-validation","state":{state},
                "restartCount":{rc},"lastState":{{"terminated":{{"exitCode":126}}}}}}]}}}}"#
            ),
            "pod",
        )
        .unwrap();
        det.facts(&pod)
    }

    #[test]
    fn a_run_ended_after_the_repair_is_said_once() {
        let det = Detector::new(Options {
            node_name: "n1".into(),
            ..Options::default()
        })
        .unwrap();
        let o = &det.opts;
        let waiting = r#"{"waiting":{"reason":"CrashLoopBackOff"}}"#;
        let running = r#"{"running":{}}"#;
        let failed = r#"{"terminated":{"exitCode":126}}"#;
        let at_repair = facts(&det, waiting, 1);
        let mut d = Done::new(Action::Repair, &at_repair, o);
        assert_eq!(d.repaired_at_runs, Some(2));
        // The same failure, then the next run going on: not news.
        assert_eq!(d.failed_again(&at_repair, o), None);
        assert_eq!(d.failed_again(&facts(&det, running, 2), o), None);
        // That run ended failing: said once.
        let line = d.failed_again(&facts(&det, failed, 2), o).expect("said");
        assert!(
            line.starts_with("pod ns/p (uid u1) is broken again: istio-validation failed again"),
            "{line}"
        );
        assert_eq!(d.failed_again(&facts(&det, waiting, 3), o), None);
        // Repaired while a run was going on: that run began without the rules, its failure is not news;
        // the next run's is.
        let mut mid = Done::new(Action::Repair, &facts(&det, running, 1), o);
        assert_eq!(mid.failed_again(&facts(&det, failed, 1), o), None);
        assert_eq!(mid.failed_again(&facts(&det, running, 2), o), None);
        assert!(mid.failed_again(&facts(&det, failed, 2), o).is_some());
        // A deleted pod's entry never says it.
        let mut del = Done::new(Action::Delete, &at_repair, o);
        assert_eq!(del.failed_again(&facts(&det, waiting, 9), o), None);
    }
}
