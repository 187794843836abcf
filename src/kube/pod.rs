//! What the agents and the pod cache read from a pod object besides the decision's keys, parsed once
//! ([`PodView::of`]), each fact by one rule: its identity, its IP, and the three states that keep it from
//! being verified or repaired (host network, terminal, being deleted). A missing or mistyped field reads
//! as absent. Pure.

use crate::json::{self, Object, Value};

/// A pod object's facts, borrowed from it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PodView<'a> {
    pub namespace: &'a str,
    pub name: &'a str,
    /// "" when missing.
    pub uid: &'a str,
    pub resource_version: &'a str,
    /// `status.podIP` ("" until it has one).
    pub pod_ip: &'a str,
    /// `spec.hostNetwork` is `true`.
    pub host_network: bool,
    /// `status.phase` is `Succeeded` or `Failed`: no sandbox is ever set up for it again.
    pub terminal: bool,
    /// `metadata.deletionTimestamp` is set (anything but absent or null): the pod is being deleted.
    pub deleting: bool,
}

impl<'a> PodView<'a> {
    pub fn of(pod: &'a Object) -> PodView<'a> {
        let meta = json::obj_of(pod, "metadata");
        let status = json::obj_of(pod, "status");
        let text = |o: Option<&'a Object>, k| o.and_then(|o| json::str_of(o, k)).unwrap_or("");
        PodView {
            namespace: text(meta, "namespace"),
            name: text(meta, "name"),
            uid: text(meta, "uid"),
            resource_version: text(meta, "resourceVersion"),
            pod_ip: text(status, "podIP"),
            host_network: json::obj_of(pod, "spec")
                .is_some_and(|s| matches!(s.get("hostNetwork"), Some(Value::Bool(true)))),
            terminal: matches!(text(status, "phase"), "Succeeded" | "Failed"),
            deleting: meta
                .is_some_and(|m| !matches!(m.get("deletionTimestamp"), None | Some(Value::Null))),
        }
    }

    /// `namespace/name`: a pod's key in every sink, store and queue.
    pub fn key(&self) -> String {
        key(self.namespace, self.name)
    }
}

/// A pod's key: `namespace/name`.
pub fn key(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view_of(text: &str) -> PodView<'static> {
        let pod = json::parse_object(text, "pod").unwrap();
        PodView::of(Box::leak(Box::new(pod)))
    }

    #[test]
    fn each_fact_by_one_rule_and_a_mistyped_field_is_absent() {
        let v = view_of(
            r#"{"metadata":{"namespace":"ns","name":"p","uid":"u-1","resourceVersion":"7",
                "deletionTimestamp":"2024-01-01T00:00:00Z"},
               "spec":{"hostNetwork":true},"status":{"phase":"Failed","podIP":"10.1.2.3"}}"#,
        );
        assert_eq!(
            (v.key(), v.uid, v.resource_version, v.pod_ip),
            ("ns/p".to_string(), "u-1", "7", "10.1.2.3")
        );
        assert!(v.host_network && v.terminal && v.deleting);
        let v = view_of(
            r#"{"metadata":{"namespace":"ns","name":5,"deletionTimestamp":null},
               "spec":{"hostNetwork":"true"},"status":{"phase":"Running","podIP":7}}"#,
        );
        assert_eq!((v.key(), v.uid, v.pod_ip), ("ns/".to_string(), "", ""));
        assert!(!v.host_network && !v.terminal && !v.deleting, "{v:?}");
        assert_eq!(view_of("{}"), PodView::default());
        // Any deletionTimestamp but null is a pod being deleted: never repaired, never audited.
        assert!(view_of(r#"{"metadata":{"deletionTimestamp":""}}"#).deleting);
        assert!(view_of(r#"{"metadata":{"deletionTimestamp":{}}}"#).deleting);
    }
}
