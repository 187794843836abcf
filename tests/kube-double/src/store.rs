//! The in-memory API state: pods keyed by namespace/name, one global resource version, a change history
//! for watches, recorded events; plus selectors and RFC 7386 merge patch.

use std::collections::BTreeMap;

use miniserde::json::{Number, Object, Value};

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
                self.uid_seq += 1;
                format!("00000000-0000-4000-8000-{:012x}", self.uid_seq)
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
        let have_uid = str_at(&old, &["metadata", "uid"]).unwrap_or("");
        let have_rv = str_at(&old, &["metadata", "resourceVersion"]).unwrap_or("");
        if let Some(u) = uid.filter(|u| *u != have_uid) {
            return Err((409, "Conflict", format!(
                "Operation cannot be fulfilled on Pod \"{}\": Precondition failed: UID in precondition: {u}, UID in object meta: {have_uid}",
                key.1
            )));
        }
        if let Some(r) = rv.filter(|r| *r != have_rv) {
            return Err((409, "Conflict", format!(
                "Operation cannot be fulfilled on Pod \"{}\": Precondition failed: ResourceVersion in precondition: {r}, ResourceVersion in object meta: {have_rv}",
                key.1
            )));
        }
        self.pods.remove(key);
        let rv = self.bump();
        let mut last = old.clone();
        meta_mut(&mut last).insert("resourceVersion".into(), s(&rv));
        self.record("DELETED", last.clone(), Some(old));
        Ok(last)
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

pub fn number(n: u64) -> Value {
    Value::Number(Number::U64(n))
}

// ---------------------------------------------------------------------------------------------------
// Selectors.

#[derive(Debug, Clone)]
pub enum FieldTerm {
    Eq(String, String),
    Ne(String, String),
}

pub const FIELDS: &[&str] = &[
    "spec.nodeName",
    "metadata.name",
    "metadata.namespace",
    "status.phase",
];

pub fn parse_fields(sel: &str) -> Result<Vec<FieldTerm>, String> {
    let mut out = Vec::new();
    for term in sel.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        let (k, v, ne) = if let Some((k, v)) = term.split_once("!=") {
            (k, v, true)
        } else if let Some((k, v)) = term.split_once("==") {
            (k, v, false)
        } else if let Some((k, v)) = term.split_once('=') {
            (k, v, false)
        } else {
            return Err(format!("invalid field selector term {term:?}"));
        };
        let k = k.trim();
        if !FIELDS.contains(&k) {
            return Err(format!("field label not supported: {k}"));
        }
        let (k, v) = (k.to_string(), v.trim().to_string());
        out.push(if ne {
            FieldTerm::Ne(k, v)
        } else {
            FieldTerm::Eq(k, v)
        });
    }
    Ok(out)
}

pub fn fields_match(terms: &[FieldTerm], pod: &Object) -> bool {
    terms.iter().all(|t| {
        let get = |k: &str| {
            let path: Vec<&str> = k.split('.').collect();
            str_at(pod, &path).unwrap_or("").to_string()
        };
        match t {
            FieldTerm::Eq(k, v) => get(k) == *v,
            FieldTerm::Ne(k, v) => get(k) != *v,
        }
    })
}

#[derive(Debug, Clone)]
pub enum LabelTerm {
    Eq(String, String),
    Ne(String, String),
    Exists(String),
    NotExists(String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
}

/// Splits on commas outside parentheses.
fn split_terms(sel: &str) -> Vec<String> {
    let (mut out, mut cur, mut depth) = (Vec::new(), String::new(), 0i32);
    for c in sel.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(std::mem::take(&mut cur));
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    out.push(cur);
    out.into_iter()
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty())
        .collect()
}

fn set_of(s: &str) -> Result<Vec<String>, String> {
    let inner = s
        .trim()
        .strip_prefix('(')
        .and_then(|x| x.strip_suffix(')'))
        .ok_or_else(|| format!("invalid set {s:?}"))?;
    Ok(inner.split(',').map(|v| v.trim().to_string()).collect())
}

pub fn parse_labels(sel: &str) -> Result<Vec<LabelTerm>, String> {
    let mut out = Vec::new();
    for term in split_terms(sel) {
        let t = term.as_str();
        let parsed = if let Some((k, v)) = t.split_once("!=") {
            LabelTerm::Ne(k.trim().into(), v.trim().into())
        } else if let Some((k, v)) = t.split_once("==") {
            LabelTerm::Eq(k.trim().into(), v.trim().into())
        } else if let Some((k, v)) = t.split_once('=') {
            LabelTerm::Eq(k.trim().into(), v.trim().into())
        } else if let Some((k, set)) = t.split_once(" notin ") {
            LabelTerm::NotIn(k.trim().into(), set_of(set)?)
        } else if let Some((k, set)) = t.split_once(" in ") {
            LabelTerm::In(k.trim().into(), set_of(set)?)
        } else if let Some(k) = t.strip_prefix('!') {
            LabelTerm::NotExists(k.trim().into())
        } else if !t.contains([' ', '(', ')']) {
            LabelTerm::Exists(t.into())
        } else {
            return Err(format!("invalid label selector term {t:?}"));
        };
        out.push(parsed);
    }
    Ok(out)
}

pub fn labels_match(terms: &[LabelTerm], pod: &Object) -> bool {
    let labels = obj(pod, "metadata").and_then(|m| obj(m, "labels"));
    let get = |k: &str| -> Option<String> {
        match labels.and_then(|l| l.get(k)) {
            Some(Value::String(s)) => Some(s.clone()),
            _ => None,
        }
    };
    terms.iter().all(|t| match t {
        LabelTerm::Eq(k, v) => get(k).as_deref() == Some(v.as_str()),
        LabelTerm::Ne(k, v) => get(k).as_deref() != Some(v.as_str()),
        LabelTerm::Exists(k) => get(k).is_some(),
        LabelTerm::NotExists(k) => get(k).is_none(),
        LabelTerm::In(k, set) => get(k).is_some_and(|v| set.contains(&v)),
        LabelTerm::NotIn(k, set) => !get(k).is_some_and(|v| set.contains(&v)),
    })
}

/// Field and label selectors together.
#[derive(Debug, Clone, Default)]
pub struct Selector {
    pub fields: Vec<FieldTerm>,
    pub labels: Vec<LabelTerm>,
}

impl Selector {
    pub fn parse(field: Option<&str>, label: Option<&str>) -> Result<Selector, String> {
        Ok(Selector {
            fields: parse_fields(field.unwrap_or(""))?,
            labels: parse_labels(label.unwrap_or(""))?,
        })
    }

    pub fn matches(&self, pod: &Object) -> bool {
        fields_match(&self.fields, pod) && labels_match(&self.labels, pod)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(text: &str) -> Object {
        miniserde::json::from_str(text).unwrap()
    }

    #[test]
    fn selectors() {
        let p = pod(
            r#"{"metadata":{"name":"a","namespace":"n","labels":{"app":"x","tier":"web"}},"spec":{"nodeName":"node1"},"status":{"phase":"Running"}}"#,
        );
        let sel = |f: &str, l: &str| Selector::parse(Some(f), Some(l)).unwrap().matches(&p);
        assert!(sel("spec.nodeName=node1", ""));
        assert!(sel("spec.nodeName==node1,metadata.namespace=n", "app=x"));
        assert!(!sel("spec.nodeName=node2", ""));
        assert!(sel("status.phase!=Pending", "app in (x,y),!missing,tier"));
        assert!(!sel("", "app notin (x)"));
        assert!(!sel("", "app!=x"));
        assert!(Selector::parse(Some("spec.foo=1"), None).is_err());
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
}
