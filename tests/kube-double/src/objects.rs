//! DaemonSets and Nodes (GET only), faults for one resource, and pod-bound tokens.
//!
//! - `GET /apis/apps/v1/namespaces/{ns}/daemonsets/{name}` and `GET /api/v1/nodes/{name}` (404 when absent).
//! - A fault for the non-watch requests of one resource (`pods`, `daemonsets`, `nodes`, ...), after
//!   authentication: `Status(code)` (403, 401, 503, ...), `Delay`, or `Stall` (held until cleared, then
//!   answered), for the next N requests or until cleared. The global fault (`Server::set_fault`) still comes
//!   first.
//! - A token bound to a pod (as the kubelet's projected service-account tokens are): accepted while that pod
//!   exists, 401 once it is deleted, besides the server's own token.
//!
//! Admin endpoints: `POST /_double/daemonsets` (an object, added or replaced), `DELETE
//! /_double/daemonsets/{ns}/{name}`, `POST /_double/daemonsets/{ns}/{name}/deleting` (sets
//! `metadata.deletionTimestamp`), `POST /_double/nodes`, `DELETE /_double/nodes/{name}`, `POST
//! /_double/resource-fault` (`{"resource":"daemonsets","fault":"status","code":403,"times":2}`, `"stall"`,
//! `{"fault":"delay","ms":300}`, `{"resource":"daemonsets","fault":"none"}`), `POST /_double/bound-token`
//! (`{"token":"…","namespace":"…","pod":"…"}`).

use std::collections::BTreeMap;
use std::io;
use std::time::Duration;

use miniserde::json::{self, Number, Object, Value};

use crate::api::{body_json, fail, ok, Reply};
use crate::http::{self, HttpRequest};
use crate::store::{s, str_at};
use crate::{Fault, Server, Shared};

/// The objects and rules of this module, kept in the [`crate::Store`].
#[derive(Default)]
pub struct Objects {
    pub daemonsets: BTreeMap<(String, String), Object>,
    pub nodes: BTreeMap<String, Object>,
    /// resource → (fault, remaining uses; `None` = until cleared).
    pub faults: BTreeMap<String, (Fault, Option<u32>)>,
    /// token → the pod (namespace, name) it is bound to.
    pub bound_tokens: BTreeMap<String, (String, String)>,
}

fn invalid(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg.into())
}

/// Sets identity fields as the API server would: kind, apiVersion, uid, resourceVersion, generation.
fn stamp(mut o: Object, kind: &str, api_version: &str, seq: u64) -> Object {
    o.insert("kind".into(), s(kind));
    o.insert("apiVersion".into(), s(api_version));
    if !matches!(o.get("metadata"), Some(Value::Object(_))) {
        o.insert("metadata".into(), Value::Object(Object::new()));
    }
    if let Some(Value::Object(m)) = o.get_mut("metadata") {
        if str_at(m, &["uid"]).unwrap_or("").is_empty() {
            m.insert(
                "uid".into(),
                s(&format!("00000000-0000-4000-a000-{seq:012x}")),
            );
        }
        m.insert("resourceVersion".into(), s(&seq.to_string()));
        m.entry("generation".into())
            .or_insert(Value::Number(Number::U64(1)));
    }
    o
}

fn parse(text: &str) -> io::Result<Object> {
    json::from_str::<Object>(text).map_err(|_| invalid("not a JSON object"))
}

impl Shared {
    fn put_daemonset(&self, o: Object) -> Result<Object, String> {
        let name = str_at(&o, &["metadata", "name"]).unwrap_or("").to_string();
        if name.is_empty() {
            return Err("daemonset has no metadata.name".into());
        }
        let ns = str_at(&o, &["metadata", "namespace"])
            .unwrap_or("default")
            .to_string();
        let mut st = self.lock();
        st.store.rv += 1;
        let mut o = stamp(o, "DaemonSet", "apps/v1", st.store.rv);
        if let Some(Value::Object(m)) = o.get_mut("metadata") {
            m.insert("namespace".into(), s(&ns));
        }
        st.store.objects.daemonsets.insert((ns, name), o.clone());
        Ok(o)
    }

    fn put_node(&self, o: Object) -> Result<Object, String> {
        let name = str_at(&o, &["metadata", "name"]).unwrap_or("").to_string();
        if name.is_empty() {
            return Err("node has no metadata.name".into());
        }
        let mut st = self.lock();
        st.store.rv += 1;
        let o = stamp(o, "Node", "v1", st.store.rv);
        st.store.objects.nodes.insert(name, o.clone());
        Ok(o)
    }

    fn mark_deleting(&self, ns: &str, name: &str) -> bool {
        let mut st = self.lock();
        st.store.rv += 1;
        let rv = st.store.rv.to_string();
        let Some(o) = st
            .store
            .objects
            .daemonsets
            .get_mut(&(ns.to_string(), name.to_string()))
        else {
            return false;
        };
        if let Some(Value::Object(m)) = o.get_mut("metadata") {
            m.insert("deletionTimestamp".into(), s("2026-01-01T00:00:00Z"));
            m.insert("resourceVersion".into(), s(&rv));
        }
        true
    }

