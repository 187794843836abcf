//! Routing: the Kubernetes API subset (pods get/list/watch/patch-status/delete, namespaces get, events)
//! and the `/_double/` admin endpoints.

use std::io::{self, BufReader, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use miniserde::json::{self, Array, Object, Value};
use rustls::{ServerConnection, StreamOwned};

use crate::http::{self, HttpRequest};
use crate::store::{key_of, number, s, str_at, Selector};
use crate::{Fault, RecordedRequest, Shared};

pub enum Next {
    KeepAlive,
    Close,
    Drop,
}

type Conn = BufReader<StreamOwned<ServerConnection, TcpStream>>;

fn status_body(code: u16, reason: &str, message: &str) -> Vec<u8> {
    let mut o = Object::new();
    o.insert("kind".into(), s("Status"));
    o.insert("apiVersion".into(), s("v1"));
    o.insert("metadata".into(), Value::Object(Object::new()));
    o.insert("status".into(), s("Failure"));
    o.insert("message".into(), s(message));
    o.insert("reason".into(), s(reason));
    o.insert("code".into(), number(code as u64));
    json::to_string(&Value::Object(o)).into_bytes()
}

fn reason_for(code: u16) -> &'static str {
    match code {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        405 => "MethodNotAllowed",
        409 => "Conflict",
        410 => "Expired",
        422 => "Invalid",
        429 => "TooManyRequests",
        503 => "ServiceUnavailable",
        _ => "InternalError",
    }
}

struct Reply {
    code: u16,
    body: Vec<u8>,
}

fn ok(code: u16, o: Object) -> Reply {
    Reply {
        code,
        body: json::to_string(&Value::Object(o)).into_bytes(),
    }
}

fn fail(code: u16, message: &str) -> Reply {
    Reply {
        code,
        body: status_body(code, reason_for(code), message),
    }
}

fn send(conn: &mut Conn, r: &Reply, close: bool) -> Next {
    match http::write_response(conn.get_mut(), r.code, &r.body, close) {
        Ok(()) if !close => Next::KeepAlive,
        _ => Next::Close,
    }
}

pub fn handle(shared: &Shared, req: HttpRequest, conn: &mut Conn) -> Next {
    let close = req.wants_close();
    if req.path.starts_with("/_double/") {
        let r = admin(shared, &req);
        return send(conn, &r, close);
    }
    let mut rec = RecordedRequest {
        method: req.method.clone(),
        path: req.path.clone(),
        query: req.query.clone(),
        body: String::from_utf8_lossy(&req.body).into_owned(),
        authorization: req.header("authorization").map(str::to_string),
        status: 0,
    };
    let fault = shared.take_fault(false);
    if let Some(Fault::Delay(d)) = &fault {
        std::thread::sleep(*d);
    }
    let reply = match fault {
        Some(Fault::Drop) => {
            shared.lock().requests.push(rec);
            return Next::Drop;
        }
        Some(Fault::Status(code)) => fail(code, &format!("injected fault: HTTP {code}")),
        _ => {
            let want = format!("Bearer {}", shared.lock().token);
            if rec.authorization.as_deref() != Some(want.as_str()) {
                fail(401, "Unauthorized")
            } else if is_watch(&req) {
                rec.status = 200;
                shared.lock().requests.push(rec);
                return watch(shared, &req, conn);
            } else {
                route(shared, &req)
            }
        }
    };
    rec.status = reply.code;
    shared.lock().requests.push(rec);
    send(conn, &reply, close)
}

fn is_watch(req: &HttpRequest) -> bool {
    req.method == "GET" && req.param("watch").is_some_and(|w| w == "true" || w == "1")
}

fn body_json(req: &HttpRequest) -> Result<Value, Reply> {
    let text = String::from_utf8_lossy(&req.body);
    json::from_str::<Value>(&text).map_err(|_| fail(400, "request body is not valid JSON"))
}

