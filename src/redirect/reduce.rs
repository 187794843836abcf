//! A pod object reduced to what [`PodInfo::from_pod`](crate::redirect::PodInfo::from_pod) reads, and
//! nothing else: name, namespace, uid, the labels and annotations in
//! [`READ_LABELS`]/[`READ_ANNOTATIONS`] (and a static pod's mirror annotation, the kubelet's UID for it), every container's and init container's name, the `istio-proxy`
//! container's env entries in [`READ_PROXY_ENV`], the first two of its `args` and its
//! `securityContext.runAsUser/runAsGroup`, and `status.podIP(s)`. Values are copied verbatim (a malformed
//! one stays malformed, so the decision fails on it as it fails on the API server's object); whatever
//! `from_pod` reads is there, so a cached pod decides exactly as the full object does. Pure.

use super::pod::{PROXY_CONTAINER, READ_ANNOTATIONS, READ_LABELS, READ_PROXY_ENV};
use crate::json::{self, Object, Value};
use crate::kube::pod::MIRROR_ANNOTATION;

/// Largest reduced pod (compact JSON) the cache keeps; a bigger one is kept as "too large" and the plugin
/// reads it from the API server. A typical injected pod reduces to well under 1 KiB.
pub const MAX_POD_BYTES: usize = 32 * 1024;

/// The shape of what [`reduce_object`] keeps besides its key lists (which fields of a container, of
/// `istio-proxy`, of the status): bump it with any change to that shape, so [`reduction_id`] changes.
const SHAPE: u32 = 1;

/// This build's reduction, named (a hash of `SHAPE` and every key list it keeps): a pod reduced by
/// another build (the pod cache's agent during a rolling update, while the new plugin binary is already
/// in place) is decided by this build's code only under the same name. A key this build reads and that
/// build dropped would read as absent, and absent is "no sidecar" or the default capture.
pub fn reduction_id() -> &'static str {
    static ID: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    ID.get_or_init(reduction_hash)
}

/// [`reduction_id`]'s hash, made once per process.
fn reduction_hash() -> String {
    let lists: [&[&str]; 5] = [
        &READ_LABELS,
        &READ_ANNOTATIONS,
        &[MIRROR_ANNOTATION],
        &READ_PROXY_ENV,
        &[PROXY_CONTAINER],
    ];
    // FNV-1a (64 bits) over the shape and each key, each list ended by a byte no key holds.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for b in bytes {
            h = (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    };
    eat(&SHAPE.to_le_bytes());
    for list in lists {
        for k in list {
            eat(k.as_bytes());
            eat(b"\n");
        }
        eat(b"\0");
    }
    format!("{h:016x}")
}

/// One pod as the cache keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reduced {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// A static pod's mirror: the kubelet's UID for it ([`crate::kube::pod::kubelet_uid`]), the one a
    /// runtime passes as `K8S_POD_UID`; empty for any other pod.
    pub kubelet_uid: String,
    pub resource_version: String,
    /// `status.phase` is `Succeeded` or `Failed`: no sandbox is ever set up for it again.
    pub terminal: bool,
    /// The reduced object as compact JSON, or `None` when it is over [`MAX_POD_BYTES`].
    pub body: Option<String>,
}

fn copy_fields(from: &Object, keys: &[&str], to: &mut Object) {
    for k in keys {
        if let Some(v) = from.get(*k) {
            to.insert(k.to_string(), v.clone());
        }
    }
}

/// An object with only the fields `keys` of `v` (any other value as it is).
fn only(v: &Value, keys: &[&str]) -> Value {
    let Value::Object(o) = v else {
        return v.clone();
    };
    let mut r = Object::new();
    copy_fields(o, keys, &mut r);
    Value::Object(r)
}

/// `key` of `from` reduced by `fill` into `to`. Null or malformed: as it is (from_pod reads null as absent
/// and fails on the rest).
fn section(from: &Object, key: &str, to: &mut Object, fill: impl Fn(&Object, &mut Object)) {
    match from.get(key) {
        Some(Value::Object(s)) => {
            let mut r = Object::new();
            fill(s, &mut r);
            to.insert(key.into(), Value::Object(r));
        }
        Some(v) => {
            to.insert(key.into(), v.clone());
        }
        None => {}
    }
}

/// `key` of `from` with each item mapped by `item` into `to` (a non-array value as it is).
fn list(from: &Object, key: &str, to: &mut Object, item: impl Fn(&Value) -> Value) {
    match from.get(key) {
        Some(Value::Array(a)) => {
            to.insert(key.into(), Value::Array(a.iter().map(item).collect()));
        }
        Some(v) => {
            to.insert(key.into(), v.clone());
        }
        None => {}
    }
}

/// A proxy container's env entry, `None` when the decision does not read it; malformed entries stay, so
/// they fail alike.
fn proxy_env(e: &Value) -> Option<Value> {
    let Value::Object(o) = e else {
        return Some(e.clone());
    };
    match o.get("name") {
        Some(Value::String(n)) if !READ_PROXY_ENV.contains(&n.as_str()) => None,
        Some(Value::String(_)) => Some(only(e, &["name", "value"])),
        _ => Some(e.clone()),
    }
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
            ("env", Value::Array(a)) => Value::Array(a.iter().filter_map(proxy_env).collect()),
            ("args", Value::Array(a)) => Value::Array(a.iter().take(2).cloned().collect()),
            ("securityContext", v) => only(v, &["runAsUser", "runAsGroup"]),
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

/// The reduced object (see the module doc).
pub fn reduce_object(pod: &Object) -> Object {
    let mut out = Object::new();
    section(pod, "metadata", &mut out, |m, r| {
        copy_fields(m, &["name", "namespace", "uid"], r);
        section(m, "labels", r, |l, r| copy_fields(l, &READ_LABELS, r));
        section(m, "annotations", r, |a, r| {
            copy_fields(a, &READ_ANNOTATIONS, r);
            copy_fields(a, &[MIRROR_ANNOTATION], r);
        });
    });
    section(pod, "spec", &mut out, |s, r| {
        list(s, "initContainers", r, container);
        list(s, "containers", r, container);
    });
    section(pod, "status", &mut out, |s, r| {
        copy_fields(s, &["podIP"], r);
        list(s, "podIPs", r, |p| only(p, &["ip"]));
    });
    out
}

/// The reduced object as compact JSON, `None` over [`MAX_POD_BYTES`] (what the pod cache serves and the
/// audit keeps across restarts).
pub fn reduced_text(pod: &Object) -> Option<String> {
    let body = json::to_compact(&Value::Object(reduce_object(pod)));
    (body.len() <= MAX_POD_BYTES).then_some(body)
}

/// The pod as the cache keeps it: its keys, and the reduced object's JSON when it fits.
pub fn reduce(pod: &Object) -> Reduced {
    let v = crate::kube::PodView::of(pod);
    let kubelet_uid = crate::kube::pod::kubelet_uid(pod);
    Reduced {
        namespace: v.namespace.into(),
        name: v.name.into(),
        uid: v.uid.into(),
        kubelet_uid: if kubelet_uid == v.uid {
            String::new()
        } else {
            kubelet_uid.into()
        },
        resource_version: v.resource_version.into(),
        terminal: v.terminal,
        body: reduced_text(pod),
    }
}

#[cfg(test)]
#[path = "reduce_tests.rs"]
mod tests;