    fn set_resource_fault(&self, resource: &str, fault: Option<Fault>, times: Option<u32>) {
        let mut st = self.lock();
        match fault {
            Some(f) => st.store.objects.faults.insert(resource.into(), (f, times)),
            None => st.store.objects.faults.remove(resource),
        };
        st.fault_epoch += 1;
        drop(st);
        // Requests stalled by an earlier fault are released.
        self.changed.notify_all();
    }
}

/// Is `authorization` the server's token, or a token bound to a pod that still exists?
pub(crate) fn authorized(shared: &Shared, authorization: Option<&str>) -> bool {
    let st = shared.lock();
    let Some(token) = authorization.and_then(|a| a.strip_prefix("Bearer ")) else {
        return false;
    };
    token == st.token
        || st
            .store
            .objects
            .bound_tokens
            .get(token)
            .is_some_and(|pod| st.store.pods.contains_key(pod))
}

/// The resource a path names: `pods`, `daemonsets`, `nodes`, `namespaces`, ...
fn resource_of(path: &str) -> Option<String> {
    let p: Vec<&str> = path.trim_matches('/').split('/').collect();
    let rest = match p.as_slice() {
        ["api", "v1", rest @ ..] => rest,
        ["apis", _group, _version, rest @ ..] => rest,
        _ => return None,
    };
    match rest {
        ["namespaces", _ns, resource, ..] => Some(resource.to_string()),
        [resource, ..] => Some(resource.to_string()),
        [] => None,
    }
}

/// The fault set for this request's resource, if any, applied: `Some(reply)` to send instead of the
/// normal answer (a stall is held here until cleared, then answered normally: `None`).
pub(crate) fn resource_fault(shared: &Shared, req: &HttpRequest) -> Option<Reply> {
    let resource = resource_of(&req.path)?;
    let fault = {
        let mut st = shared.lock();
        let (fault, remaining) = st.store.objects.faults.get_mut(&resource)?;
        let f = fault.clone();
        if let Some(n) = remaining.as_mut() {
            *n = n.saturating_sub(1);
            if *n == 0 {
                st.store.objects.faults.remove(&resource);
            }
        }
        f
    };
    match fault {
        Fault::Status(code) => Some(fail(
            code,
            &format!("injected fault on {resource}: HTTP {code}"),
        )),
        Fault::Delay(d) => {
            std::thread::sleep(d);
            None
        }
        Fault::Answer(code, body) => Some(Reply::new(code, body.into_bytes())),
        _ => {
            crate::hold_until_cleared(shared);
            None
        }
    }
}

/// The API routes of this module.
pub(crate) fn route(shared: &Shared, req: &HttpRequest, p: &[&str]) -> Option<Reply> {
    let st = shared.lock();
    Some(match (req.method.as_str(), p) {
        ("GET", ["apis", "apps", "v1", "namespaces", ns, "daemonsets", name]) => {
            match st
                .store
                .objects
                .daemonsets
                .get(&(ns.to_string(), name.to_string()))
            {
                Some(o) => ok(200, o.clone()),
                None => fail(404, &format!("daemonsets.apps \"{name}\" not found")),
            }
        }
        ("GET", ["api", "v1", "nodes", name]) => match st.store.objects.nodes.get(*name) {
            Some(o) => ok(200, o.clone()),
            None => fail(404, &format!("nodes \"{name}\" not found")),
        },
        _ => return None,
    })
}