fn route(shared: &Shared, req: &HttpRequest) -> Reply {
    let parts: Vec<&str> = req.path.trim_matches('/').split('/').collect();
    let parts: Vec<String> = parts.iter().map(|p| http::percent_decode(p)).collect();
    let p: Vec<&str> = parts.iter().map(String::as_str).collect();
    match (req.method.as_str(), p.as_slice()) {
        ("GET", ["api", "v1", "pods"]) => list(shared, req, None),
        ("GET", ["api", "v1", "namespaces", ns, "pods"]) => list(shared, req, Some(ns)),
        ("GET", ["api", "v1", "namespaces", ns, "pods", name]) => {
            let st = shared.lock();
            match st.store.pods.get(&(ns.to_string(), name.to_string())) {
                Some(pod) => ok(200, pod.clone()),
                None => fail(404, &format!("pods \"{name}\" not found")),
            }
        }
        ("GET", ["api", "v1", "namespaces", ns]) => {
            let mut o = Object::new();
            o.insert("kind".into(), s("Namespace"));
            o.insert("apiVersion".into(), s("v1"));
            let mut m = Object::new();
            m.insert("name".into(), s(ns));
            m.insert("labels".into(), Value::Object(Object::new()));
            o.insert("metadata".into(), Value::Object(m));
            ok(200, o)
        }
        ("PATCH", ["api", "v1", "namespaces", ns, "pods", name, "status"]) => {
            let ct = req.header("content-type").unwrap_or("");
            if !ct.starts_with("application/merge-patch+json") {
                return fail(415, &format!("unsupported patch content type {ct:?}"));
            }
            let patch = match body_json(req) {
                Ok(v) => v,
                Err(r) => return r,
            };
            let r = shared
                .lock()
                .store
                .patch_status(&(ns.to_string(), name.to_string()), &patch);
            shared.changed.notify_all();
            match r {
                Ok(pod) => ok(200, pod),
                Err((c, _, m)) => fail(c, &m),
            }
        }
        ("DELETE", ["api", "v1", "namespaces", ns, "pods", name]) => {
            let opts = if req.body.is_empty() {
                Value::Object(Object::new())
            } else {
                match body_json(req) {
                    Ok(v) => v,
                    Err(r) => return r,
                }
            };
            let pre = match &opts {
                Value::Object(o) => crate::store::obj(o, "preconditions").cloned(),
                _ => None,
            }
            .unwrap_or_default();
            let uid = str_at(&pre, &["uid"]).map(str::to_string);
            let rv = str_at(&pre, &["resourceVersion"]).map(str::to_string);
            let r = shared.lock().store.delete(
                &(ns.to_string(), name.to_string()),
                uid.as_deref(),
                rv.as_deref(),
            );
            shared.changed.notify_all();
            match r {
                Ok(pod) => ok(200, pod),
                Err((c, _, m)) => fail(c, &m),
            }
        }
        ("POST", ["api", "v1", "namespaces", ns, "events"]) => match body_json(req) {
            Ok(Value::Object(ev)) => ok(201, shared.lock().store.add_event(ns, ev)),
            Ok(_) => fail(400, "event must be an object"),
            Err(r) => r,
        },
        ("PATCH", ["api", "v1", "namespaces", _ns, "events", _name]) => match body_json(req) {
            Ok(Value::Object(o)) => ok(200, o),
            Ok(_) => fail(400, "patch must be an object"),
            Err(r) => r,
        },
        (_, ["api", "v1", ..]) => fail(
            405,
            &format!("{} {} not supported by the double", req.method, req.path),
        ),
        _ => fail(
            404,
            &format!(
                "the server could not find the requested resource ({})",
                req.path
            ),
        ),
    }
}

fn selector(req: &HttpRequest) -> Result<Selector, Reply> {
    Selector::parse(
        req.param("fieldSelector").as_deref(),
        req.param("labelSelector").as_deref(),
    )
    .map_err(|e| fail(400, &e))
}

fn expired(rv: u64, current: u64) -> String {
    format!("too old resource version: {rv} ({current})")
}

