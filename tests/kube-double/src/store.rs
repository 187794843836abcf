//! The in-memory API state: pods keyed by namespace/name, one global resource version, a change history
//! for watches, recorded events; plus selectors and RFC 7386 merge patch.

use std::collections::BTreeMap;

use miniserde::json::{Number, Object, Value};

pub use crate::selector::Selector;

/// One change, kept for watches that resume from a resource version.
#[derive(Clone)]
pub struct Change {
    pub rv: u64,
    pub kind: &'static str, // ADDED | MODIFIED | DELETED
    pub object: Object,
    pub old: Option<Object>,
}

/// Changes kept for watches that resume from a resource version.
pub const MAX_HISTORY: usize = 20_000;

#[derive(Default)]
pub struct Store {
    pub rv: u64,
    pub uid_seq: u64,
    pub pods: BTreeMap<(String, String), Object>,
    pub history: Vec<Change>,
    /// Resource versions below this are "compacted": watching or listing from them gives 410.
    pub compacted_below: u64,
    /// Bumped by `force_gone`: open watches end with an ERROR 410.
    pub gone_epoch: u64,
    pub events: Vec<Object>,
    /// DaemonSets, Nodes, per-resource faults, pod-bound tokens.
    pub objects: crate::objects::Objects,
}

pub fn s(v: &str) -> Value {
    Value::String(v.to_string())
}

pub fn obj<'a>(o: &'a Object, k: &str) -> Option<&'a Object> {
    match o.get(k) {
        Some(Value::Object(x)) => Some(x),
        _ => None,
    }
}

pub fn str_at<'a>(o: &'a Object, path: &[&str]) -> Option<&'a str> {
    let (last, parents) = path.split_last()?;
    let mut cur = o;
    for p in parents {
        cur = obj(cur, p)?;
    }
    match cur.get(*last) {
        Some(Value::String(s)) => Some(s),
        _ => None,
    }
}

fn meta_mut(o: &mut Object) -> &mut Object {
    if !matches!(o.get("metadata"), Some(Value::Object(_))) {
        o.insert("metadata".into(), Value::Object(Object::new()));
    }
    match o.get_mut("metadata") {
        Some(Value::Object(m)) => m,
        _ => unreachable!("metadata was just inserted as an object"),
    }
}

pub fn key_of(o: &Object) -> (String, String) {
    (
        str_at(o, &["metadata", "namespace"])
            .unwrap_or("default")
            .to_string(),
        str_at(o, &["metadata", "name"]).unwrap_or("").to_string(),
    )
}

/// RFC 7386: objects merge recursively, `null` deletes, anything else replaces.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    match patch {
        Value::Object(p) => {
            if !matches!(target, Value::Object(_)) {
                *target = Value::Object(Object::new());
            }
            if let Value::Object(t) = target {
                for (k, v) in p.iter() {
                    if matches!(v, Value::Null) {
                        t.remove(k);
                    } else {
                        let entry = t.entry(k.clone()).or_insert(Value::Null);
                        merge_patch(entry, v);
                    }
                }
            }
        }
        other => *target = other.clone(),
    }
}

impl Store {
    fn bump(&mut self) -> String {
        self.rv += 1;
        self.rv.to_string()
    }

    fn record(&mut self, kind: &'static str, object: Object, old: Option<Object>) {
        self.history.push(Change {
            rv: self.rv,
            kind,
            object,
            old,
        });
        // Bounded history, like etcd compaction: older resource versions become 410 Gone.
        if self.history.len() > MAX_HISTORY {
            let cut = self.history.len() - MAX_HISTORY / 2;
            self.compacted_below = self.history[cut - 1].rv;
            self.history.drain(..cut);
        }
    }

    /// Changes after `rv`, oldest first.
    pub fn changes_after(&self, rv: u64) -> &[Change] {
        let i = self.history.partition_point(|c| c.rv <= rv);
        &self.history[i..]
    }

