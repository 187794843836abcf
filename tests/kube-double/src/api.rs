//! Routing: the Kubernetes API subset (pods get/list/watch/patch-status/delete, namespaces get, events;
//! daemonsets and nodes get in [`crate::objects`]) and the `/_double/` admin endpoints.

use miniserde::json::{self, Array, Object, Value};

use crate::http::{self, HttpRequest};
use crate::store::{key_of, number, s, str_at, Selector};
use crate::{At, Fault, RecordedRequest, Shared};
use std::collections::{BTreeMap, BTreeSet};

pub(crate) enum Next {
    KeepAlive,
    Close,
    Drop,
    /// A watch: the connection streams what the hub hands out.
    Stream(crate::watch::Stream),
}

pub(crate) use crate::serve::Conn;

pub(crate) fn status_body(code: u16, reason: &str, message: &str) -> Vec<u8> {
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

/// The API server's reason for a code. Deliberately its own table, not the client's (`kube::status`): the
/// double must stay independent of the code it tests.
pub(crate) fn reason_for(code: u16) -> &'static str {
    match code {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        405 => "MethodNotAllowed",
        409 => "Conflict",
        410 => "Expired",
        415 => "UnsupportedMediaType",
        422 => "Invalid",
        429 => "TooManyRequests",
        503 => "ServiceUnavailable",
        _ => "InternalError",
    }
}

pub(crate) struct Reply {
    pub code: u16,
    pub body: Vec<u8>,
    /// `Retry-After` seconds, sent as a header when set.
    pub retry_after: Option<u32>,
}

impl Reply {
    pub fn new(code: u16, body: Vec<u8>) -> Reply {
        Reply {
            code,
            body,
            retry_after: None,
        }
    }
}

pub(crate) fn ok(code: u16, o: Object) -> Reply {
    Reply::new(code, json::to_string(&Value::Object(o)).into_bytes())
}

pub(crate) fn fail(code: u16, message: &str) -> Reply {
    Reply::new(code, status_body(code, reason_for(code), message))
}

pub(crate) fn send(conn: &mut Conn, r: &Reply, close: bool) -> Next {
    let extra = r
        .retry_after
        .map(|s| format!("Retry-After: {s}\r\n"))
        .unwrap_or_default();
    match http::write_response_with(conn.get_mut(), r.code, &r.body, close, &extra) {
        Ok(()) if !close => Next::KeepAlive,
        _ => Next::Close,
    }
}

