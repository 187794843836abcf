//! Watch streams: initial ADDED events or resume from a resource version, selector transitions,
//! bookmarks, timeouts and the forced 410.
//!
//! A watch is opened by the request handler ([`watch`]: the response head and the initial events, then a
//! registration in the [`Hub`]). From then on the hub, run by one dispatcher task after every change, hands
//! each watcher the events visible to it, indexed by the `spec.nodeName` of its field selector (the API
//! server's watch cache indexes pods by node the same way), plus its bookmarks; the watch's connection task
//! ([`stream`]) only writes what it is given. A thousand node agents' watches are a thousand entries here,
//! not a thousand threads each re-scanning every change.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use miniserde::json::{self, Object, Value};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

use crate::api::{expired, selector, send, status_body, Conn, Next};
use crate::http::{self, HttpRequest};
use crate::store::{key_of, s, str_at, Change, Selector, Store};
use crate::Shared;

fn event_line(kind: &str, object: Object) -> Vec<u8> {
    let mut o = Object::new();
    o.insert("type".into(), s(kind));
    o.insert("object".into(), Value::Object(object));
    let mut line = json::to_string(&Value::Object(o)).into_bytes();
    line.push(b'\n');
    line
}

fn bookmark(rv: u64) -> Vec<u8> {
    bookmark_with(rv, false)
}

/// A BOOKMARK; `initial_end` adds the `k8s.io/initial-events-end: "true"` annotation (watch-list).
fn bookmark_with(rv: u64, initial_end: bool) -> Vec<u8> {
    let mut m = Object::new();
    m.insert("resourceVersion".into(), s(&rv.to_string()));
    if initial_end {
        let mut a = Object::new();
        a.insert("k8s.io/initial-events-end".into(), s("true"));
        m.insert("annotations".into(), Value::Object(a));
    }
    // As kube-apiserver sends it: an empty Pod but for its resourceVersion (and annotations).
    let mut spec = Object::new();
    spec.insert("containers".into(), Value::Null);
    let mut o = Object::new();
    o.insert("kind".into(), s("Pod"));
    o.insert("apiVersion".into(), s("v1"));
    o.insert("metadata".into(), Value::Object(m));
    o.insert("spec".into(), Value::Object(spec));
    o.insert("status".into(), Value::Object(Object::new()));
    event_line("BOOKMARK", o)
}

fn gone_line(cursor: u64, current: u64) -> Vec<u8> {
    event_line(
        "ERROR",
        status_obj(410, "Expired", &expired(cursor, current)),
    )
}

/// The event a selector-filtered watcher sees for one change, if any.
fn visible(sel: &Selector, ns: Option<&str>, c: &Change) -> Option<(&'static str, Object)> {
    let in_ns = |o: &Object| ns.is_none() || ns == Some(key_of(o).0.as_str());
    let now = in_ns(&c.object) && sel.matches(&c.object);
    let before = c.old.as_ref().is_some_and(|o| in_ns(o) && sel.matches(o));
    match (c.kind, before, now) {
        ("DELETED", true, _) => Some(("DELETED", c.object.clone())),
        ("DELETED", false, _) => None,
        (_, false, true) => Some(("ADDED", c.object.clone())),
        (_, true, true) => Some(("MODIFIED", c.object.clone())),
        (_, true, false) => Some(("DELETED", c.object.clone())),
        (_, false, false) => None,
    }
}

/// What the hub hands a watch's connection task.
pub(crate) enum Item {
    /// Event lines to write.
    Data(Vec<u8>),
    /// The last event lines (a 410): write them and end the stream.
    End(Vec<u8>),
}

/// An open watch, as its connection task holds it.
pub(crate) struct Stream {
    id: u64,
    rx: UnboundedReceiver<Item>,
    deadline: Option<Instant>,
    /// Held ([`crate::Fault::WatchHold`]): nothing is written until the fault epoch moves past this one.
    hold: Option<u64>,
    /// The initial events of a held watch (written once the hold ends).
    pending: Vec<u8>,
}

/// What a held watch does ([`crate::Fault::WatchHold`], [`crate::Fault::WatchHoldGone`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hold {
    /// Its events, once the hold ends.
    Events,
    /// One ERROR 410, once the hold ends.
    ThenGone,
}

