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

/// On a static pod's mirror: the kubelet's own UID for the pod, the one a runtime passes as `K8S_POD_UID`
/// (the API server gives the mirror a UID of its own).
pub const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// The UID the kubelet knows `pod` by (pure), the one its cgroup is named after: a static pod's mirror
/// carries it in [`MIRROR_ANNOTATION`] (its `metadata.uid` is the API server's own), any other pod in
/// `metadata.uid`.
pub fn kubelet_uid(pod: &Object) -> &str {
    let meta = json::obj_of(pod, "metadata");
    let mirror = meta
        .and_then(|m| json::obj_of(m, "annotations"))
        .and_then(|a| json::str_of(a, MIRROR_ANNOTATION))
        .filter(|u| !u.is_empty());
    mirror.unwrap_or_else(|| PodView::of(pod).uid)
}

/// What is wrong with `pod` as the answer to a GET of pod `ns/name` for a sandbox of UID `uid` (a runtime's
/// `K8S_POD_UID`, "" when it gave none): `None` when it is that pod. A `kind` other than `Pod`, another
/// namespace or name (a misrouted request, a proxy's or a faulty server's page: `{}` reads as a pod without
/// containers), or another UID (the pod of that name was replaced, or the server does not show the new one
/// yet) is never used as the pod: every field of a pod object is optional, so any of them would read as
/// "no sidecar". A static pod's mirror matches by [`MIRROR_ANNOTATION`].
pub fn not_the_pod(pod: &Object, ns: &str, name: &str, uid: &str) -> Option<String> {
    let v = PodView::of(pod);
    let kind = json::str_of(pod, "kind");
    if kind.is_some_and(|k| k != "Pod") || v.namespace != ns || v.name != name {
        return Some(format!(
            "the API server answered with {} {:?}, not pod {ns}/{name}",
            kind.unwrap_or("an object without a kind"),
            v.key()
        ));
    }
    if !uid.is_empty() && v.uid != uid && kubelet_uid(pod) != uid {
        return Some(format!(
            "the API server has pod {ns}/{name} with UID {:?}, the runtime is starting UID {uid:?} (the pod \
             was replaced, or the server does not show the new one yet)",
            v.uid
        ));
    }
    None
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

    /// Only the pod asked for is the pod: its kind (when named), namespace and name, and the runtime's UID
    /// when it gave one (a static pod's mirror by the kubelet's UID in its annotation).
    #[test]
    fn an_answer_is_the_pod_only_by_kind_name_and_uid() {
        let pod = |s: &str| json::parse_object(s, "pod").unwrap();
        let web =
            pod(r#"{"kind":"Pod","metadata":{"namespace":"shop","name":"web-0","uid":"u1"}}"#);
        let no_kind = pod(r#"{"metadata":{"namespace":"shop","name":"web-0","uid":"u1"}}"#);
        let mirror = pod(
            r#"{"metadata":{"namespace":"shop","name":"web-0","uid":"api-uid",
                "annotations":{"kubernetes.io/config.mirror":"kubelet-uid"}}}"#,
        );
        for (p, uid) in [
            (&web, "u1"),
            (&web, ""),
            (&no_kind, "u1"),
            (&mirror, "kubelet-uid"),
        ] {
            assert_eq!(not_the_pod(p, "shop", "web-0", uid), None, "{uid}");
        }
        let wrong = [
            (pod("{}"), "u1", "an object without a kind \"/\""),
            (pod("{}"), "", "not pod shop/web-0"),
            (
                pod(r#"{"kind":"Status","metadata":{},"code":503}"#),
                "",
                "answered with Status",
            ),
            (
                pod(r#"{"kind":"Pod","metadata":{"namespace":"bank","name":"web-0","uid":"u1"}}"#),
                "u1",
                "\"bank/web-0\"",
            ),
            (
                pod(r#"{"kind":"Pod","metadata":{"namespace":"shop","name":"web-1","uid":"u1"}}"#),
                "u1",
                "\"shop/web-1\"",
            ),
            (
                web.clone(),
                "u2",
                "with UID \"u1\", the runtime is starting UID \"u2\"",
            ),
            (mirror.clone(), "api-uid-2", "with UID \"api-uid\""),
        ];
        for (p, uid, says) in wrong {
            let why = not_the_pod(&p, "shop", "web-0", uid).expect(says);
            assert!(why.contains(says), "{why}");
        }
    }
}
