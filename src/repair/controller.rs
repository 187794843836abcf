//! The controller: a watcher (paginated LIST, then WATCH with bookmarks from the list's resourceVersion;
//! 410 → relist; otherwise re-watch; every restart paced by backoff 800 ms … 30 s with jitter) that reduces every pod to
//! [`PodFacts`] at once, and a worker that keeps only the broken pods and acts on them, at most
//! [`MAX_ATTEMPTS`] times per failure streak with exponential backoff. Nothing here panics on API input;
//! API failures are logged and retried.

use super::action::Actor;
use super::detect::{choose_action, needs_repair, Action, Detector, PodFacts};
use super::pace::{held_note, random, LogLimit, Pace, LOG_WINDOW};
use crate::error::Result;
use crate::json::{self, Object};
use crate::kube::watch_timing::Timing;
use crate::kube::{ApiErrorExt, Client, EventKind, ListParams, WatchParams};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

/// Attempts per failure streak (upstream `WithMaxAttempts(5)`).
pub const MAX_ATTEMPTS: u32 = 5;
/// First retry delay; doubles per failed attempt.
pub const RETRY_BASE: Duration = Duration::from_millis(200);
/// Page size of the LIST: small pages keep the agent's memory flat however many pods the node runs.
pub const PAGE: u32 = 10;

/// What the watcher tells the worker.
pub enum Msg {
    /// A pod as currently seen; `pod` is kept only for broken pods in repair mode.
    Pod {
        facts: PodFacts,
        pod: Option<Object>,
        terminating: bool,
    },
    /// The pod is gone (DELETED).
    Gone(String),
    /// A full (re)list finished: these are all the pods that exist.
    Synced(HashSet<String>),
}

/// Reduces a pod object to a message (the object is dropped unless repair needs it).
pub fn message(det: &Detector, pod: Object) -> Msg {
    let facts = det.facts(&pod);
    let terminating = json::obj_of(&pod, "metadata")
        .is_some_and(|m| !matches!(m.get("deletionTimestamp"), None | Some(json::Value::Null)));
    let keep = det.opts.repair_pods && facts.selected && needs_repair(&facts, &det.opts);
    Msg::Pod {
        facts,
        pod: keep.then_some(pod),
        terminating,
    }
}

/// The name of the agent's watch on `/metrics` ([`crate::kube::watch_timing`]).
pub const WATCH_NAME: &str = "pods";

/// Lists every selected pod page by page; sends each and then `Synced`. Returns the list's RV. `timing`
/// learns when the first page arrived and when the last one was handled.
pub fn list_all(
    client: &Client,
    det: &Detector,
    tx: &Sender<Msg>,
    timing: &mut Timing,
) -> Result<String> {
    let mut params = ListParams {
        label_selector: Some(det.opts.label_selectors.clone()).filter(|s| !s.is_empty()),
        field_selector: Some(det.opts.effective_field_selector()),
        limit: Some(PAGE),
        ..ListParams::default()
    };
    let mut keys = HashSet::new();
    loop {
        let page = client.list_pods(&params)?;
        timing.answered();
        for pod in page.items {
            let m = message(det, pod);
            if let Msg::Pod { facts, .. } = &m {
                keys.insert(facts.key());
            }
            let _ = tx.send(m);
        }
        match page.continue_token {
            Some(c) => params.continue_token = Some(c),
            None => {
                let _ = tx.send(Msg::Synced(keys));
                timing.listed();
                return Ok(page.resource_version);
            }
        }
    }
}

/// A watch timeout in [300, 600) s, spread like client-go's.
fn watch_timeout() -> u32 {
    let n = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    300 + n % 300
}

/// How one watch ended.
enum Ended {
    /// The server closed the stream (its timeout, or at once): re-watch from the last RV.
    Closed,
    /// 410: the RV is too old; relist.
    Gone(crate::error::Error),
    /// Anything else: re-watch from the last RV.
    Failed(crate::error::Error),
}

/// Opens one watch from `rv` and forwards its events; returns how it ended and whether it delivered any
/// change (and advances `rv`).
fn watch_once(
    client: &Client,
    det: &Detector,
    tx: &Sender<Msg>,
    rv: &mut String,
    timing: &mut Timing,
) -> (Ended, bool) {
    let params = WatchParams {
        label_selector: Some(det.opts.label_selectors.clone()).filter(|s| !s.is_empty()),
        field_selector: Some(det.opts.effective_field_selector()),
        resource_version: Some(rv.clone()).filter(|r| !r.is_empty()),
        allow_bookmarks: true,
        timeout_seconds: Some(watch_timeout()),
        ..WatchParams::default()
    };
    let mut stream = match client.watch_pods(&params) {
        Ok(s) => s,
        Err(e) if e.is_gone() => return (Ended::Gone(e), false),
        Err(e) => return (Ended::Failed(e), false),
    };
    timing.answered();
    let mut failure = None;
    let mut delivered = false;
    for ev in &mut stream {
        match ev {
            Ok(ev) => match ev.kind {
                EventKind::Bookmark => {}
                EventKind::Deleted => {
                    delivered = true;
                    let f = det.facts(&ev.object);
                    let _ = tx.send(Msg::Gone(f.key()));
                }
                EventKind::Added | EventKind::Modified => {
                    delivered = true;
                    let _ = tx.send(message(det, ev.object));
                }
            },
            Err(e) => {
                failure = Some(e);
                break;
            }
        }
    }
    if let Some(r) = stream.resource_version() {
        *rv = r.to_string();
    }
    let ended = match failure {
        None => Ended::Closed,
        Some(e) if e.is_gone() => Ended::Gone(e),
        Some(e) => Ended::Failed(e),
    };
    (ended, delivered)
}

