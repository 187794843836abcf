//! A pod object reduced to what [`PodInfo::from_pod`](crate::redirect::PodInfo::from_pod) reads, and
//! nothing else: name, namespace, uid, the labels and annotations in
//! [`READ_LABELS`]/[`READ_ANNOTATIONS`], every container's and init container's name, the `istio-proxy`
//! container's env entries in [`READ_PROXY_ENV`], the first two of its `args` and its
//! `securityContext.runAsUser/runAsGroup`, and `status.podIP(s)`. Values are copied verbatim (a malformed
//! one stays malformed, so the decision fails on it as it fails on the API server's object); whatever
//! `from_pod` reads is there, so a cached pod decides exactly as the full object does. Pure.

use crate::json::{self, Array, Object, Value};
use crate::redirect::pod::{PROXY_CONTAINER, READ_ANNOTATIONS, READ_LABELS, READ_PROXY_ENV};

/// Largest reduced pod (compact JSON) the cache keeps; a bigger one is kept as "too large" and the plugin
/// reads it from the API server. A typical injected pod reduces to well under 1 KiB.
pub const MAX_POD_BYTES: usize = 32 * 1024;

/// One pod as the cache keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reduced {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub resource_version: String,
    /// `status.phase` is `Succeeded` or `Failed`: no sandbox is ever set up for it again.
    pub terminal: bool,
    /// The reduced object as compact JSON, or `None` when it is over [`MAX_POD_BYTES`].
    pub body: Option<String>,
}

fn str_at<'a>(o: Option<&'a Object>, k: &str) -> &'a str {
    o.and_then(|o| json::str_of(o, k)).unwrap_or("")
}

/// Copies the entries of `keys` present in `from` (verbatim) into a new object under `key` of `to`.
fn copy_keys(from: &Object, key: &str, keys: &[&str], to: &mut Object) {
    match from.get(key) {
        None => {}
        Some(Value::Object(m)) => {
            let mut out = Object::new();
            for k in keys {
                if let Some(v) = m.get(*k) {
                    out.insert(k.to_string(), v.clone());
                }
            }
            to.insert(key.into(), Value::Object(out));
        }
        // Null or malformed: as it is (from_pod reads null as absent and fails on the rest).
        Some(v) => {
            to.insert(key.into(), v.clone());
        }
    }
}

fn copy_fields(from: &Object, keys: &[&str], to: &mut Object) {
    for k in keys {
        if let Some(v) = from.get(*k) {
            to.insert(k.to_string(), v.clone());
        }
    }
}

/// The proxy container's env entries the decision reads; malformed entries stay, so they fail alike.
fn proxy_env(env: &Array) -> Array {
    let mut out = Array::new();
    for e in env.iter() {
        match e {
            Value::Object(o) => match o.get("name") {
                Some(Value::String(n)) if !READ_PROXY_ENV.contains(&n.as_str()) => {}
                Some(Value::String(_)) => {
                    let mut r = Object::new();
                    copy_fields(o, &["name", "value"], &mut r);
                    out.push(Value::Object(r));
                }
                _ => out.push(e.clone()),
            },
            _ => out.push(e.clone()),
        }
    }
    out
}

fn container(c: &Value) -> Value {
    let Value::Object(c) = c else {
        return c.clone();
    };
    let mut r = Object::new();
    copy_fields(c, &["name"], &mut r);
    if json::str_of(c, "name") == Some(PROXY_CONTAINER) {
        // Each reduced when it has the expected shape, else copied as it is.
        let reduce = |key: &str, v: &Value| match (key, v) {
            ("env", Value::Array(a)) => Value::Array(proxy_env(a)),
            ("args", Value::Array(a)) => Value::Array(a.iter().take(2).cloned().collect()),
            ("securityContext", Value::Object(sc)) => {
                let mut s = Object::new();
                copy_fields(sc, &["runAsUser", "runAsGroup"], &mut s);
                Value::Object(s)
            }
            _ => v.clone(),
        };
        for key in ["env", "args", "securityContext"] {
            if let Some(v) = c.get(key) {
                r.insert(key.into(), reduce(key, v));
            }
        }
    }
    Value::Object(r)
}

fn containers(spec: &Object, key: &str, to: &mut Object) {
    match spec.get(key) {
        Some(Value::Array(a)) => {
            let mut out = Array::new();
            out.extend(a.iter().map(container));
            to.insert(key.into(), Value::Array(out));
        }
        Some(v) => {
            to.insert(key.into(), v.clone());
        }
        None => {}
    }
}

fn pod_ips(status: &Object, to: &mut Object) {
    copy_fields(status, &["podIP"], to);
    match status.get("podIPs") {
        Some(Value::Array(a)) => {
            let mut out = Array::new();
            for p in a.iter() {
                out.push(match p {
                    Value::Object(p) => {
                        let mut r = Object::new();
                        copy_fields(p, &["ip"], &mut r);
                        Value::Object(r)
                    }
                    other => other.clone(),
                });
            }
            to.insert("podIPs".into(), Value::Array(out));
        }
        Some(v) => {
            to.insert("podIPs".into(), v.clone());
        }
        None => {}
    }
}

/// `key` of `pod` reduced by `fill` into `out` (a non-object value as it is).
fn section(pod: &Object, key: &str, out: &mut Object, fill: impl Fn(&Object, &mut Object)) {
    match pod.get(key) {
        Some(Value::Object(s)) => {
            let mut r = Object::new();
            fill(s, &mut r);
            out.insert(key.into(), Value::Object(r));
        }
        Some(v) => {
            out.insert(key.into(), v.clone());
        }
        None => {}
    }
}

/// The reduced object (see the module doc).
pub fn reduce_object(pod: &Object) -> Object {
    let mut out = Object::new();
    match pod.get("metadata") {
        Some(Value::Object(m)) => {
            let mut r = Object::new();
            copy_fields(m, &["name", "namespace", "uid"], &mut r);
            copy_keys(m, "labels", &READ_LABELS, &mut r);
            copy_keys(m, "annotations", &READ_ANNOTATIONS, &mut r);
            out.insert("metadata".into(), Value::Object(r));
        }
        Some(v) => {
            out.insert("metadata".into(), v.clone());
        }
        None => {}
    }
    section(pod, "spec", &mut out, |s, r| {
        containers(s, "initContainers", r);
        containers(s, "containers", r);
    });
    section(pod, "status", &mut out, pod_ips);
    out
}

/// The pod as the cache keeps it: its keys, and the reduced object's JSON when it fits.
pub fn reduce(pod: &Object) -> Reduced {
    let meta = json::obj_of(pod, "metadata");
    let status = json::obj_of(pod, "status");
    let body = json::to_compact(&Value::Object(reduce_object(pod)));
    Reduced {
        namespace: str_at(meta, "namespace").to_string(),
        name: str_at(meta, "name").to_string(),
        uid: str_at(meta, "uid").to_string(),
        resource_version: str_at(meta, "resourceVersion").to_string(),
        terminal: matches!(str_at(status, "phase"), "Succeeded" | "Failed"),
        body: (body.len() <= MAX_POD_BYTES).then_some(body),
    }
}

#[cfg(test)]
#[path = "reduce_tests.rs"]
mod tests;