struct Watcher {
    sel: Selector,
    ns: Option<String>,
    /// Changes up to this resource version were sent with the initial events.
    cursor: u64,
    /// The store's `gone_epoch` when the watch opened: a later `force_gone` ends it with a 410.
    epoch: u64,
    /// The `spec.nodeName` its field selector requires (its index key), if any.
    node: Option<String>,
    /// Bookmarks every this long (`allowWatchBookmarks=true`), else none.
    bookmarks: Option<Duration>,
    next_bookmark: Instant,
    tx: UnboundedSender<Item>,
}

/// Every open watch, and how far the changes have been handed out.
#[derive(Default)]
pub(crate) struct Hub {
    next_id: u64,
    /// Every change up to this resource version was handed to the watchers registered by then.
    dispatched: u64,
    watchers: HashMap<u64, Watcher>,
    by_node: HashMap<String, Vec<u64>>,
    unindexed: Vec<u64>,
    /// The earliest bookmark due (a scan over the watchers only then).
    next_due: Option<Instant>,
    /// Watches ever opened (stream ones, injected faults excluded).
    pub opened: u64,
    /// Selector evaluations made to hand out changes (what the node index saves).
    pub checks: u64,
}

fn node_of(o: &Object) -> &str {
    str_at(o, &["spec", "nodeName"]).unwrap_or("")
}

impl Hub {
    pub fn open(&self) -> usize {
        self.watchers.len()
    }

    fn register(&mut self, w: Watcher) -> u64 {
        self.next_id += 1;
        let id = self.next_id;
        match &w.node {
            Some(n) => self.by_node.entry(n.clone()).or_default().push(id),
            None => self.unindexed.push(id),
        }
        if w.bookmarks.is_some() {
            self.next_due = Some(
                self.next_due
                    .map_or(w.next_bookmark, |d| d.min(w.next_bookmark)),
            );
        }
        self.watchers.insert(id, w);
        self.opened += 1;
        id
    }

    /// Ends every open watch normally (an API server's watch timeout).
    pub fn end_all(&mut self) {
        for w in self.watchers.values() {
            let _ = w.tx.send(Item::End(Vec::new()));
        }
        let ids: Vec<u64> = self.watchers.keys().copied().collect();
        for id in ids {
            self.remove(id);
        }
    }

    pub fn remove(&mut self, id: u64) {
        let Some(w) = self.watchers.remove(&id) else {
            return;
        };
        let list = match &w.node {
            Some(n) => self.by_node.get_mut(n),
            None => Some(&mut self.unindexed),
        };
        if let Some(l) = list {
            l.retain(|x| *x != id);
            if l.is_empty() {
                if let Some(n) = &w.node {
                    self.by_node.remove(n);
                }
            }
        }
    }

    /// Hands out every change since the last call (and the bookmarks due at `now`); ends the watches a
    /// `force_gone` or a history compaction expired. Returns when the next bookmark is due.
    pub fn dispatch(&mut self, store: &Store, now: Instant) -> Option<Instant> {
        let mut dead = Vec::new();
        // Changes the history no longer holds cannot be delivered: those watches expire, as on etcd.
        let lost = self.dispatched < store.compacted_below;
        for (id, w) in &self.watchers {
            if w.epoch != store.gone_epoch || (lost && w.cursor < store.compacted_below) {
                let _ = w.tx.send(Item::End(gone_line(w.cursor, store.rv)));
                dead.push(*id);
            }
        }
        for id in dead.drain(..) {
            self.remove(id);
        }
        for c in store.changes_after(self.dispatched) {
            let (now_node, old_node) = (node_of(&c.object), c.old.as_ref().map(node_of));
            let mut targets: Vec<u64> = self.unindexed.clone();
            targets.extend(self.by_node.get(now_node).into_iter().flatten());
            if let Some(o) = old_node.filter(|o| *o != now_node) {
                targets.extend(self.by_node.get(o).into_iter().flatten());
            }
            for id in targets {
                let Some(w) = self.watchers.get(&id) else {
                    continue;
                };
                if c.rv <= w.cursor {
                    continue;
                }
                self.checks += 1;
                if let Some((kind, obj)) = visible(&w.sel, w.ns.as_deref(), c) {
                    if w.tx.send(Item::Data(event_line(kind, obj))).is_err() {
                        dead.push(id);
                    }
                }
            }
        }
        self.dispatched = store.rv;
        if self.next_due.is_some_and(|d| d <= now) {
            let mut next: Option<Instant> = None;
            for (id, w) in self.watchers.iter_mut() {
                let Some(every) = w.bookmarks else { continue };
                if w.next_bookmark <= now {
                    if w.tx.send(Item::Data(bookmark(store.rv))).is_err() {
                        dead.push(*id);
                    }
                    w.next_bookmark = now + every;
                }
                next = Some(next.map_or(w.next_bookmark, |d| d.min(w.next_bookmark)));
            }
            self.next_due = next;
        }
        for id in dead {
            self.remove(id);
        }
        self.next_due
    }
}

