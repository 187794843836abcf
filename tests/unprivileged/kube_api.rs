//! The Kubernetes client's list, watch and write calls against the HTTPS API double.

use std::time::Duration;

use istio_cni::json;
use istio_cni::kube::{ApiErrorExt, EventKind, ListParams, PodSource, WatchParams};
use kube_double::{Fault, Options, Server};

use crate::support::kube::*;

#[test]
fn list_pagination_and_selectors() {
    let srv = start();
    let dir = TempDir::new("list");
    for i in 0..25 {
        let node = if i % 3 == 0 { "node-b" } else { "node-a" };
        srv.add_pod(&pod_json(
            &format!("ns{}", i % 2),
            &format!("pod-{i:02}"),
            node,
        ))
        .unwrap();
    }
    let c = client(&srv, &dir);
    let mut p = ListParams {
        field_selector: Some("spec.nodeName=node-a".into()),
        limit: Some(4),
        ..Default::default()
    };
    let (mut names, mut pages) = (Vec::new(), 0);
    loop {
        let page = c.list_pods(&p).unwrap();
        pages += 1;
        assert!(page.items.len() <= 4);
        assert!(!page.resource_version.is_empty());
        names.extend(page.items.iter().map(name_of));
        match page.continue_token {
            Some(t) => p.continue_token = Some(t),
            None => break,
        }
    }
    let mut want: Vec<String> = (0..25)
        .filter(|i| i % 3 != 0)
        .map(|i| format!("pod-{i:02}"))
        .collect();
    want.sort();
    names.sort();
    assert_eq!(names, want);
    assert_eq!(pages, 4); // 16 pods, 4 per page; the last full page carries no continue token
    let q = &srv.requests()[0];
    assert_eq!(
        q.param("fieldSelector").as_deref(),
        Some("spec.nodeName=node-a")
    );
    assert!(
        q.query.contains("fieldSelector=spec.nodeName%3Dnode-a"),
        "{}",
        q.query
    );

    let all = c
        .list_pods(&ListParams {
            namespace: Some("ns1".into()),
            label_selector: Some("app in (pod-01,pod-03,pod-04)".into()),
            ..Default::default()
        })
        .unwrap();
    let got: Vec<String> = all.items.iter().map(name_of).collect();
    assert_eq!(got, vec!["pod-01", "pod-03"]);
    assert!(all.continue_token.is_none());
}