    /// Adds or replaces a pod: namespace defaults to `default`, uid kept or assigned, RV assigned.
    pub fn put_pod(&mut self, mut pod: Object) -> Result<Object, String> {
        if str_at(&pod, &["metadata", "name"]).unwrap_or("").is_empty() {
            return Err("pod has no metadata.name".into());
        }
        pod.entry("kind".into()).or_insert_with(|| s("Pod"));
        pod.entry("apiVersion".into()).or_insert_with(|| s("v1"));
        let key = key_of(&pod);
        let old = self.pods.get(&key).cloned();
        let uid = match (str_at(&pod, &["metadata", "uid"]), &old) {
            (Some(u), _) if !u.is_empty() => u.to_string(),
            (_, Some(o)) => str_at(o, &["metadata", "uid"]).unwrap_or("").to_string(),
            _ => {
                // Unique across every double of the process: tests running at once put their pods'
                // processes in cgroups named by these UIDs (a pod's namespace is found by its cgroup).
                static UIDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
                self.uid_seq += 1;
                let n = UIDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                format!("00000000-0000-4000-8000-{n:012x}")
            }
        };
        let rv = self.bump();
        let m = meta_mut(&mut pod);
        m.insert("namespace".into(), s(&key.0));
        m.insert("uid".into(), s(&uid));
        m.insert("resourceVersion".into(), s(&rv));
        self.pods.insert(key, pod.clone());
        let kind = if old.is_some() { "MODIFIED" } else { "ADDED" };
        self.record(kind, pod.clone(), old);
        Ok(pod)
    }

    /// Applies a merge patch to the pod's status subresource (metadata labels/annotations and status;
    /// spec changes are ignored, as on a real server). `Err((code, reason, message))`.
    pub fn patch_status(
        &mut self,
        key: &(String, String),
        patch: &Value,
    ) -> Result<Object, (u16, &'static str, String)> {
        let Some(old) = self.pods.get(key).cloned() else {
            return Err((404, "NotFound", format!("pods \"{}\" not found", key.1)));
        };
        if let Value::Object(p) = patch {
            if let Some(want) = obj(p, "metadata").and_then(|m| match m.get("resourceVersion") {
                Some(Value::String(s)) => Some(s.clone()),
                _ => None,
            }) {
                let have = str_at(&old, &["metadata", "resourceVersion"]).unwrap_or("");
                if want != have {
                    return Err((409, "Conflict", format!(
                        "Operation cannot be fulfilled on pods \"{}\": the object has been modified; please apply your changes to the latest version and try again",
                        key.1
                    )));
                }
            }
        } else {
            return Err((
                400,
                "BadRequest",
                "merge patch must be a JSON object".into(),
            ));
        }
        let mut v = Value::Object(old.clone());
        merge_patch(&mut v, patch);
        let Value::Object(mut pod) = v else {
            return Err((500, "InternalError", "patch produced a non-object".into()));
        };
        // Identity and spec are not changed through pods/status.
        for k in ["spec", "kind", "apiVersion"] {
            match old.get(k) {
                Some(x) => pod.insert(k.into(), x.clone()),
                None => pod.remove(k),
            };
        }
        let rv = self.bump();
        let m = meta_mut(&mut pod);
        for k in ["name", "namespace", "uid"] {
            if let Some(x) = obj(&old, "metadata").and_then(|om| om.get(k)) {
                m.insert(k.into(), x.clone());
            }
        }
        m.insert("resourceVersion".into(), s(&rv));
        self.pods.insert(key.clone(), pod.clone());
        self.record("MODIFIED", pod.clone(), Some(old));
        Ok(pod)
    }

