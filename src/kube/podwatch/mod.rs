//! The node's pod LIST + WATCH loop, below the roles that use it: a paginated LIST, then WATCH with
//! bookmarks from the list's resourceVersion; 410 → relist; otherwise re-watch ([`next`], pure); every
//! restart paced by backoff 800 ms … 30 s with jitter ([`pace`]). It reads a [`PodSource`]: the API server,
//! or a scripted double in the tests. It feeds [`PodSink`]s through one [`Fanout`]: the
//! standalone repair agent's, or in `install-cni` the pod cache and the repair worker together; the fan-out
//! keeps the relist bookkeeping, so after a relist every sink hears which pods vanished.
//! Each (re)start is timed for `/metrics` ([`timing`], as the `pods` watch). Nothing here panics on API
//! input; API failures are logged and retried.

pub mod pace;
pub mod sink;
pub mod timing;

use crate::error::Result;
use crate::kube::{ApiErrorExt, Client, EventKind, ListParams, PodSource, WatchParams};
use pace::{random, LogLimit, Pace, LOG_WINDOW};
pub use sink::{Fanout, PodSink};
use std::time::{Duration, Instant};
use timing::Timing;

/// Page size of the LIST: small pages keep the agent's memory flat however many pods the node runs.
pub const PAGE: u32 = 10;

/// Which pods the loop lists and watches (server-side selectors), and the name its log lines carry.
#[derive(Debug, Clone)]
pub struct Selection {
    pub label: Option<String>,
    pub field: String,
    pub what: &'static str,
}

/// Lists every selected pod page by page into `sink`. Returns the list's RV. `timing` learns when the first
/// page arrived and when the last one was handled.
pub fn list_all(
    client: &impl PodSource,
    sel: &Selection,
    sink: &mut Fanout,
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
            sink.pod(&pod);
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

/// How one watch ended.
#[derive(Debug)]
pub enum Ended {
    /// The server closed the stream (its timeout, or at once).
    Closed,
    /// 410: the RV is too old.
    Gone(crate::error::Error),
    /// Anything else.
    Failed(crate::error::Error),
}

/// How the next (re)start begins.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Start {
    /// A paginated LIST ([`list_all`]), then a watch from its resourceVersion.
    List,
    /// A watch from this resourceVersion (a LIST's, or the last event's).
    From(String),
}

/// The restart decision (pure): after a watch begun at `start` (advanced to the last resourceVersion it
/// saw) ended as `ended`, how the next (re)start begins: a 410 relists; any other end re-watches from
/// where the watch got to. Every restart waits ([`Pace`]) first.
pub fn next(start: Start, ended: &Ended) -> Start {
    match (ended, start) {
        (Ended::Gone(_), Start::From(_)) => Start::List,
        (_, start) => start,
    }
}

/// The watch request for `start`: a watch from its resourceVersion (none: from now).
fn watch_params(sel: &Selection, start: &Start) -> WatchParams {
    WatchParams {
        label_selector: sel.label.clone(),
        field_selector: Some(sel.field.clone()),
        resource_version: match start {
            Start::From(r) if !r.is_empty() => Some(r.clone()),
            _ => None,
        },
        allow_bookmarks: true,
        // In [300, 600) s, spread like client-go's.
        timeout_seconds: Some(300 + (random() % 300) as u32),
        ..WatchParams::default()
    }
}

