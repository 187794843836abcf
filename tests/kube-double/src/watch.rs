//! Watch streams: initial ADDED events or resume from a resource version, selector transitions,
//! bookmarks, timeouts and the forced 410.

use std::io::{self, Write};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use miniserde::json::{self, Object, Value};

use crate::api::{expired, selector, send, status_body, Conn, Next};
use crate::http::{self, HttpRequest};
use crate::store::{key_of, s, Selector};
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
    let mut o = Object::new();
    o.insert("kind".into(), s("Pod"));
    o.insert("apiVersion".into(), s("v1"));
    o.insert("metadata".into(), Value::Object(m));
    event_line("BOOKMARK", o)
}

/// The event a selector-filtered watcher sees for one change, if any.
fn visible(
    sel: &Selector,
    ns: Option<&str>,
    c: &crate::store::Change,
) -> Option<(&'static str, Object)> {
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

pub(crate) fn watch(shared: &Shared, req: &HttpRequest, conn: &mut Conn) -> Next {
    let sel = match selector(req) {
        Ok(s) => s,
        Err(r) => return send(conn, &r, true),
    };
    let ns_owned = watch_namespace(&req.path);
    let ns = ns_owned.as_deref();
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
        return Next::Close;
    }
    let mut out: Vec<u8> = Vec::new();
    let (mut cursor, epoch) = {
        let st = shared.lock();
        if start_rv != 0 && start_rv < st.store.compacted_below {
            out = event_line(
                "ERROR",
                status_obj(410, "Expired", &expired(start_rv, st.store.rv)),
            );
            (u64::MAX, st.store.gone_epoch)
        } else if start_rv == 0 || watch_list {
            for pod in st.store.pods.values() {
                if (ns.is_none() || ns == Some(key_of(pod).0.as_str())) && sel.matches(pod) {
                    out.extend(event_line("ADDED", pod.clone()));
                }
            }
            if watch_list {
                out.extend(bookmark_with(st.store.rv, true));
            }
            (st.store.rv, st.store.gone_epoch)
        } else {
            (start_rv, st.store.gone_epoch)
        }
    };
    if http::write_chunk(w, &out).is_err() {
        return Next::Close;
    }
    if cursor == u64::MAX {
        let _ = http::end_chunked(w);
        return Next::Close;
    }
    let mut next_bookmark = Instant::now() + shared.bookmark_interval;
    loop {
        let mut buf = Vec::new();
        let mut gone = false;
        {
            let mut st = shared.lock();
            loop {
                if shared.stop.load(Ordering::SeqCst) {
                    return Next::Close;
                }
                if st.store.gone_epoch != epoch {
                    buf = event_line(
                        "ERROR",
                        status_obj(410, "Expired", &expired(cursor, st.store.rv)),
                    );
                    gone = true;
                    break;
                }
                for c in st.store.changes_after(cursor) {
                    if let Some((kind, obj)) = visible(&sel, ns, c) {
                        buf.extend(event_line(kind, obj));
                    }
                }
                cursor = cursor.max(st.store.rv);
                let now = Instant::now();
                if !buf.is_empty() || deadline.is_some_and(|d| now >= d) {
                    break;
                }
                if bookmarks && now >= next_bookmark {
                    buf = bookmark(st.store.rv);
                    next_bookmark = now + shared.bookmark_interval;
                    break;
                }
                let mut wait = Duration::from_millis(500);
                if bookmarks {
                    wait = wait.min(next_bookmark.saturating_duration_since(now));
                }
                if let Some(d) = deadline {
                    wait = wait.min(d.saturating_duration_since(now));
                }
                st = match shared
                    .changed
                    .wait_timeout(st, wait.max(Duration::from_millis(1)))
                {
                    Ok((g, _)) => g,
                    Err(p) => p.into_inner().0,
                };
            }
        }
        if write_chunk_io(w, &buf).is_err() {
            return Next::Close;
        }
        if gone || deadline.is_some_and(|d| Instant::now() >= d) {
            let _ = http::end_chunked(w);
            return Next::Close;
        }
    }
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

fn write_chunk_io(w: &mut impl Write, buf: &[u8]) -> io::Result<()> {
    http::write_chunk(w, buf)
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