#[test]
fn watch_events_bookmarks_and_410_relist() {
    let srv = Server::start(Options {
        bookmark_interval: Duration::from_millis(100),
        ..Options::default()
    })
    .unwrap();
    let dir = TempDir::new("watch");
    srv.add_pod(&pod_json("ns", "a", "n1")).unwrap();
    srv.add_pod(&pod_json("ns", "other-node", "n2")).unwrap();
    let c = client(&srv, &dir);
    let sel = Some("spec.nodeName=n1".to_string());
    let list = c
        .list_pods(&ListParams {
            field_selector: sel.clone(),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(list.items.len(), 1);
    let params = |rv: &str| WatchParams {
        field_selector: sel.clone(),
        resource_version: Some(rv.to_string()),
        allow_bookmarks: true,
        timeout_seconds: Some(30),
        ..Default::default()
    };
    let mut w = c.watch_pods(&params(&list.resource_version)).unwrap();
    srv.add_pod(&pod_json("ns", "b", "n1")).unwrap();
    srv.add_pod(&pod_json("ns", "c", "n2")).unwrap(); // filtered out
    srv.patch_pod("ns", "a", r#"{"metadata":{"labels":{"x":"y"}}}"#)
        .unwrap();
    let mut seen = Vec::new();
    let mut bookmark = false;
    while seen.len() < 2 || !bookmark {
        let ev = w.next().expect("stream ended early").unwrap();
        match ev.kind {
            EventKind::Bookmark => bookmark = true,
            k => seen.push((k, name_of(&ev.object))),
        }
    }
    assert_eq!(
        seen,
        vec![
            (EventKind::Added, "b".into()),
            (EventKind::Modified, "a".into())
        ]
    );
    let last_rv = w.resource_version().unwrap().to_string();
    assert_eq!(last_rv, srv.resource_version().to_string());

    // Forced expiry: the open stream ends with a 410; re-watching from the old RV is refused; relist works.
    srv.force_gone();
    let e = loop {
        match w.next().expect("stream ended without an error") {
            Ok(ev) => assert_eq!(ev.kind, EventKind::Bookmark),
            Err(e) => break e,
        }
    };
    assert!(e.is_gone(), "{e}");
    assert!(w.next().is_none());
    let mut stale = c.watch_pods(&params(&last_rv)).unwrap();
    let e = stale.next().unwrap().unwrap_err();
    assert!(e.is_gone(), "{e}");
    // A LIST from it is served (its resourceVersion means "not older than"; kube-apiserver answers from
    // its watch cache, checked against the real server by kube_contract): the current pods.
    let served = c
        .list_pods(&ListParams {
            resource_version: Some(last_rv.clone()),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(served.items.len(), 4); // a, other-node, b, c
    let relist = c
        .list_pods(&ListParams {
            field_selector: sel.clone(),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(relist.items.len(), 2);
    let mut w = c.watch_pods(&params(&relist.resource_version)).unwrap();
    srv.delete_pod("ns", "b").unwrap();
    let ev = loop {
        let ev = w.next().unwrap().unwrap();
        if ev.kind != EventKind::Bookmark {
            break ev;
        }
    };
    assert_eq!(
        (ev.kind, name_of(&ev.object)),
        (EventKind::Deleted, "b".into())
    );
    let q = srv
        .requests()
        .into_iter()
        .find(|r| r.param("watch").is_some())
        .unwrap();
    assert_eq!(q.param("allowWatchBookmarks").as_deref(), Some("true"));
    assert_eq!(q.param("timeoutSeconds").as_deref(), Some("30"));
}

#[test]
fn watch_without_resource_version_starts_with_the_current_pods_and_ends_on_timeout() {
    let srv = start();
    let dir = TempDir::new("watch0");
    srv.add_pod(&pod_json("ns", "a", "n1")).unwrap();
    let c = client(&srv, &dir);
    let w = c
        .watch_pods(&WatchParams {
            timeout_seconds: Some(1),
            ..Default::default()
        })
        .unwrap();
    let events: Vec<_> = w.map(|e| e.unwrap()).collect();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].kind, EventKind::Added);
    srv.set_fault(Fault::Status(403), Some(1));
    let e = c.watch_pods(&WatchParams::default()).unwrap_err();
    assert_eq!(e.api_status(), Some(403), "{e}");
    // Every watch has a bounded duration: a default timeoutSeconds is sent.
    let r = srv.requests().pop().unwrap();
    assert_eq!(r.param("timeoutSeconds").as_deref(), Some("300"));
}

#[test]
fn patch_status_delete_with_preconditions_and_events() {
    let srv = start();
    let dir = TempDir::new("writes");
    let stored = srv.add_pod(&pod_json("ns", "p", "n1")).unwrap();
    let uid = json::obj_of(&stored, "metadata")
        .and_then(|m| json::str_of(m, "uid"))
        .unwrap()
        .to_string();
    let c = client(&srv, &dir);
    let patch = json::parse(
        r#"{"metadata":{"labels":{"cni.istio.io/uninitialized":"true"}}}"#,
        "patch",
    )
    .unwrap();
    let pod = c.patch_pod_status("ns", "p", &patch).unwrap();
    let labels = json::obj_of(json::obj_of(&pod, "metadata").unwrap(), "labels").unwrap();
    assert_eq!(
        json::str_of(labels, "cni.istio.io/uninitialized"),
        Some("true")
    );
    let r = srv.requests().pop().unwrap();
    assert_eq!(
        (r.method.as_str(), r.path.as_str()),
        ("PATCH", "/api/v1/namespaces/ns/pods/p/status")
    );
    assert_eq!(r.body, json::to_compact(&patch));
    assert!(c
        .patch_pod_status("ns", "missing", &patch)
        .unwrap_err()
        .is_not_found());

    let e = c
        .delete_pod("ns", "p", Some("not-the-uid"), None)
        .unwrap_err();
    assert!(e.is_conflict(), "{e}");
    assert!(
        e.to_string()
            .contains("the UID in the precondition (not-the-uid) does not match"),
        "{e}"
    );
    let e = c.delete_pod("ns", "p", Some(&uid), Some("1")).unwrap_err();
    assert!(e.is_conflict(), "{e}");
    let rv = json::obj_of(&pod, "metadata")
        .and_then(|m| json::str_of(m, "resourceVersion"))
        .unwrap();
    c.delete_pod("ns", "p", Some(&uid), Some(rv)).unwrap();
    let r = srv.requests().pop().unwrap();
    assert_eq!(r.method, "DELETE");
    assert!(r.body.contains(&format!(r#""uid":"{uid}""#)), "{}", r.body);
    assert!(c.get_pod("ns", "p").unwrap_err().is_not_found());
    assert!(c
        .delete_pod("ns", "p", None, None)
        .unwrap_err()
        .is_not_found());

    let ev = json::parse(
        r#"{"apiVersion":"v1","kind":"Event","metadata":{"name":"p.1"},"involvedObject":{"kind":"Pod","name":"p","namespace":"ns"},"reason":"Repaired","type":"Warning","message":"m"}"#,
        "event",
    )
    .unwrap();
    c.create_event("ns", &ev).unwrap();
    let evs = srv.events();
    assert_eq!(evs.len(), 1);
    assert_eq!(json::str_of(&evs[0], "reason"), Some("Repaired"));
}

#[test]
fn a_thousand_pods_list_in_pages_and_watch_from_scratch() {
    let srv = start();
    let dir = TempDir::new("thousand");
    for i in 0..1000 {
        srv.add_pod(&pod_json(
            &format!("ns{}", i % 10),
            &format!("p{i:04}"),
            if i % 2 == 0 { "n1" } else { "n2" },
        ))
        .unwrap();
    }
    let c = client(&srv, &dir);
    let mut p = ListParams {
        field_selector: Some("spec.nodeName=n1".into()),
        limit: Some(120),
        resource_version: Some("0".into()),
        ..Default::default()
    };
    let mut n = 0;
    loop {
        let page = c.list_pods(&p).unwrap();
        n += page.items.len();
        p.resource_version = None;
        match page.continue_token {
            Some(t) => p.continue_token = Some(t),
            None => break,
        }
    }
    assert_eq!(n, 500);
    let w = c
        .watch_pods(&WatchParams {
            field_selector: Some("spec.nodeName=n2".into()),
            timeout_seconds: Some(1),
            ..Default::default()
        })
        .unwrap();
    let added = w
        .map(|e| e.unwrap())
        .filter(|e| e.kind == EventKind::Added)
        .count();
    assert_eq!(added, 500);
}
