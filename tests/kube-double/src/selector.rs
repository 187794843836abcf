//! Field and label selectors, as the API server parses them (the subset the double needs).

use miniserde::json::{Object, Value};

use crate::store::{obj, str_at};

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

    /// The node every matching pod is on (`spec.nodeName=X`), if the selector requires one: the key the
    /// watch hub indexes watchers by.
    pub fn node_name(&self) -> Option<&str> {
        self.fields.iter().find_map(|t| match t {
            FieldTerm::Eq(k, v) if k == "spec.nodeName" => Some(v.as_str()),
            _ => None,
        })
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
        let node = |f: &str| {
            Selector::parse(Some(f), None)
                .unwrap()
                .node_name()
                .map(str::to_string)
        };
        assert_eq!(
            node("metadata.name=a,spec.nodeName==n1").as_deref(),
            Some("n1")
        );
        assert_eq!(node("spec.nodeName!=n1"), None);
    }
}
