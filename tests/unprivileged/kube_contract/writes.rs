//! The contract: writes (merge patch of pods/status, DELETE with preconditions, Events) and who may ask
//! (401, 403); a DaemonSet being deleted.

use istio_cni::json::{self, Value};
use istio_cni::kube::request::{self as req, Method};
use istio_cni::kube::{ApiErrorExt, EventKind, PodSource};
use istio_cni::repair::detect::PodFacts;
use istio_cni::repair::request::event_json;

use super::target::{meta_str, Target};
use super::{next_change, node_watch, on_node, rv, status_of};
use crate::support::kube::name_of;

#[test]
fn patch_of_pod_status_merges_labels_and_honours_a_resource_version() {
    let t = Target::new();
    let pod = t.create_pod("pt", &format!("{}-a", t.node), &[("app", "pt")]);
    let patch = json::parse(
        r#"{"metadata":{"labels":{"cni.istio.io/uninitialized":"true"}}}"#,
        "p",
    )
    .unwrap();
    let got = t.client.patch_pod_status(&t.ns, "pt", &patch).unwrap();
    let labels = json::obj_of(json::obj_of(&got, "metadata").unwrap(), "labels").unwrap();
    assert_eq!(
        json::str_of(labels, "cni.istio.io/uninitialized"),
        Some("true")
    );
    assert_eq!(
        json::str_of(labels, "app"),
        Some("pt"),
        "merge patch keeps the other labels"
    );
    assert_ne!(rv(&got), rv(&pod));
    assert_eq!(meta_str(&got, "uid"), meta_str(&pod, "uid"));
    // Only the merge-patch content type is what we send; plain JSON is refused.
    let path = format!("/api/v1/namespaces/{}/pods/pt/status", t.ns);
    let r = t.raw(
        Method::Patch,
        &path,
        Some(r#"{"metadata":{"labels":{"x":"y"}}}"#),
        "application/json",
    );
    assert_eq!(r.code, 415);
    assert_eq!(
        json::str_of(&status_of(&r.body), "reason"),
        Some("UnsupportedMediaType")
    );
    let stale = json::parse(
        &format!(
            r#"{{"metadata":{{"resourceVersion":"{}","labels":{{"x":"z"}}}}}}"#,
            rv(&pod)
        ),
        "p",
    )
    .unwrap();
    let e = t.client.patch_pod_status(&t.ns, "pt", &stale).unwrap_err();
    assert!(e.is_conflict() && e.api_reason() == Some("Conflict"), "{e}");
    assert!(
        e.to_string().contains("the object has been modified"),
        "{e}"
    );
    let e = t
        .client
        .patch_pod_status(&t.ns, "missing", &patch)
        .unwrap_err();
    assert!(e.is_not_found(), "{e}");
}

#[test]
fn delete_checks_uid_and_resource_version_and_a_bound_pod_terminates_gracefully() {
    let t = Target::new();
    let a = format!("{}-a", t.node);
    let pod = t.create_pod("d1", &a, &[]);
    let uid = meta_str(&pod, "uid").unwrap().to_string();
    let e = t
        .client
        .delete_pod(&t.ns, "d1", Some("not-the-uid"), None)
        .unwrap_err();
    assert!(e.is_conflict() && e.api_reason() == Some("Conflict"), "{e}");
    assert!(
        e.to_string()
            .contains("the UID in the precondition (not-the-uid) does not match the UID in record"),
        "{e}"
    );
    let bad = format!("{}0", rv(&pod));
    let e = t
        .client
        .delete_pod(&t.ns, "d1", Some(&uid), Some(&bad))
        .unwrap_err();
    assert!(e.is_conflict(), "{e}");
    let want = format!("the ResourceVersion in the precondition ({bad}) does not match");
    assert!(e.to_string().contains(&want), "{e}");
    let mut w = t
        .client
        .watch_pods(&node_watch(&t, &a, Some(rv(&pod)), 30))
        .unwrap();
    // What our client sends, with the matching preconditions: the bound pod is marked, not removed.
    let r = t.raw_send(&req::delete_pod(&t.ns, "d1", Some(&uid), Some(&rv(&pod))).unwrap());
    assert_eq!(r.code, 200, "{}", String::from_utf8_lossy(&r.body));
    let body = status_of(&r.body);
    assert!(meta_str(&body, "deletionTimestamp").is_some(), "{body:?}");
    let grace = json::obj_of(&body, "metadata").and_then(|m| m.get("deletionGracePeriodSeconds"));
    assert!(
        matches!(grace, Some(Value::Number(n)) if n.to_string() == "30"),
        "{grace:?}"
    );
    let ev = next_change(&mut w);
    assert_eq!(
        (ev.kind, name_of(&ev.object)),
        (EventKind::Modified, "d1".into())
    );
    assert!(meta_str(&ev.object, "deletionTimestamp").is_some());
    // An unbound pod goes at once.
    let u = t.create_pod("d2", "", &[]);
    let uid2 = meta_str(&u, "uid").unwrap().to_string();
    t.client.delete_pod(&t.ns, "d2", Some(&uid2), None).unwrap();
    assert!(t.client.get_pod(&t.ns, "d2").unwrap_err().is_not_found());
    assert!(t
        .client
        .delete_pod(&t.ns, "d2", None, None)
        .unwrap_err()
        .is_not_found());
}

#[test]
fn the_events_we_write_are_stored_with_every_field_we_send() {
    let t = Target::new();
    let pod = t.create_pod("ev", &format!("{}-a", t.node), &[]);
    let f = PodFacts {
        namespace: t.ns.clone(),
        name: "ev".into(),
        uid: meta_str(&pod, "uid").unwrap().into(),
        resource_version: rv(&pod),
        ..PodFacts::default()
    };
    let nanos = 1_795_320_000_123_456_789u128;
    let body = event_json(
        &f,
        "DeleteBrokenPod",
        "pod detected as broken, deleted",
        nanos,
        "node-x",
    );
    let ev = json::parse(&body, "event").unwrap();
    t.client.create_event(&t.ns, &ev).unwrap();
    let got = t.events_about("ev");
    assert_eq!(got.len(), 1, "{got:?}");
    let e = &got[0];
    let sent = json::parse_object(&body, "event").unwrap();
    // Every field we send is kept as sent (a misnamed one would be dropped by a real server).
    for k in [
        "type",
        "reason",
        "message",
        "firstTimestamp",
        "lastTimestamp",
        "reportingComponent",
        "reportingInstance",
    ] {
        assert_eq!(json::str_of(e, k), json::str_of(&sent, k), "{k}");
    }
    assert_eq!(e.get("count").map(json::to_compact), Some("1".into()));
    let io = json::obj_of(e, "involvedObject").unwrap();
    for (k, v) in [
        ("kind", "Pod"),
        ("name", "ev"),
        ("namespace", t.ns.as_str()),
        ("uid", f.uid.as_str()),
    ] {
        assert_eq!(json::str_of(io, k), Some(v), "involvedObject.{k}");
    }
    let src = json::obj_of(e, "source").unwrap();
    assert_eq!(json::str_of(src, "component"), Some("cni-repair"));
    assert_eq!(json::str_of(src, "host"), Some("node-x"));
    assert_eq!(meta_str(e, "name"), meta_str(&sent, "name"));
}

#[test]
fn unauthenticated_is_401_and_unauthorized_is_403_with_their_status() {
    let t = Target::new();
    let p = on_node(&t.node);
    let e = t.unauthenticated_client().list_pods(&p).unwrap_err();
    assert_eq!(
        (e.api_status(), e.api_reason()),
        (Some(401), Some("Unauthorized")),
        "{e}"
    );
    assert!(!e.is_transient());
    let e = t.forbidden_client().list_pods(&p).unwrap_err();
    assert_eq!(
        (e.api_status(), e.api_reason()),
        (Some(403), Some("Forbidden")),
        "{e}"
    );
    assert!(!e.is_transient());
}

#[test]
fn a_daemonset_being_deleted_is_read_with_its_deletion_timestamp() {
    let t = Target::new();
    t.deleting_daemonset("contract-ds");
    let ds = t
        .client
        .get_daemonset_within(&t.ns, "contract-ds", istio_cni::kube::client::WATCH_MARGIN)
        .unwrap();
    assert!(meta_str(&ds, "deletionTimestamp").is_some(), "{ds:?}");
    let tmpl = json::obj_of(json::obj_of(&ds, "spec").unwrap(), "template").unwrap();
    let sel = json::obj_of(json::obj_of(tmpl, "spec").unwrap(), "nodeSelector").unwrap();
    assert_eq!(json::str_of(sel, "contract.istio.io/none"), Some("none"));
}