/// Rejects a streaming watch-list request as an API server does: without the `WatchList` feature, or
/// without the parameters it requires.
pub(crate) fn watch_list_refusal(shared: &Shared, req: &HttpRequest) -> Option<String> {
    req.param("sendInitialEvents")?;
    let why = if !shared.lock().watch_list {
        "sendInitialEvents: Forbidden: sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled"
    } else if req.param("resourceVersionMatch").as_deref() != Some("NotOlderThan") {
        "resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"
    } else {
        return None;
    };
    Some(format!("ListOptions.meta.k8s.io \"\" is invalid: {why}"))
}

/// Opens a watch (the request handler's part): writes the response head and the initial events into `conn`
/// and registers the watcher, all under one lock, so no change falls between the two. A held watch
/// (`hold`) gets only the head now; its initial events wait in its [`Stream`]. Returns the status it
/// answered, for the request log. (A watch-list request the server refuses never gets here:
/// [`watch_list_refusal`].)
pub(crate) fn watch(
    shared: &Shared,
    req: &HttpRequest,
    conn: &mut Conn,
    hold: Option<Hold>,
) -> (Next, u16) {
    let sel = match selector(req) {
        Ok(s) => s,
        Err(r) => return (send(conn, &r, true), r.code),
    };
    let ns = watch_namespace(&req.path);
    let bookmarks = req
        .param("allowWatchBookmarks")
        .is_some_and(|b| b == "true");
    let deadline = req
        .param("timeoutSeconds")
        .and_then(|t| t.parse::<u64>().ok())
        .map(|t| Instant::now() + Duration::from_secs(t));
    // Streaming watch-list (client-go >= 1.35): initial ADDED events, then a bookmark marking their end.
    let watch_list = req.param("sendInitialEvents").is_some_and(|v| v == "true");
    let start_rv = req
        .param("resourceVersion")
        .and_then(|r| r.parse::<u64>().ok())
        .unwrap_or(0);
    let w = conn.get_mut();
    if http::start_chunked(w).is_err() {
        return (Next::Close, 200);
    }
    let mut out: Vec<u8> = Vec::new();
    let mut guard = shared.lock();
    let st = &mut *guard;
    if hold == Some(Hold::ThenGone) {
        let (tx, rx) = unbounded_channel();
        let _ = tx.send(Item::End(event_line(
            "ERROR",
            status_obj(410, "Expired", "injected fault: too old resource version"),
        )));
        let s = Stream {
            id: 0,
            rx,
            deadline,
            hold: Some(st.fault_epoch),
            pending: Vec::new(),
        };
        return (Next::Stream(s), 200);
    }
    let in_ns = |o: &Object| ns.is_none() || ns.as_deref() == Some(key_of(o).0.as_str());
    if start_rv != 0 && start_rv < st.store.compacted_below {
        let line = gone_line(start_rv, st.store.rv);
        drop(guard);
        let _ = http::write_chunk(w, &line);
        let _ = http::end_chunked(w);
        return (Next::Close, 200);
    }
    if start_rv == 0 || watch_list {
        for pod in st.store.pods.values() {
            if in_ns(pod) && sel.matches(pod) {
                out.extend(event_line("ADDED", pod.clone()));
            }
        }
        // Without allowWatchBookmarks a real server streams the initial events and no end marker.
        if watch_list && bookmarks {
            out.extend(bookmark_with(st.store.rv, true));
        }
    } else {
        // Resuming: what happened since the client's resource version.
        for c in st.store.changes_after(start_rv) {
            if let Some((kind, obj)) = visible(&sel, ns.as_deref(), c) {
                out.extend(event_line(kind, obj));
            }
        }
    }
    let (tx, rx) = unbounded_channel();
    let every = shared.bookmark_interval.max(Duration::from_millis(1));
    let id = st.watches.register(Watcher {
        node: sel.node_name().map(str::to_string),
        sel,
        ns,
        cursor: st.store.rv,
        epoch: st.store.gone_epoch,
        bookmarks: bookmarks.then_some(every),
        next_bookmark: Instant::now() + every,
        tx,
    });
    let held = hold.map(|_| st.fault_epoch);
    drop(guard);
    // The dispatcher may be asleep until a later bookmark than this watch's first one.
    shared.changed.notify_all();
    let pending = if held.is_some() {
        out
    } else {
        if http::write_chunk(w, &out).is_err() {
            shared.lock().watches.remove(id);
            return (Next::Close, 200);
        }
        Vec::new()
    };
    let s = Stream {
        id,
        rx,
        deadline,
        hold: held,
        pending,
    };
    (Next::Stream(s), 200)
}

