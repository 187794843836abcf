//! The contract: watches (from a LIST, selector transitions, bookmarks and the timeout, a compacted
//! resourceVersion).

use istio_cni::json;
use istio_cni::kube::{ApiErrorExt, EventKind, ListParams, PodSource, WatchParams};

use super::target::{meta_str, Target};
use super::{names, next_change, node_watch, on_node, rv, set};
use crate::support::kube::name_of;

#[test]
fn a_watch_from_a_list_sees_the_changes_of_its_node_in_order() {
    let t = Target::new();
    let (a, b) = (format!("{}-a", t.node), format!("{}-b", t.node));
    t.create_pod("w1", &a, &[("app", "w")]);
    let list = t.client.list_pods(&on_node(&a)).unwrap();
    let mut w = t
        .client
        .watch_pods(&node_watch(&t, &a, Some(list.resource_version.clone()), 30))
        .unwrap();
    let w2 = t.create_pod("w2", &a, &[("app", "w")]);
    t.create_pod("elsewhere", &b, &[("app", "w")]);
    let patch = json::parse(r#"{"metadata":{"labels":{"seen":"yes"}}}"#, "p").unwrap();
    t.client.patch_pod_status(&t.ns, "w1", &patch).unwrap();
    let ev = next_change(&mut w);
    assert_eq!(
        (ev.kind, name_of(&ev.object)),
        (EventKind::Added, "w2".into())
    );
    assert_eq!(rv(&ev.object), rv(&w2));
    let ev = next_change(&mut w);
    assert_eq!(
        (ev.kind, name_of(&ev.object)),
        (EventKind::Modified, "w1".into())
    );
    let labels = json::obj_of(json::obj_of(&ev.object, "metadata").unwrap(), "labels").unwrap();
    assert_eq!(json::str_of(labels, "seen"), Some("yes"));
    assert_eq!(w.resource_version(), Some(rv(&ev.object).as_str()));
}

#[test]
fn a_paged_list_is_one_snapshot_and_its_watch_delivers_what_came_between_pages() {
    // The agents list in pages, then watch from the list's resourceVersion: a pod changed or created
    // between two pages must reach them, by the later pages or by the watch. A real API server serves
    // every page as of the first one's resourceVersion, so it is the watch.
    let t = Target::new();
    let a = format!("{}-a", t.node);
    for n in ["s1", "s2", "s3"] {
        t.create_pod(n, &a, &[("app", "s")]);
    }
    let mut p = ListParams {
        namespace: Some(t.ns.clone()),
        limit: Some(1),
        ..on_node(&a)
    };
    let first = t.client.list_pods(&p).unwrap();
    assert_eq!(names(&first.items), set(&["s1"]));
    // Between the pages: s3 relabeled, s4 created (both sort after the first page).
    let patch = json::parse(r#"{"metadata":{"labels":{"app":"later"}}}"#, "p").unwrap();
    t.client.patch_pod_status(&t.ns, "s3", &patch).unwrap();
    t.create_pod("s4", &a, &[("app", "s")]);
    p.limit = Some(10);
    p.continue_token = Some(first.continue_token.clone().expect("a continue token"));
    let rest = t.client.list_pods(&p).unwrap();
    assert_eq!(names(&rest.items), set(&["s2", "s3"]));
    assert_eq!(rest.resource_version, first.resource_version);
    let s3 = (rest.items.iter()).find(|o| name_of(o) == "s3").unwrap();
    let labels = json::obj_of(json::obj_of(s3, "metadata").unwrap(), "labels").unwrap();
    assert_eq!(
        json::str_of(labels, "app"),
        Some("s"),
        "s3 as of the first page"
    );
    let mut w = t
        .client
        .watch_pods(&node_watch(
            &t,
            &a,
            Some(first.resource_version.clone()),
            30,
        ))
        .unwrap();
    let ev = next_change(&mut w);
    assert_eq!(
        (ev.kind, name_of(&ev.object)),
        (EventKind::Modified, "s3".into())
    );
    let ev = next_change(&mut w);
    assert_eq!(
        (ev.kind, name_of(&ev.object)),
        (EventKind::Added, "s4".into())
    );
}

#[test]
fn a_label_selected_watch_sees_a_pod_leave_and_come_back() {
    let t = Target::new();
    let a = format!("{}-a", t.node);
    t.create_pod("l1", &a, &[("tier", "a")]);
    let p = |tier: &str| {
        let patch = json::parse(
            &format!(r#"{{"metadata":{{"labels":{{"tier":"{tier}"}}}}}}"#),
            "p",
        )
        .unwrap();
        t.client.patch_pod_status(&t.ns, "l1", &patch).unwrap();
    };
    let list = t
        .client
        .list_pods(&ListParams {
            namespace: Some(t.ns.clone()),
            label_selector: Some("tier=a".into()),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(names(&list.items), set(&["l1"]));
    let mut w = t
        .client
        .watch_pods(&WatchParams {
            namespace: Some(t.ns.clone()),
            label_selector: Some("tier=a".into()),
            resource_version: Some(list.resource_version),
            allow_bookmarks: true,
            timeout_seconds: Some(30),
            ..Default::default()
        })
        .unwrap();
    p("b");
    let ev = next_change(&mut w);
    assert_eq!(
        (ev.kind, name_of(&ev.object)),
        (EventKind::Deleted, "l1".into())
    );
    p("a");
    let ev = next_change(&mut w);
    assert_eq!(
        (ev.kind, name_of(&ev.object)),
        (EventKind::Added, "l1".into())
    );
}

#[test]
fn bookmarks_carry_the_progress_a_filtered_watch_does_not_see_and_the_timeout_ends_it() {
    let t = Target::new();
    let (a, b) = (format!("{}-a", t.node), format!("{}-b", t.node));
    t.create_pod("quiet", &a, &[]);
    let list = t.client.list_pods(&on_node(&a)).unwrap();
    // Cluster-wide, as the agent watches; 8 s: a real server sends its bookmark 2 s before the end.
    let mut params = node_watch(&t, &a, Some(list.resource_version), 8);
    params.namespace = None;
    let w = t.client.watch_pods(&params).unwrap();
    let other = t.create_pod("busy", &b, &[]);
    let other_rv: u64 = rv(&other).parse().unwrap();
    let mut bookmarks = 0;
    let mut last = 0u64;
    for ev in w {
        let ev = ev.expect("a watch ends without an error at its timeout");
        assert_eq!(ev.kind, EventKind::Bookmark, "{:?}", name_of(&ev.object));
        assert_eq!(json::str_of(&ev.object, "kind"), Some("Pod"));
        assert!(meta_str(&ev.object, "name").is_none());
        last = ev.resource_version().unwrap().parse().unwrap();
        bookmarks += 1;
    }
    assert!(bookmarks > 0, "no BOOKMARK before the timeout");
    assert!(
        last >= other_rv,
        "the last bookmark ({last}) is before a change it did not see ({other_rv})"
    );
}

#[test]
fn compacted_resource_version_watch_is_gone_list_is_served() {
    let t = Target::new();
    let a = format!("{}-a", t.node);
    t.create_pod("c1", &a, &[]);
    let old = t.expired_rv();
    t.create_pod("c2", &a, &[]);
    // A watch from it: 410 (as the HTTP status or an ERROR event on a 200 stream).
    let gone = match t
        .client
        .watch_pods(&node_watch(&t, &a, Some(old.clone()), 30))
    {
        Err(e) => e,
        Ok(mut w) => w
            .next()
            .expect("the watch ended without an error")
            .unwrap_err(),
    };
    assert!(gone.is_gone(), "{gone}");
    assert_eq!(gone.api_reason(), Some("Expired"), "{gone}");
    assert!(
        gone.to_string().contains("too old resource version"),
        "{gone}"
    );
    // A LIST from it is served (resourceVersion is "not older than", and no limit: from the watch cache).
    let l = t
        .client
        .list_pods(&ListParams {
            namespace: Some(t.ns.clone()),
            resource_version: Some(old),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(names(&l.items), set(&["c1", "c2"]));
}