/// Runs forever: list, watch, relist on 410, re-watch otherwise. Every restart (a failed list, a watch
/// closed by the server, a 410, a failed watch) first waits with backoff and jitter ([`Pace`]), reset
/// only after a watch that delivered changes or stayed up [`super::pace::HEALTHY_WATCH`]; so a server
/// that ends every watch at once sees a few requests per minute, not thousands. Lines that would repeat on every restart are
/// written at most once per [`LOG_WINDOW`] each.
pub fn watch_forever(client: &Client, det: &Detector, tx: &Sender<Msg>) {
    let mut pace = Pace::default();
    let mut logs = LogLimit::new(LOG_WINDOW);
    let mut rv: Option<String> = None;
    loop {
        let began = Instant::now();
        let mut timing = Timing::start(WATCH_NAME);
        let mut at = match rv.take() {
            Some(r) => r,
            None => match list_all(client, det, tx, &mut timing) {
                Ok(r) => {
                    if let Some(n) = logs.allow("listed", Instant::now()) {
                        log::info!(
                            "repair: listed pods at resourceVersion {r}; watching{}",
                            held_note(n, LOG_WINDOW)
                        );
                    }
                    r
                }
                Err(e) => {
                    let d = pace.next(Duration::ZERO, false, random());
                    if let Some(n) = logs.allow("list-failed", Instant::now()) {
                        log::warn!(
                            "repair: list pods failed (retry in {d:.1?}): {e}{}",
                            held_note(n, LOG_WINDOW)
                        );
                    }
                    std::thread::sleep(d);
                    continue;
                }
            },
        };
        let (ended, delivered) = watch_once(client, det, tx, &mut at, &mut timing);
        let d = pace.next(began.elapsed(), delivered, random());
        let now = Instant::now();
        match ended {
            Ended::Closed => {
                log::debug!("repair: watch closed by the server; re-watching from {at} in {d:.1?}");
                rv = Some(at);
            }
            Ended::Gone(e) => {
                if let Some(n) = logs.allow("gone", now) {
                    log::info!(
                        "repair: watch expired ({e}); relisting in {d:.1?}{}",
                        held_note(n, LOG_WINDOW)
                    );
                }
            }
            Ended::Failed(e) => {
                if let Some(n) = logs.allow("watch-failed", now) {
                    log::warn!(
                        "repair: watch pods failed (re-watch from {at} in {d:.1?}): {e}{}",
                        held_note(n, LOG_WINDOW)
                    );
                }
                rv = Some(at);
            }
        }
        std::thread::sleep(d);
    }
}

struct Item {
    facts: PodFacts,
    pod: Option<Object>,
    attempts: u32,
    due: Instant,
}

/// The worker's state: broken pods waiting for an action, and the pods already repaired or deleted
/// (by UID) so they are never acted on twice.
#[derive(Default)]
pub struct Worker {
    pending: BTreeMap<String, Item>,
    done: HashMap<String, String>,
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
                pod,
                terminating,
            } => {
                let key = facts.key();
                if !facts.selected || terminating || !needs_repair(&facts, opts) {
                    self.pending.remove(&key);
                    return;
                }
                if self.done.get(&key).is_some_and(|u| *u == facts.uid) {
                    log::debug!(
                        "repair: pod {key} (uid {}) was already handled; skipping",
                        facts.uid
                    );
                    return;
                }
                let attempts = self.pending.get(&key).map_or(0, |i| i.attempts);
                self.pending.insert(
                    key,
                    Item {
                        facts,
                        pod,
                        attempts,
                        due: Instant::now(),
                    },
                );
            }
            Msg::Gone(key) => {
                self.pending.remove(&key);
                self.done.remove(&key);
            }
            Msg::Synced(keys) => {
                self.pending.retain(|k, _| keys.contains(k));
                self.done.retain(|k, _| keys.contains(k));
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
                continue;
            }
            match actor.act(action, &item.facts, item.pod.as_ref()) {
                Ok(()) => {
                    if matches!(action, Action::Repair | Action::Delete) {
                        self.done.insert(key, item.facts.uid.clone());
                    }
                }
                Err(e) if action == Action::Delete && e.is_not_found() => {
                    log::info!("repair: pod {key} is already gone");
                }
                Err(_) => {
                    item.attempts += 1;
                    if item.attempts >= MAX_ATTEMPTS {
                        log::error!(
                            "repair: pod {key}: retry budget exceeded after {} attempts; waiting for the pod to change",
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
