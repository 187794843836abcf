//! Pure request building: method, path with an escaped query, body. No I/O; unit-tested without a server.
//!
//! Query keys are emitted in sorted order (as client-go's `url.Values.Encode` does), values are
//! percent-encoded so selectors such as `spec.nodeName=node-1,app!=x` survive intact.

use crate::error::{Error, Result};
use crate::json::{self, Value};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Get,
    Post,
    Patch,
    Delete,
}

impl Method {
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Post => "POST",
            Method::Patch => "PATCH",
            Method::Delete => "DELETE",
        }
    }
}

/// One API request, ready for the transport.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub method: Method,
    /// Absolute path plus query, e.g. `/api/v1/pods?fieldSelector=spec.nodeName%3Dn1&limit=500`.
    pub path: String,
    pub body: Option<String>,
    pub content_type: Option<&'static str>,
}

/// Parameters of a pod LIST.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListParams {
    /// `None` or empty lists across all namespaces (`/api/v1/pods`).
    pub namespace: Option<String>,
    pub label_selector: Option<String>,
    pub field_selector: Option<String>,
    pub limit: Option<u32>,
    pub continue_token: Option<String>,
    /// `Some("0")` reads from the watch cache, as client-go's first list does.
    pub resource_version: Option<String>,
}

/// Parameters of a pod WATCH.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WatchParams {
    pub namespace: Option<String>,
    pub label_selector: Option<String>,
    pub field_selector: Option<String>,
    pub resource_version: Option<String>,
    pub allow_bookmarks: bool,
    /// Server-side timeout; the client's own total timeout is this plus a margin.
    pub timeout_seconds: Option<u32>,
}

/// Percent-encodes everything but RFC 3986 unreserved characters.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// A path segment (namespace or object name): non-empty, not `.`/`..`, escaped.
fn segment(what: &str, s: &str) -> Result<String> {
    if s.is_empty() || s == "." || s == ".." {
        return Err(Error::config(format!(
            "kubernetes request: invalid {what} {s:?}"
        )));
    }
    Ok(escape(s))
}

/// `?k=v&...` with keys sorted and empty values dropped; "" when there is nothing.
fn query(mut pairs: Vec<(&str, String)>) -> String {
    pairs.retain(|(_, v)| !v.is_empty());
    pairs.sort_by(|a, b| a.0.cmp(b.0));
    if pairs.is_empty() {
        return String::new();
    }
    let parts: Vec<String> = pairs
        .iter()
        .map(|(k, v)| format!("{}={}", escape(k), escape(v)))
        .collect();
    format!("?{}", parts.join("&"))
}

fn pods_path(namespace: Option<&str>) -> Result<String> {
    match namespace {
        None | Some("") => Ok("/api/v1/pods".to_string()),
        Some(ns) => Ok(format!(
            "/api/v1/namespaces/{}/pods",
            segment("namespace", ns)?
        )),
    }
}

fn pod_path(ns: &str, name: &str) -> Result<String> {
    Ok(format!(
        "/api/v1/namespaces/{}/pods/{}",
        segment("namespace", ns)?,
        segment("pod name", name)?
    ))
}

fn opt<T: ToString>(s: &Option<T>) -> String {
    s.as_ref().map(T::to_string).unwrap_or_default()
}

/// `v` when `on`, else empty (dropped from the query).
fn when(on: bool, v: &str) -> String {
    if on { v } else { "" }.to_string()
}

fn get(path: String) -> Request {
    Request {
        method: Method::Get,
        path,
        body: None,
        content_type: None,
    }
}

pub fn get_pod(ns: &str, name: &str) -> Result<Request> {
    Ok(get(pod_path(ns, name)?))
}

/// `GET /apis/apps/v1/namespaces/{ns}/daemonsets/{name}`.
pub fn get_daemonset(ns: &str, name: &str) -> Result<Request> {
    Ok(get(format!(
        "/apis/apps/v1/namespaces/{}/daemonsets/{}",
        segment("namespace", ns)?,
        segment("daemonset name", name)?
    )))
}

/// `GET /api/v1/nodes/{name}`.
pub fn get_node(name: &str) -> Result<Request> {
    Ok(get(format!(
        "/api/v1/nodes/{}",
        segment("node name", name)?
    )))
}

pub fn list_pods(p: &ListParams) -> Result<Request> {
    let q = query(vec![
        ("labelSelector", opt(&p.label_selector)),
        ("fieldSelector", opt(&p.field_selector)),
        ("limit", opt(&p.limit)),
        ("continue", opt(&p.continue_token)),
        ("resourceVersion", opt(&p.resource_version)),
    ]);
    Ok(get(format!("{}{q}", pods_path(p.namespace.as_deref())?)))
}

pub fn watch_pods(p: &WatchParams) -> Result<Request> {
    let q = query(vec![
        ("watch", "true".to_string()),
        ("labelSelector", opt(&p.label_selector)),
        ("fieldSelector", opt(&p.field_selector)),
        ("resourceVersion", opt(&p.resource_version)),
        ("allowWatchBookmarks", when(p.allow_bookmarks, "true")),
        ("timeoutSeconds", opt(&p.timeout_seconds)),
    ]);
    Ok(get(format!("{}{q}", pods_path(p.namespace.as_deref())?)))
}

/// RFC 7386 merge patch of `pods/{name}/status` (the subresource also accepts metadata label changes).
pub fn patch_pod_status(ns: &str, name: &str, merge_patch: &Value) -> Result<Request> {
    if !matches!(merge_patch, Value::Object(_)) {
        return Err(Error::config(format!(
            "patch pod {ns}/{name} status: a merge patch must be a JSON object"
        )));
    }
    Ok(Request {
        method: Method::Patch,
        path: format!("{}/status", pod_path(ns, name)?),
        body: Some(json::to_compact(merge_patch)),
        content_type: Some("application/merge-patch+json"),
    })
}