fn list(shared: &Shared, req: &HttpRequest, ns: Option<&str>) -> Reply {
    let sel = match selector(req) {
        Ok(s) => s,
        Err(r) => return r,
    };
    let limit: usize = match req.param("limit").filter(|l| !l.is_empty()) {
        Some(l) => match l.parse::<usize>() {
            Ok(n) => n,
            Err(_) => return fail(400, &format!("invalid limit {l:?}")),
        },
        None => 0,
    };
    let after = match req.param("continue").filter(|c| !c.is_empty()) {
        Some(c) => match c.strip_prefix("c1:").and_then(|k| k.split_once('/')) {
            Some((a, b)) => Some((a.to_string(), b.to_string())),
            None => return fail(400, &format!("invalid continue token {c:?}")),
        },
        None => None,
    };
    let st = shared.lock();
    if let Some(rv) = req
        .param("resourceVersion")
        .and_then(|r| r.parse::<u64>().ok())
    {
        if rv != 0 && rv < st.store.compacted_below {
            return fail(410, &expired(rv, st.store.rv));
        }
    }
    let mut items = Array::new();
    let mut last = None;
    let mut more = false;
    for (key, pod) in st.store.pods.iter() {
        if ns.is_some_and(|n| n != key.0)
            || after.as_ref().is_some_and(|a| key <= a)
            || !sel.matches(pod)
        {
            continue;
        }
        if limit > 0 && items.len() == limit {
            more = true;
            break;
        }
        items.push(Value::Object(pod.clone()));
        last = Some(key.clone());
    }
    let mut meta = Object::new();
    meta.insert("resourceVersion".into(), s(&st.store.rv.to_string()));
    if more {
        if let Some((a, b)) = last {
            meta.insert("continue".into(), s(&format!("c1:{a}/{b}")));
        }
    }
    let mut o = Object::new();
    o.insert("kind".into(), s("PodList"));
    o.insert("apiVersion".into(), s("v1"));
    o.insert("metadata".into(), Value::Object(meta));
    o.insert("items".into(), Value::Array(items));
    ok(200, o)
}

fn event_line(kind: &str, object: Object) -> Vec<u8> {
    let mut o = Object::new();
    o.insert("type".into(), s(kind));
    o.insert("object".into(), Value::Object(object));
    let mut line = json::to_string(&Value::Object(o)).into_bytes();
    line.push(b'\n');
    line
}

