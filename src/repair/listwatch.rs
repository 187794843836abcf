//! The node's pod LIST + WATCH loop: a paginated LIST, then WATCH with bookmarks from the list's
//! resourceVersion; 410 → relist; otherwise re-watch; every restart paced by backoff 800 ms … 30 s with
//! jitter. It feeds a [`PodSink`]: the standalone repair agent's ([`super::controller::RepairSink`]), or in
//! `install-cni` the pod cache and the repair worker together (`install::podwatch`). Each (re)start is timed
//! for `/metrics` ([`crate::kube::watch_timing`], as the `pods` watch). Nothing here panics on API input; API
//! failures are logged and retried.

use super::pace::{held_note, random, LogLimit, Pace, LOG_WINDOW};
use crate::error::Result;
use crate::json::Object;
use crate::kube::watch_timing::Timing;
use crate::kube::{ApiErrorExt, Client, EventKind, ListParams, WatchParams};
use std::time::{Duration, Instant};

/// Page size of the LIST: small pages keep the agent's memory flat however many pods the node runs.
pub const PAGE: u32 = 10;

/// The name of this watch on `/metrics` ([`crate::kube::watch_timing`]).
pub const WATCH_NAME: &str = "pods";

/// What the list/watch loop feeds: the repair worker's channel ([`super::controller::RepairSink`]), or, in `install-cni`,
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
    /// The list or watch ended (failed, expired, or closed by the server): until the next `watch_up`, events
    /// may be missed.
    fn watch_down(&mut self) {}
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

/// Lists every selected pod page by page into `sink`. Returns the list's RV. `timing` learns when the first
/// page arrived and when the last one was handled.
pub fn list_all(
    client: &Client,
    sel: &Selection,
    sink: &mut dyn PodSink,
    timing: &mut Timing,
) -> Result<String> {
    let mut params = ListParams {
        label_selector: sel.label.clone(),
        field_selector: Some(sel.field.clone()),
        limit: Some(PAGE),
        ..ListParams::default()
    };
    sink.list_begun();
    loop {
        let page = client.list_pods(&params)?;
        timing.answered();
        for pod in page.items {
            sink.pod(pod);
        }
        match page.continue_token {
            Some(c) => params.continue_token = Some(c),
            None => {
                sink.list_done();
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
    sel: &Selection,
    sink: &mut dyn PodSink,
    rv: &mut String,
    restart: bool,
    timing: &mut Timing,
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
    timing.answered();
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
        let mut timing = Timing::start(WATCH_NAME);
        let mut at = match rv.take() {
            Some(r) => r,
            None => match list_all(client, sel, sink, &mut timing) {
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
        let (ended, delivered) = watch_once(client, sel, sink, &mut at, watched, &mut timing);
        watched = true;
        let d = pace.next(began.elapsed(), delivered, random());
        let now = Instant::now();
        match ended {
            Ended::Closed => {
                // Not live until the next watch answers: events in the gap are unseen.
                sink.watch_down();
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