/// DELETE with a DeleteOptions body carrying the optional uid / resourceVersion preconditions.
pub fn delete_pod(
    ns: &str,
    name: &str,
    uid: Option<&str>,
    resource_version: Option<&str>,
) -> Result<Request> {
    let mut opts = json::Object::new();
    opts.insert("kind".into(), json::string("DeleteOptions"));
    opts.insert("apiVersion".into(), json::string("v1"));
    let mut pre = json::Object::new();
    if let Some(u) = uid {
        pre.insert("uid".into(), json::string(u));
    }
    if let Some(rv) = resource_version {
        pre.insert("resourceVersion".into(), json::string(rv));
    }
    if !pre.is_empty() {
        opts.insert("preconditions".into(), Value::Object(pre));
    }
    Ok(Request {
        method: Method::Delete,
        path: pod_path(ns, name)?,
        body: Some(json::to_compact(&Value::Object(opts))),
        content_type: Some("application/json"),
    })
}

pub fn create_event(ns: &str, event: &Value) -> Result<Request> {
    if !matches!(event, Value::Object(_)) {
        return Err(Error::config(format!(
            "create event in namespace {ns}: the event must be a JSON object"
        )));
    }
    Ok(Request {
        method: Method::Post,
        path: format!("/api/v1/namespaces/{}/events", segment("namespace", ns)?),
        body: Some(json::to_compact(event)),
        content_type: Some("application/json"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn get_pod_path_is_escaped() {
        let r = get_pod("testNS", "testPod").unwrap();
        assert_eq!(r.path, "/api/v1/namespaces/testNS/pods/testPod");
        assert_eq!(r.method, Method::Get);
        assert!(r.body.is_none());
        let r = get_pod("a b", "x/y").unwrap();
        assert_eq!(r.path, "/api/v1/namespaces/a%20b/pods/x%2Fy");
        assert!(get_pod("", "x").is_err());
        assert!(get_pod("ns", "..").is_err());
    }

    #[test]
    fn daemonset_and_node_paths() {
        let r = get_daemonset("istio-system", "istio-cni-node").unwrap();
        assert_eq!(
            r.path,
            "/apis/apps/v1/namespaces/istio-system/daemonsets/istio-cni-node"
        );
        assert_eq!(r.method, Method::Get);
        assert!(get_daemonset("", "x").is_err());
        assert_eq!(get_node("node 1").unwrap().path, "/api/v1/nodes/node%201");
        assert!(get_node("..").is_err());
    }

    #[test]
    fn list_query_is_sorted_and_escaped() {
        let p = ListParams {
            label_selector: Some("app in (a,b),!canary".into()),
            field_selector: Some("spec.nodeName=node-1".into()),
            limit: Some(500),
            continue_token: Some("tok+/=".into()),
            ..Default::default()
        };
        assert_eq!(
            list_pods(&p).unwrap().path,
            "/api/v1/pods?continue=tok%2B%2F%3D&fieldSelector=spec.nodeName%3Dnode-1\
             &labelSelector=app%20in%20%28a%2Cb%29%2C%21canary&limit=500"
        );
        let p = ListParams {
            namespace: Some("ns1".into()),
            resource_version: Some("0".into()),
            ..Default::default()
        };
        assert_eq!(
            list_pods(&p).unwrap().path,
            "/api/v1/namespaces/ns1/pods?resourceVersion=0"
        );
        assert_eq!(
            list_pods(&ListParams::default()).unwrap().path,
            "/api/v1/pods"
        );
    }

    #[test]
    fn watch_query() {
        let p = WatchParams {
            field_selector: Some("spec.nodeName=n1".into()),
            resource_version: Some("42".into()),
            allow_bookmarks: true,
            timeout_seconds: Some(300),
            ..Default::default()
        };
        assert_eq!(
            watch_pods(&p).unwrap().path,
            "/api/v1/pods?allowWatchBookmarks=true&fieldSelector=spec.nodeName%3Dn1\
             &resourceVersion=42&timeoutSeconds=300&watch=true"
        );
    }

    #[test]
    fn patch_delete_event_bodies() {
        let patch = json::parse(r#"{"metadata":{"labels":{"a":"b"}}}"#, "t").unwrap();
        let r = patch_pod_status("ns", "p", &patch).unwrap();
        assert_eq!(r.method, Method::Patch);
        assert_eq!(r.path, "/api/v1/namespaces/ns/pods/p/status");
        assert_eq!(r.content_type, Some("application/merge-patch+json"));
        assert_eq!(
            r.body.as_deref(),
            Some(r#"{"metadata":{"labels":{"a":"b"}}}"#)
        );
        assert!(patch_pod_status("ns", "p", &Value::Null).is_err());

        let r = delete_pod("ns", "p", Some("u-1"), Some("7")).unwrap();
        assert_eq!(r.method, Method::Delete);
        assert_eq!(
            r.body.as_deref(),
            Some(
                r#"{"apiVersion":"v1","kind":"DeleteOptions","preconditions":{"resourceVersion":"7","uid":"u-1"}}"#
            )
        );
        let r = delete_pod("ns", "p", None, None).unwrap();
        assert_eq!(
            r.body.as_deref(),
            Some(r#"{"apiVersion":"v1","kind":"DeleteOptions"}"#)
        );

        let ev = json::parse(r#"{"reason":"x"}"#, "t").unwrap();
        let r = create_event("ns", &ev).unwrap();
        assert_eq!(r.method, Method::Post);
        assert_eq!(r.path, "/api/v1/namespaces/ns/events");
    }
}