    /// Deletes with optional preconditions; returns the last state.
    pub fn delete(
        &mut self,
        key: &(String, String),
        uid: Option<&str>,
        rv: Option<&str>,
    ) -> Result<Object, (u16, &'static str, String)> {
        let Some(old) = self.pods.get(key).cloned() else {
            return Err((404, "NotFound", format!("pods \"{}\" not found", key.1)));
        };
        self.check_preconditions(key, &old, uid, rv)?;
        self.pods.remove(key);
        let rv = self.bump();
        let mut last = old.clone();
        meta_mut(&mut last).insert("resourceVersion".into(), s(&rv));
        self.record("DELETED", last.clone(), Some(old));
        Ok(last)
    }

    /// `DELETE pods/{name}` as kube-apiserver answers it: preconditions first (409); a pod bound to a node
    /// and not finished is deleted gracefully: `metadata.deletionTimestamp` (now + the grace period) and
    /// `deletionGracePeriodSeconds` (`spec.terminationGracePeriodSeconds`, default 30) are set, a MODIFIED
    /// event goes out and that object is the answer. The kubelet that then confirms the deletion is an
    /// instant one here: the pod is removed (DELETED) at once, where a real node takes until its
    /// containers stopped. An unbound or finished pod is removed at once, as on a real server.
    pub fn delete_request(
        &mut self,
        key: &(String, String),
        uid: Option<&str>,
        rv: Option<&str>,
        now_unix: u64,
    ) -> Result<Object, (u16, &'static str, String)> {
        let Some(old) = self.pods.get(key).cloned() else {
            return Err((404, "NotFound", format!("pods \"{}\" not found", key.1)));
        };
        let bound = !str_at(&old, &["spec", "nodeName"]).unwrap_or("").is_empty();
        let finished = matches!(
            str_at(&old, &["status", "phase"]),
            Some("Succeeded" | "Failed")
        );
        let already = obj(&old, "metadata").is_some_and(|m| m.contains_key("deletionTimestamp"));
        if !bound || finished || already {
            return self.delete(key, uid, rv);
        }
        // The preconditions, checked (and answered) as `delete` does, before anything changes.
        self.check_preconditions(key, &old, uid, rv)?;
        let grace = match obj(&old, "spec").and_then(|sp| sp.get("terminationGracePeriodSeconds")) {
            Some(Value::Number(Number::U64(g))) => *g,
            Some(Value::Number(Number::I64(g))) if *g >= 0 => *g as u64,
            _ => 30,
        };
        let mut marked = old.clone();
        let new_rv = self.bump();
        let m = meta_mut(&mut marked);
        m.insert("deletionTimestamp".into(), s(&rfc3339(now_unix + grace)));
        m.insert("deletionGracePeriodSeconds".into(), number(grace));
        m.insert("resourceVersion".into(), s(&new_rv));
        self.pods.insert(key.clone(), marked.clone());
        self.record("MODIFIED", marked.clone(), Some(old));
        self.delete(key, None, None)?;
        Ok(marked)
    }

    fn check_preconditions(
        &self,
        key: &(String, String),
        old: &Object,
        uid: Option<&str>,
        rv: Option<&str>,
    ) -> Result<(), (u16, &'static str, String)> {
        let have_uid = str_at(old, &["metadata", "uid"]).unwrap_or("");
        let have_rv = str_at(old, &["metadata", "resourceVersion"]).unwrap_or("");
        if let Some(u) = uid.filter(|u| *u != have_uid) {
            return Err((409, "Conflict", format!(
                "Operation cannot be fulfilled on Pod \"{}\": the UID in the precondition ({u}) does not match the UID in record ({have_uid}). The object might have been deleted and then recreated",
                key.1
            )));
        }
        if let Some(r) = rv.filter(|r| *r != have_rv) {
            return Err((409, "Conflict", format!(
                "Operation cannot be fulfilled on Pod \"{}\": the ResourceVersion in the precondition ({r}) does not match the ResourceVersion in record ({have_rv}). The object might have been modified",
                key.1
            )));
        }
        Ok(())
    }