/// The connection task's part of a watch: writes what the hub hands out until the watch's timeout, a 410,
/// the client's close or the server's stop; then ends the chunked body.
pub(crate) async fn stream<S>(shared: &Shared, io: S, mut s: Stream)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let (mut rd, mut wr) = tokio::io::split(io);
    let far = Instant::now() + Duration::from_secs(365 * 24 * 3600);
    let deadline = tokio::time::Instant::from_std(s.deadline.unwrap_or(far));
    let mut scratch = [0u8; 512];
    if let Some(epoch) = s.hold {
        // The head is out; the events wait (queued in `rx` meanwhile) until the fault is cleared.
        shared.held.fetch_add(1, Ordering::SeqCst);
        while !shared.stop.load(Ordering::SeqCst) && shared.lock().fault_epoch == epoch {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        shared.held.fetch_sub(1, Ordering::SeqCst);
    }
    let pending = std::mem::take(&mut s.pending);
    if !pending.is_empty() {
        let mut out = Vec::new();
        let _ = http::write_chunk(&mut out, &pending);
        if wr.write_all(&out).await.is_err() || wr.flush().await.is_err() {
            shared.lock().watches.remove(s.id);
            return;
        }
    }
    loop {
        let (data, last) = tokio::select! {
            item = s.rx.recv() => match item {
                Some(Item::Data(d)) => (d, false),
                Some(Item::End(d)) => (d, true),
                None => (Vec::new(), true),
            },
            _ = tokio::time::sleep_until(deadline) => (Vec::new(), true),
            // The client sends nothing on a watch: a read ending is its close (or a reset).
            r = rd.read(&mut scratch) => match r {
                Ok(n) if n > 0 => continue,
                _ => break,
            },
        };
        let mut data = data;
        let mut last = last;
        // Everything already queued goes out in one chunk.
        while !last {
            match s.rx.try_recv() {
                Ok(Item::Data(d)) => data.extend(d),
                Ok(Item::End(d)) => {
                    data.extend(d);
                    last = true;
                }
                Err(_) => break,
            }
        }
        let mut out = Vec::new();
        let _ = http::write_chunk(&mut out, &data);
        if last {
            let _ = http::end_chunked(&mut out);
        }
        let ok = wr.write_all(&out).await.is_ok() && wr.flush().await.is_ok();
        if last && ok {
            // close_notify, as the thread-per-connection server sent after a watch.
            let _ = wr.shutdown().await;
        }
        if last || !ok {
            break;
        }
    }
    shared.lock().watches.remove(s.id);
}

/// An injected watch answer: 200, then at once either the end of the stream or one ERROR 410 event.
pub(crate) fn injected(conn: &mut Conn, gone: bool) -> Next {
    let w = conn.get_mut();
    if http::start_chunked(w).is_err() {
        return Next::Close;
    }
    if gone {
        let line = event_line(
            "ERROR",
            status_obj(410, "Expired", "injected fault: too old resource version"),
        );
        if http::write_chunk(w, &line).is_err() {
            return Next::Close;
        }
    }
    let _ = http::end_chunked(w);
    Next::Close
}

fn watch_namespace(path: &str) -> Option<String> {
    let p: Vec<&str> = path.trim_matches('/').split('/').collect();
    match p.as_slice() {
        ["api", "v1", "namespaces", ns, "pods"] => Some(http::percent_decode(ns)),
        _ => None,
    }
}

fn status_obj(code: u16, reason: &str, message: &str) -> Object {
    json::from_str(&String::from_utf8_lossy(&status_body(
        code, reason, message,
    )))
    .unwrap_or_default()
}
