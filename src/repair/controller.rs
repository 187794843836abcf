//! The controller: a watcher (paginated LIST, then WATCH with bookmarks from the list's resourceVersion;
//! 410 → relist; otherwise re-watch; every restart paced by backoff 800 ms … 30 s with jitter) feeding a
//! [`PodSink`] (the repair one reduces every pod to [`PodFacts`] at once; `install-cni` feeds its pod
//! cache from the same loop), and a worker that keeps only the broken pods and acts on them, at most
//! [`MAX_ATTEMPTS`] times per failure streak with exponential backoff. Nothing here panics on API input;
//! API failures are logged and retried.

use super::action::Actor;
use super::detect::{choose_action, needs_repair, Action, Detector, PodFacts};
use super::pace::{held_note, random, LogLimit, Pace, LOG_WINDOW};
use crate::error::Result;
use crate::json::{self, Object};
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

/// What the list/watch loop feeds: the repair worker's channel ([`RepairSink`]), or, in `install-cni`,
/// the node's pod cache and the repair worker together.
pub trait PodSink {
    /// A (re)list starts.
    fn list_begun(&mut self) {}
    /// A pod from a list page or an ADDED/MODIFIED event.
    fn pod(&mut self, pod: Object);
    /// A DELETED event.
    fn gone(&mut self, pod: &Object);
    /// The list is complete: these are all the pods that exist.
    fn list_done(&mut self);
    /// A watch opened; `restart` when it is not the first one.
    fn watch_up(&mut self, _restart: bool) {}
    /// A list or watch failed (a server closing a watch normally is not a failure).
    fn watch_down(&mut self) {}
}

/// The repair worker's side of the loop: each pod reduced to a [`Msg`] at once.
pub struct RepairSink {
    pub det: Detector,
    pub tx: Sender<Msg>,
    listed: Option<HashSet<String>>,
}

impl RepairSink {
    pub fn new(det: Detector, tx: Sender<Msg>) -> RepairSink {
        RepairSink {
            det,
            tx,
            listed: None,
        }
    }
}

impl PodSink for RepairSink {
    fn list_begun(&mut self) {
        self.listed = Some(HashSet::new());
    }
    fn pod(&mut self, pod: Object) {
        let m = message(&self.det, pod);
        if let (Some(keys), Msg::Pod { facts, .. }) = (self.listed.as_mut(), &m) {
            keys.insert(facts.key());
        }
        let _ = self.tx.send(m);
    }
    fn gone(&mut self, pod: &Object) {
        let _ = self.tx.send(Msg::Gone(self.det.facts(pod).key()));
    }
    fn list_done(&mut self) {
        let keys = self.listed.take().unwrap_or_default();
        let _ = self.tx.send(Msg::Synced(keys));
    }
}

/// Which pods the loop lists and watches (server-side selectors), and the name its log lines carry.
#[derive(Debug, Clone)]
pub struct Selection {
    pub label: Option<String>,
    pub field: String,
    pub what: &'static str,
}

impl Selection {
    /// The standalone agent's: its label and field selectors (and the node) on the server.
    pub fn of_repair(opts: &super::options::Options) -> Selection {
        Selection {
            label: Some(opts.label_selectors.clone()).filter(|s| !s.is_empty()),
            field: opts.effective_field_selector(),
            what: "repair",
        }
    }
}

/// Lists every selected pod page by page into `sink`. Returns the list's RV.
pub fn list_all(client: &Client, sel: &Selection, sink: &mut dyn PodSink) -> Result<String> {
    let mut params = ListParams {
        label_selector: sel.label.clone(),
        field_selector: Some(sel.field.clone()),
        limit: Some(PAGE),
        ..ListParams::default()
    };
    sink.list_begun();
    loop {
        let page = client.list_pods(&params)?;
        for pod in page.items {
            sink.pod(pod);
        }
        match page.continue_token {
            Some(c) => params.continue_token = Some(c),
            None => {
                sink.list_done();
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
    sel: &Selection,
    sink: &mut dyn PodSink,
    rv: &mut String,
    restart: bool,
) -> (Ended, bool) {
    let params = WatchParams {
        label_selector: sel.label.clone(),
        field_selector: Some(sel.field.clone()),
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
    sink.watch_up(restart);
    let mut failure = None;
    let mut delivered = false;
    for ev in &mut stream {
        match ev {
            Ok(ev) => match ev.kind {
                EventKind::Bookmark => {}
                EventKind::Deleted => {
                    delivered = true;
                    sink.gone(&ev.object);
                }
                EventKind::Added | EventKind::Modified => {
                    delivered = true;
                    sink.pod(ev.object);
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
pub fn watch_forever(client: &Client, sel: &Selection, sink: &mut dyn PodSink) {
    let what = sel.what;
    let mut pace = Pace::default();
    let mut logs = LogLimit::new(LOG_WINDOW);
    let mut rv: Option<String> = None;
    let mut watched = false;
    loop {
        let began = Instant::now();
        let mut at = match rv.take() {
            Some(r) => r,
            None => match list_all(client, sel, sink) {
                Ok(r) => {
                    if let Some(n) = logs.allow("listed", Instant::now()) {
                        log::info!(
                            "{what}: listed pods at resourceVersion {r}; watching{}",
                            held_note(n, LOG_WINDOW)
                        );
                    }
                    r
                }
                Err(e) => {
                    sink.watch_down();
                    let d = pace.next(Duration::ZERO, false, random());
                    if let Some(n) = logs.allow("list-failed", Instant::now()) {
                        log::warn!(
                            "{what}: list pods failed (retry in {d:.1?}): {e}{}",
                            held_note(n, LOG_WINDOW)
                        );
                    }
                    std::thread::sleep(d);
                    continue;
                }
            },
        };
        let (ended, delivered) = watch_once(client, sel, sink, &mut at, watched);
        watched = true;
        let d = pace.next(began.elapsed(), delivered, random());
        let now = Instant::now();
        match ended {
            Ended::Closed => {
                log::debug!("{what}: watch closed by the server; re-watching from {at} in {d:.1?}");
                rv = Some(at);
            }
            Ended::Gone(e) => {
                sink.watch_down();
                if let Some(n) = logs.allow("gone", now) {
                    log::info!(
                        "{what}: watch expired ({e}); relisting in {d:.1?}{}",
                        held_note(n, LOG_WINDOW)
                    );
                }
            }
            Ended::Failed(e) => {
                sink.watch_down();
                if let Some(n) = logs.allow("watch-failed", now) {
                    log::warn!(
                        "{what}: watch pods failed (re-watch from {at} in {d:.1?}): {e}{}",
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
