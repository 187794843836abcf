//! Kubernetes label and field selectors, parsed once and matched client-side. The API server applies them
//! already; the agent applies them again so a server (or double) that ignores them cannot make it act on a
//! pod outside its node or selection.

use crate::error::{Error, Result};
use crate::json::{self, Object};

#[derive(Debug, Clone, PartialEq, Eq)]
enum LabelReq {
    Eq(String, String),
    Ne(String, String),
    Exists(String),
    NotExists(String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
}

/// A parsed label selector: `k=v`, `k==v`, `k!=v`, `k`, `!k`, `k in (a,b)`, `k notin (a,b)`, ANDed by `,`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector(Vec<LabelReq>);

/// Splits on commas outside parentheses.
fn split_terms(s: &str) -> Vec<&str> {
    let (mut out, mut depth, mut start) = (Vec::new(), 0i32, 0usize);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out.into_iter()
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .collect()
}

fn set_of(key: &str, rest: &str, sel: &str) -> Result<Vec<String>> {
    let inner = rest
        .trim()
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| bad_label(sel, &format!("the set for {key:?} must be in parentheses")))?;
    Ok(inner
        .split(',')
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect())
}

fn bad_label(sel: &str, why: &str) -> Error {
    Error::config(format!("repair: label selector {sel:?}: {why}"))
}

fn valid_key(k: &str) -> bool {
    !k.is_empty()
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
}

impl LabelSelector {
    pub fn parse(sel: &str) -> Result<LabelSelector> {
        let mut reqs = Vec::new();
        for t in split_terms(sel) {
            let req = if let Some(k) = t.strip_prefix('!') {
                LabelReq::NotExists(k.trim().to_string())
            } else if let Some((k, v)) = t.split_once("!=") {
                LabelReq::Ne(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = t.split_once("==").or_else(|| t.split_once('=')) {
                LabelReq::Eq(k.trim().into(), v.trim().into())
            } else if let Some((k, rest)) = t.split_once(" notin ") {
                LabelReq::NotIn(k.trim().into(), set_of(k, rest, sel)?)
            } else if let Some((k, rest)) = t.split_once(" in ") {
                LabelReq::In(k.trim().into(), set_of(k, rest, sel)?)
            } else {
                LabelReq::Exists(t.to_string())
            };
            let key = match &req {
                LabelReq::Eq(k, _)
                | LabelReq::Ne(k, _)
                | LabelReq::Exists(k)
                | LabelReq::NotExists(k)
                | LabelReq::In(k, _)
                | LabelReq::NotIn(k, _) => k,
            };
            if !valid_key(key) {
                return Err(bad_label(sel, &format!("invalid label key {key:?}")));
            }
            reqs.push(req);
        }
        Ok(LabelSelector(reqs))
    }

    /// Matches a pod's `metadata.labels` (absent = no labels).
    pub fn matches(&self, labels: Option<&Object>) -> bool {
        let get = |k: &str| labels.and_then(|l| json::str_of(l, k));
        self.0.iter().all(|r| match r {
            LabelReq::Eq(k, v) => get(k) == Some(v.as_str()),
            LabelReq::Ne(k, v) => get(k) != Some(v.as_str()),
            LabelReq::Exists(k) => get(k).is_some(),
            LabelReq::NotExists(k) => get(k).is_none(),
            LabelReq::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            LabelReq::NotIn(k, vs) => !get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
        })
    }
}

/// A parsed field selector over the pod fields the API server supports for pods that matter here:
/// `metadata.name`, `metadata.namespace`, `spec.nodeName`, `status.phase`, `status.podIP`,
/// `spec.serviceAccountName`, `spec.schedulerName`, `spec.restartPolicy`; `=`, `==`, `!=`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSelector(Vec<(String, bool, String)>);

const FIELDS: &[&str] = &[
    "metadata.name",
    "metadata.namespace",
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "status.phase",
    "status.podIP",
    "status.nominatedNodeName",
];

/// Splits on unescaped commas, removing the escapes (`\,`, `\=`, `\\`) as the API server does.
fn split_escaped(s: &str) -> Vec<String> {
    let (mut out, mut cur, mut esc) = (Vec::new(), String::new(), false);
    for c in s.chars() {
        match (esc, c) {
            (true, c) => {
                if !matches!(c, ',' | '=' | '!' | '\\') {
                    cur.push('\\');
                }
                cur.push(c);
                esc = false;
            }
            (false, '\\') => esc = true,
            (false, ',') => out.push(std::mem::take(&mut cur)),
            (false, c) => cur.push(c),
        }
    }
    out.push(cur);
    out.into_iter()
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty())
        .collect()
}

impl FieldSelector {
    pub fn parse(sel: &str) -> Result<FieldSelector> {
        let mut reqs = Vec::new();
        for t in split_escaped(sel) {
            let (k, eq, v) = if let Some((k, v)) = t.split_once("!=") {
                (k, false, v)
            } else if let Some((k, v)) = t.split_once("==").or_else(|| t.split_once('=')) {
                (k, true, v)
            } else {
                return Err(Error::config(format!(
                    "repair: field selector {sel:?}: term {t:?} has no operator"
                )));
            };
            let k = k.trim();
            if !FIELDS.contains(&k) {
                return Err(Error::config(format!(
                    "repair: field selector {sel:?}: field {k:?} is not supported for pods"
                )));
            }
            reqs.push((k.to_string(), eq, v.trim().to_string()));
        }
        Ok(FieldSelector(reqs))
    }

    /// Matches a pod object; an absent field counts as "".
    pub fn matches(&self, pod: &Object) -> bool {
        self.0.iter().all(|(k, eq, v)| {
            let (section, field) = k.split_once('.').unwrap_or(("", k));
            let got = json::obj_of(pod, section)
                .and_then(|o| json::str_of(o, field))
                .unwrap_or("");
            (got == v) == *eq
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(s: &str) -> Object {
        crate::json::parse_object(s, "t").unwrap()
    }

    #[test]
    fn label_selector_forms() {
        let l = labels(r#"{"a":"1","b":"x"}"#);
        let m = |s: &str| LabelSelector::parse(s).unwrap().matches(Some(&l));
        assert!(m("") && m("a=1") && m("a==1") && m("a!=2") && m("a") && m("!c"));
        assert!(m("a in (1, 2),b notin (y)") && m("c notin (1)"));
        assert!(!m("a=2") && !m("c") && !m("!a") && !m("b in (y,z)") && !m("a=1,c"));
        assert!(!LabelSelector::parse("testlabel=true")
            .unwrap()
            .matches(None));
        assert!(LabelSelector::parse("a in 1").is_err());
        assert!(LabelSelector::parse("a b=c").is_err());
    }

    #[test]
    fn field_selector_forms() {
        let pod = labels(r#"{"metadata":{"name":"p"},"spec":{"nodeName":"n1"}}"#);
        let m = |s: &str| FieldSelector::parse(s).unwrap().matches(&pod);
        assert!(m("spec.nodeName=n1") && m("spec.nodeName==n1,metadata.name!=q,"));
        assert!(m("status.phase=") && !m("spec.nodeName=") && !m("spec.nodeName!=n1"));
        let e = FieldSelector::parse("spec.foo=1").unwrap_err().to_string();
        assert!(e.contains("spec.foo"), "{e}");
        assert!(FieldSelector::parse("spec.nodeName").is_err());
        assert!(m("metadata.name=p,spec.nodeName=n1"));
        assert_eq!(split_escaped(r"a=x\,y,b=z"), vec!["a=x,y", "b=z"]);
    }
}
