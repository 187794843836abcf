//! The `/_double/` admin endpoints and pod seeding from files.

use std::io;
use std::path::Path;
use std::time::Duration;

use miniserde::json::{self, Array, Object, Value};

use crate::api::{body_json, fail, ok, Reply};
use crate::http::HttpRequest;
use crate::store::{number, s, str_at};
use crate::{Fault, Shared};

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

pub(crate) fn admin(shared: &Shared, req: &HttpRequest) -> Reply {
    if let Some(r) = crate::objects::admin(shared, req) {
        return r;
    }
    let mut o = Object::new();
    match (req.method.as_str(), req.path.as_str()) {
        ("GET", "/_double/healthz") => {
            o.insert("ok".into(), Value::Bool(true));
            ok(200, o)
        }
        ("GET", "/_double/stats") => {
            ok(200, crate::serve::stats_json(&crate::serve::stats(shared)))
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
                "stall" => Fault::Stall,
                "retry-after" => Fault::RetryAfter(num("seconds").unwrap_or(1) as u32),
                "watch-close" => Fault::WatchClose,
                "watch-gone" => Fault::WatchGone,
                "watch-hold" => Fault::WatchHold,
                "watch-hold-gone" => Fault::WatchHoldGone,
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
            Reply::new(200, json::to_string(&Value::Array(arr)).into_bytes())
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
            Reply::new(200, json::to_string(&Value::Array(evs)).into_bytes())
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