pub(crate) fn handle(shared: &Shared, req: HttpRequest, conn: &mut Conn) -> Next {
    let close = req.wants_close();
    if req.path.starts_with("/_double/") {
        let r = crate::admin::admin(shared, &req);
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
    let at = if is_watch(&req) {
        At::Watch
    } else {
        At::Request
    };
    // A server without the streaming watch-list refuses it before anything else (faults included).
    if at == At::Watch {
        if let Some(why) = crate::watch::watch_list_refusal(shared, &req) {
            rec.status = 422;
            shared.lock().requests.push(rec);
            return send(
                conn,
                &Reply::new(422, status_body(422, "Invalid", &why)),
                true,
            );
        }
    }
    let fault = shared.take_fault(at);
    if let Some(Fault::Delay(d)) = &fault {
        std::thread::sleep(*d);
    }
    let reply = match fault {
        Some(Fault::Drop) => {
            shared.lock().requests.push(rec);
            return Next::Drop;
        }
        Some(Fault::Stall) => {
            shared.lock().requests.push(rec);
            crate::hold_until_cleared(shared);
            return Next::Drop;
        }
        Some(Fault::Status(code)) => fail(code, &format!("injected fault: HTTP {code}")),
        Some(Fault::Answer(code, body)) => Reply::new(code, body.into_bytes()),
        Some(Fault::RetryAfter(secs)) => Reply {
            retry_after: Some(secs),
            ..fail(429, "injected fault: too many requests, retry later")
        },
        Some(f @ (Fault::WatchClose | Fault::WatchGone)) => {
            rec.status = 200;
            shared.lock().requests.push(rec);
            return crate::watch::injected(conn, f == Fault::WatchGone);
        }
        other => {
            let hold = match other {
                Some(Fault::WatchHold) => Some(crate::watch::Hold::Events),
                Some(Fault::WatchHoldGone) => Some(crate::watch::Hold::ThenGone),
                _ => None,
            };
            if !crate::objects::authorized(shared, rec.authorization.as_deref()) {
                fail(401, "Unauthorized")
            } else if is_watch(&req) {
                let (next, status) = crate::watch::watch(shared, &req, conn, hold);
                rec.status = status;
                shared.lock().requests.push(rec);
                return next;
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

pub(crate) fn body_json(req: &HttpRequest) -> Result<Value, Reply> {
    let text = String::from_utf8_lossy(&req.body);
    json::from_str::<Value>(&text).map_err(|_| fail(400, "request body is not valid JSON"))
}

fn route(shared: &Shared, req: &HttpRequest) -> Reply {
    let parts: Vec<&str> = req.path.trim_matches('/').split('/').collect();
    let parts: Vec<String> = parts.iter().map(|p| http::percent_decode(p)).collect();
    let p: Vec<&str> = parts.iter().map(String::as_str).collect();
    if let Some(r) = crate::objects::resource_fault(shared, req) {
        return r;
    }
    if let Some(r) = crate::objects::route(shared, req, &p) {
        return r;
    }
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
                return fail(415, "415: Unsupported Media Type");
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
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0);
            let r = shared.lock().store.delete_request(
                &(ns.to_string(), name.to_string()),
                uid.as_deref(),
                rv.as_deref(),
                now,
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

pub(crate) fn selector(req: &HttpRequest) -> Result<Selector, Reply> {
    Selector::parse(
        req.param("fieldSelector").as_deref(),
        req.param("labelSelector").as_deref(),
    )
    .map_err(|e| fail(400, &e))
}

/// A continue token `c2:<resource version>:<namespace>/<name>`.
fn parse_continue(c: &str) -> Option<(u64, (String, String))> {
    let (rv, key) = c.strip_prefix("c2:")?.split_once(':')?;
    let (a, b) = key.split_once('/')?;
    Some((rv.parse().ok()?, (a.to_string(), b.to_string())))
}

pub(crate) fn expired(rv: u64, current: u64) -> String {
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
    // A continue token names the first page's resource version and the last key served: every page of one
    // LIST is served as of that version (a real API server reads its later pages from etcd at it), so a
    // change made between two pages is in none of them and reaches the client through a watch from the
    // list's resourceVersion, as on a real server.
    let cont = match req.param("continue").filter(|c| !c.is_empty()) {
        Some(c) => match parse_continue(&c) {
            Some(t) => Some(t),
            None => return fail(400, &format!("invalid continue token {c:?}")),
        },
        None => None,
    };
    // A LIST's `resourceVersion` means "not older than": a real API server serves it from its watch cache
    // (the current state) however old it is; only a watch from an expired one is 410.
    let st = shared.lock();
    let snapshot = cont.as_ref().map_or(st.store.rv, |(rv, _)| *rv);
    if snapshot < st.store.compacted_below {
        return fail(
            410,
            "The provided continue parameter is too old to display a consistent list result. You can start \
             a new list without the continue parameter.",
        );
    }
    let after = cont.map(|(_, key)| key);
    // The pods as of `snapshot`: the current ones, with each pod changed since put back as it was before
    // its first change after it (`None`: it did not exist then).
    let mut then: BTreeMap<(String, String), Option<&Object>> = BTreeMap::new();
    for c in st.store.changes_after(snapshot) {
        then.entry(key_of(&c.object)).or_insert(c.old.as_ref());
    }
    let keys: BTreeSet<&(String, String)> = st.store.pods.keys().chain(then.keys()).collect();
    let mut items = Array::new();
    let mut last = None;
    let mut more = false;
    for key in keys {
        let Some(pod) = then
            .get(key)
            .copied()
            .unwrap_or_else(|| st.store.pods.get(key))
        else {
            continue;
        };
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
    meta.insert("resourceVersion".into(), s(&snapshot.to_string()));
    if more {
        if let Some((a, b)) = last {
            meta.insert("continue".into(), s(&format!("c2:{snapshot}:{a}/{b}")));
        }
    }
    let mut o = Object::new();
    o.insert("kind".into(), s("PodList"));
    o.insert("apiVersion".into(), s("v1"));
    o.insert("metadata".into(), Value::Object(meta));
    o.insert("items".into(), Value::Array(items));
    ok(200, o)
}