/// The admin endpoints of this module.
pub(crate) fn admin(shared: &Shared, req: &HttpRequest) -> Option<Reply> {
    let parts: Vec<String> = req
        .path
        .trim_matches('/')
        .split('/')
        .map(http::percent_decode)
        .collect();
    let p: Vec<&str> = parts.iter().map(String::as_str).collect();
    let done = || ok(200, Object::new());
    let object = || match body_json(req) {
        Ok(Value::Object(o)) => Ok(o),
        _ => Err(fail(400, "body must be a JSON object")),
    };
    Some(match (req.method.as_str(), p.as_slice()) {
        ("POST", ["_double", "daemonsets"]) => match object() {
            Ok(o) => shared
                .put_daemonset(o)
                .map_or_else(|e| fail(400, &e), |o| ok(200, o)),
            Err(r) => r,
        },
        ("DELETE", ["_double", "daemonsets", ns, name]) => {
            let key = (ns.to_string(), name.to_string());
            match shared.lock().store.objects.daemonsets.remove(&key) {
                Some(_) => done(),
                None => fail(404, "no such daemonset"),
            }
        }
        ("POST", ["_double", "daemonsets", ns, name, "deleting"]) => {
            if shared.mark_deleting(ns, name) {
                done()
            } else {
                fail(404, "no such daemonset")
            }
        }
        ("POST", ["_double", "nodes"]) => match object() {
            Ok(o) => shared
                .put_node(o)
                .map_or_else(|e| fail(400, &e), |o| ok(200, o)),
            Err(r) => r,
        },
        ("DELETE", ["_double", "nodes", name]) => {
            match shared.lock().store.objects.nodes.remove(*name) {
                Some(_) => done(),
                None => fail(404, "no such node"),
            }
        }
        ("POST", ["_double", "resource-fault"]) => {
            let b = match object() {
                Ok(b) => b,
                Err(r) => return Some(r),
            };
            let num = |k: &str| match b.get(k) {
                Some(Value::Number(Number::U64(n))) => Some(*n),
                _ => None,
            };
            let Some(resource) = str_at(&b, &["resource"]).filter(|r| !r.is_empty()) else {
                return Some(fail(400, "resource-fault needs \"resource\""));
            };
            let fault = match str_at(&b, &["fault"]).unwrap_or("") {
                "none" | "" => None,
                "status" => Some(Fault::Status(num("code").unwrap_or(500) as u16)),
                "delay" => Some(Fault::Delay(Duration::from_millis(
                    num("ms").unwrap_or(1000),
                ))),
                "stall" | "hang" => Some(Fault::Stall),
                other => return Some(fail(400, &format!("unknown resource fault {other:?}"))),
            };
            shared.set_resource_fault(resource, fault, num("times").map(|t| t as u32));
            done()
        }
        ("POST", ["_double", "bound-token"]) => {
            let b = match object() {
                Ok(b) => b,
                Err(r) => return Some(r),
            };
            match (
                str_at(&b, &["token"]),
                str_at(&b, &["namespace"]),
                str_at(&b, &["pod"]),
            ) {
                (Some(t), Some(ns), Some(pod)) if !t.is_empty() => {
                    shared
                        .lock()
                        .store
                        .objects
                        .bound_tokens
                        .insert(t.into(), (ns.into(), pod.into()));
                    done()
                }
                _ => fail(400, "body must be {\"token\":…,\"namespace\":…,\"pod\":…}"),
            }
        }
        _ => return None,
    })
}

impl Server {
    /// Adds (or replaces) a DaemonSet from its JSON.
    pub fn add_daemonset(&self, json: &str) -> io::Result<Object> {
        self.shared.put_daemonset(parse(json)?).map_err(invalid)
    }

    /// Removes a DaemonSet (GET answers 404 from now on).
    pub fn delete_daemonset(&self, ns: &str, name: &str) -> bool {
        self.shared
            .lock()
            .store
            .objects
            .daemonsets
            .remove(&(ns.to_string(), name.to_string()))
            .is_some()
    }

    /// Sets `metadata.deletionTimestamp` on a DaemonSet (a foreground deletion in progress).
    pub fn mark_daemonset_deleting(&self, ns: &str, name: &str) -> bool {
        self.shared.mark_deleting(ns, name)
    }

    /// Adds (or replaces) a Node from its JSON.
    pub fn add_node(&self, json: &str) -> io::Result<Object> {
        self.shared.put_node(parse(json)?).map_err(invalid)
    }

    pub fn delete_node(&self, name: &str) -> bool {
        self.shared
            .lock()
            .store
            .objects
            .nodes
            .remove(name)
            .is_some()
    }

    /// Injects `fault` (`Status`, `Delay`, or anything else = stall until cleared) for the next `times`
    /// non-watch requests of `resource` (`pods`, `daemonsets`, `nodes`), or until cleared when `None`.
    pub fn set_resource_fault(&self, resource: &str, fault: Fault, times: Option<u32>) {
        self.shared.set_resource_fault(resource, Some(fault), times);
    }

    /// Removes the fault of `resource` and releases requests it stalled.
    pub fn clear_resource_fault(&self, resource: &str) {
        self.shared.set_resource_fault(resource, None, None);
    }

    /// Accepts `token` while the pod `ns/pod` exists (a kubelet-projected, pod-bound token).
    pub fn bind_token(&self, token: &str, ns: &str, pod: &str) {
        self.shared
            .lock()
            .store
            .objects
            .bound_tokens
            .insert(token.into(), (ns.into(), pod.into()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_names_from_paths() {
        let r = |p: &str| resource_of(p);
        assert_eq!(r("/api/v1/namespaces/ns/pods/p").as_deref(), Some("pods"));
        assert_eq!(r("/api/v1/pods").as_deref(), Some("pods"));
        assert_eq!(r("/api/v1/nodes/n1").as_deref(), Some("nodes"));
        assert_eq!(
            r("/apis/apps/v1/namespaces/ns/daemonsets/d").as_deref(),
            Some("daemonsets")
        );
        assert_eq!(r("/api/v1/namespaces/ns").as_deref(), Some("namespaces"));
        assert_eq!(r("/healthz"), None);
    }
}