fn bookmark(rv: u64) -> Vec<u8> {
    let mut m = Object::new();
    m.insert("resourceVersion".into(), s(&rv.to_string()));
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

fn watch(shared: &Shared, req: &HttpRequest, conn: &mut Conn) -> Next {
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
        } else if start_rv == 0 {
            for pod in st.store.pods.values() {
                if (ns.is_none() || ns == Some(key_of(pod).0.as_str())) && sel.matches(pod) {
                    out.extend(event_line("ADDED", pod.clone()));
                }
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

// ---------------------------------------------------------------------------------------------------
// Admin endpoints and seeding.

fn add_pods_value(shared: &Shared, v: Value) -> Result<usize, String> {
    let pods: Vec<Value> = match v {
        Value::Array(a) => a.into_iter().collect(),
        Value::Object(o) if matches!(o.get("items"), Some(Value::Array(_))) => match o.get("items")
        {
            Some(Value::Array(a)) => a.iter().cloned().collect(),
            _ => Vec::new(),
        },
        Value::Object(o) => vec![Value::Object(o)],
        _ => return Err("expected a pod, a list with items, or an array".into()),
    };
    let mut st = shared.lock();
    let mut n = 0;
    for p in pods {
        let Value::Object(o) = p else {
            return Err("a pod is not an object".into());
        };
        st.store.put_pod(o)?;
        n += 1;
    }
    drop(st);
    shared.changed.notify_all();
    Ok(n)
}

pub fn load_pods(shared: &Shared, path: &Path) -> io::Result<usize> {
    let mut files = Vec::new();
    if path.is_dir() {
        for e in std::fs::read_dir(path)? {
            let p = e?.path();
            if p.extension().is_some_and(|x| x == "json") {
                files.push(p);
            }
        }
        files.sort();
    } else {
        files.push(path.to_path_buf());
    }
    let mut n = 0;
    for f in files {
        let text = std::fs::read_to_string(&f)?;
        let v: Value = json::from_str(&text)
            .map_err(|_| io::Error::other(format!("{}: not valid JSON", f.display())))?;
        n += add_pods_value(shared, v)
            .map_err(|e| io::Error::other(format!("{}: {e}", f.display())))?;
    }
    Ok(n)
}

fn admin(shared: &Shared, req: &HttpRequest) -> Reply {
    let mut o = Object::new();
    match (req.method.as_str(), req.path.as_str()) {
        ("GET", "/_double/healthz") => {
            o.insert("ok".into(), Value::Bool(true));
            ok(200, o)
        }
        ("POST", "/_double/pods") => match body_json(req).map_err(|r| r.code) {
            Ok(v) => match add_pods_value(shared, v) {
                Ok(n) => {
                    o.insert("added".into(), number(n as u64));
                    ok(200, o)
                }
                Err(e) => fail(400, &e),
            },
            Err(_) => fail(400, "body is not JSON"),
        },
        ("POST", "/_double/fault") => {
            let Ok(Value::Object(b)) = body_json(req) else {
                return fail(
                    400,
                    "body must be an object like {\"fault\":\"status\",\"code\":500,\"times\":2}",
                );
            };
            let num = |k: &str| match b.get(k) {
                Some(Value::Number(json::Number::U64(n))) => Some(*n),
                _ => None,
            };
            let fault = match str_at(&b, &["fault"]).unwrap_or("") {
                "none" | "" => {
                    drop_fault(shared);
                    return ok(200, o);
                }
                "delay" => Fault::Delay(Duration::from_millis(num("ms").unwrap_or(1000))),
                "hang" => Fault::Hang,
                "drop" => Fault::Drop,
                "wrong-cert" => Fault::WrongCert,
                "status" => Fault::Status(num("code").unwrap_or(500) as u16),
                other => return fail(400, &format!("unknown fault {other:?}")),
            };
            let times = num("times").map(|t| t as u32);
            let mut st = shared.lock();
            st.fault = Some(crate::FaultRule {
                fault,
                remaining: times,
            });
            st.fault_epoch += 1;
            ok(200, o)
        }
        ("GET", "/_double/requests") => {
            let st = shared.lock();
            let arr: Array = st
                .requests
                .iter()
                .map(|r| {
                    let mut x = Object::new();
                    x.insert("method".into(), s(&r.method));
                    x.insert("path".into(), s(&r.path));
                    x.insert("query".into(), s(&r.query));
                    x.insert("body".into(), s(&r.body));
                    x.insert("status".into(), number(r.status as u64));
                    Value::Object(x)
                })
                .collect();
            Reply {
                code: 200,
                body: json::to_string(&Value::Array(arr)).into_bytes(),
            }
        }
        ("DELETE", "/_double/requests") => {
            shared.lock().requests.clear();
            ok(200, o)
        }
        ("GET", "/_double/events") => {
            let evs: Array = shared
                .lock()
                .store
                .events
                .iter()
                .cloned()
                .map(Value::Object)
                .collect();
            Reply {
                code: 200,
                body: json::to_string(&Value::Array(evs)).into_bytes(),
            }
        }
        ("POST", "/_double/gone") => {
            shared.lock().store.force_gone();
            shared.changed.notify_all();
            ok(200, o)
        }
        ("POST", "/_double/token") => match body_json(req) {
            Ok(Value::Object(b)) => match str_at(&b, &["token"]) {
                Some(t) if !t.is_empty() => {
                    shared.lock().token = t.to_string();
                    ok(200, o)
                }
                _ => fail(400, "body must be {\"token\":\"...\"}"),
            },
            _ => fail(400, "body must be {\"token\":\"...\"}"),
        },
        _ => fail(
            404,
            &format!("unknown admin endpoint {} {}", req.method, req.path),
        ),
    }
}

fn drop_fault(shared: &Shared) {
    let mut st = shared.lock();
    st.fault = None;
    st.fault_epoch += 1;
    drop(st);
    shared.changed.notify_all();
}