    pub fn add_event(&mut self, ns: &str, mut ev: Object) -> Object {
        self.uid_seq += 1;
        let uid = format!("00000000-0000-4000-9000-{:012x}", self.uid_seq);
        let rv = self.bump();
        let m = meta_mut(&mut ev);
        m.insert("namespace".into(), s(ns));
        m.insert("uid".into(), s(&uid));
        m.insert("resourceVersion".into(), s(&rv));
        self.events.push(ev.clone());
        ev
    }

    /// Makes every resource version seen so far too old (410 for watches and lists from it).
    pub fn force_gone(&mut self) {
        self.bump();
        self.compacted_below = self.rv;
        self.gone_epoch += 1;
        self.history.clear();
    }
}

/// `YYYY-MM-DDTHH:MM:SSZ` for a Unix time (UTC), as Kubernetes writes `metav1.Time`.
pub fn rfc3339(unix: u64) -> String {
    let (days, secs) = ((unix / 86_400) as i64, unix % 86_400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

pub fn number(n: u64) -> Value {
    Value::Number(Number::U64(n))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(text: &str) -> Object {
        miniserde::json::from_str(text).unwrap()
    }

    #[test]
    fn merge_patch_rfc7386() {
        let mut t = Value::Object(pod(r#"{"a":{"b":1,"c":2},"d":[1]}"#));
        let p = Value::Object(pod(r#"{"a":{"b":null,"e":3},"d":{"x":1}}"#));
        merge_patch(&mut t, &p);
        assert_eq!(
            miniserde::json::to_string(&t),
            r#"{"a":{"c":2,"e":3},"d":{"x":1}}"#
        );
    }

    #[test]
    fn store_assigns_uid_and_rv_and_checks_preconditions() {
        let mut st = Store::default();
        let p = st.put_pod(pod(r#"{"metadata":{"name":"a"}}"#)).unwrap();
        assert_eq!(str_at(&p, &["metadata", "namespace"]), Some("default"));
        assert_eq!(str_at(&p, &["metadata", "resourceVersion"]), Some("1"));
        let key = key_of(&p);
        let e = st.delete(&key, Some("wrong"), None).unwrap_err();
        assert_eq!(e.0, 409);
        let uid = str_at(&p, &["metadata", "uid"]).unwrap().to_string();
        let e = st.delete(&key, Some(&uid), Some("99")).unwrap_err();
        assert_eq!(e.0, 409);
        st.delete(&key, Some(&uid), Some("1")).unwrap();
        assert_eq!(st.delete(&key, None, None).unwrap_err().0, 404);
    }

    #[test]
    fn a_bound_pod_is_deleted_gracefully_then_by_an_instant_kubelet() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_795_320_030), "2026-11-22T04:00:30Z");
        let mut st = Store::default();
        let p = st
            .put_pod(pod(r#"{"metadata":{"name":"a"},"spec":{"nodeName":"n1"}}"#))
            .unwrap();
        let key = key_of(&p);
        assert_eq!(
            st.delete_request(&key, Some("x"), None, 0).unwrap_err().0,
            409
        );
        let marked = st
            .delete_request(&key, None, Some("1"), 1_795_320_000)
            .unwrap();
        assert_eq!(
            str_at(&marked, &["metadata", "deletionTimestamp"]),
            Some("2026-11-22T04:00:30Z")
        );
        let kinds: Vec<_> = st.history.iter().map(|c| c.kind).collect();
        assert_eq!(kinds, ["ADDED", "MODIFIED", "DELETED"]);
        assert!(st.pods.is_empty());
        st.put_pod(pod(r#"{"metadata":{"name":"u"}}"#)).unwrap();
        let u = ("default".to_string(), "u".to_string());
        let gone = st.delete_request(&u, None, None, 0).unwrap();
        assert!(str_at(&gone, &["metadata", "deletionTimestamp"]).is_none());
        assert_eq!(st.history.last().unwrap().kind, "DELETED");
    }
}