/// Opens one watch from `start`'s resourceVersion and forwards its events; returns how it ended and
/// whether it delivered any change (and advances `start`'s resourceVersion).
fn watch_once(
    client: &impl PodSource,
    sel: &Selection,
    sinks: &mut Fanout,
    start: &mut Start,
    restart: bool,
    timing: &mut Timing,
) -> (Ended, bool) {
    let mut stream = match client.watch_pods(&watch_params(sel, start)) {
        Ok(s) => s,
        Err(e) if e.is_gone() => return (Ended::Gone(e), false),
        Err(e) => return (Ended::Failed(e), false),
    };
    timing.answered();
    sinks.watch_up(restart);
    let mut failure = None;
    let mut delivered = false;
    for ev in &mut stream {
        let ev = match ev {
            Ok(ev) => ev,
            Err(e) => {
                failure = Some(e);
                break;
            }
        };
        match ev.kind {
            EventKind::Bookmark => {}
            EventKind::Deleted => {
                delivered = true;
                sinks.gone(&ev.object);
            }
            EventKind::Added | EventKind::Modified => {
                delivered = true;
                sinks.pod(&ev.object);
            }
        }
    }
    if let (Start::From(rv), Some(r)) = (start, stream.resource_version()) {
        *rv = r.to_string();
    }
    let ended = match failure {
        None => Ended::Closed,
        Some(e) if e.is_gone() => Ended::Gone(e),
        Some(e) => Ended::Failed(e),
    };
    (ended, delivered)
}

/// Runs forever over the API server: list, watch, relist on 410, re-watch otherwise ([`watch`]).
pub fn watch_forever(client: &Client, sel: &Selection, sinks: Fanout) {
    watch(client, sel, sinks, |d| {
        std::thread::sleep(d);
        true
    })
}

/// The loop over `source`: list, watch, relist on 410, re-watch otherwise ([`next`]). Every restart (a failed
/// list, a watch closed by the server, a 410, a failed watch) first waits with backoff and jitter
/// ([`Pace`]), reset only after a watch that delivered changes or stayed up [`pace::HEALTHY_WATCH`]; so a
/// server that ends every watch at once sees a few requests per minute, not thousands. Lines that would
/// repeat on every restart are written at most once per [`LOG_WINDOW`] each. `pause` waits before each
/// restart and says whether to go on (the tests stop after a few).
pub fn watch(
    source: &impl PodSource,
    sel: &Selection,
    mut sinks: Fanout,
    mut pause: impl FnMut(Duration) -> bool,
) {
    let what = sel.what;
    let mut pace = Pace::default();
    let mut logs = LogLimit::new(LOG_WINDOW);
    let mut start = Start::List;
    let mut watched = false;
    loop {
        let began = Instant::now();
        let mut timing = Timing::start();
        if start == Start::List {
            match list_all(source, sel, &mut sinks, &mut timing) {
                Ok(r) => {
                    if let Some(held) = logs.allow("listed", Instant::now()) {
                        log::info!("{what}: listed pods at resourceVersion {r}; watching{held}");
                    }
                    start = Start::From(r);
                }
                Err(e) => {
                    sinks.watch_down();
                    let d = pace.next(Duration::ZERO, false, random());
                    if let Some(held) = logs.allow("list-failed", Instant::now()) {
                        log::warn!("{what}: list pods failed (retry in {d:.1?}): {e}{held}");
                    }
                    match pause(d) {
                        true => continue,
                        false => return,
                    }
                }
            }
        }
        let (ended, delivered) =
            watch_once(source, sel, &mut sinks, &mut start, watched, &mut timing);
        watched = true;
        let d = pace.next(began.elapsed(), delivered, random());
        let now = Instant::now();
        start = next(start, &ended);
        let at = match &start {
            Start::From(r) => r.as_str(),
            Start::List => "a new list",
        };
        // Whatever ended, events may be missed until the next watch opens.
        sinks.watch_down();
        match ended {
            Ended::Closed => {
                log::debug!("{what}: watch closed by the server; re-watching from {at} in {d:.1?}");
            }
            Ended::Gone(e) => {
                if let Some(held) = logs.allow("gone", now) {
                    log::info!("{what}: watch expired ({e}); relisting in {d:.1?}{held}");
                }
            }
            Ended::Failed(e) => {
                if let Some(held) = logs.allow("watch-failed", now) {
                    log::warn!(
                        "{what}: watch pods failed (re-watch from {at} in {d:.1?}): {e}{held}"
                    );
                }
            }
        }
        if !pause(d) {
            return;
        }
    }
}
