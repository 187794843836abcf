//! The contract: reads (a missing object, the fields we read, LIST with selectors and pages).

use istio_cni::json;
use istio_cni::kube::request as req;
use istio_cni::kube::{ApiErrorExt, ListParams, PodSource};
use istio_cni::redirect::pod::PodInfo;

use super::target::{meta_str, Target};
use super::{names, on_node, rv, set, status_of};

#[test]
fn a_missing_object_is_404_with_a_not_found_status() {
    let t = Target::new();
    let e = t.client.get_pod(&t.ns, "missing").unwrap_err();
    assert!(e.is_not_found(), "{e}");
    assert_eq!(e.api_reason(), Some("NotFound"), "{e}");
    let r = t.raw_send(&req::get_pod(&t.ns, "missing").unwrap());
    assert_eq!(r.code, 404);
    let st = status_of(&r.body);
    assert_eq!(json::str_of(&st, "kind"), Some("Status"));
    assert_eq!(json::str_of(&st, "status"), Some("Failure"));
    assert_eq!(json::str_of(&st, "reason"), Some("NotFound"));
    assert_eq!(
        json::str_of(&st, "message"),
        Some(r#"pods "missing" not found"#)
    );
    let total = istio_cni::kube::client::WATCH_MARGIN;
    let e = t
        .client
        .get_daemonset_within(&t.ns, "missing", total)
        .unwrap_err();
    assert!(
        e.is_not_found() && e.api_reason() == Some("NotFound"),
        "{e}"
    );
    let e = t
        .client
        .get_node_within(&format!("{}-missing", t.node), total)
        .unwrap_err();
    assert!(
        e.is_not_found() && e.api_reason() == Some("NotFound"),
        "{e}"
    );
}

#[test]
fn a_stored_pod_carries_the_fields_we_read() {
    let t = Target::new();
    let node = format!("{}-f", t.node);
    let pod = t.create_pod("fields", &node, &[("app", "fields")]);
    assert!(!meta_str(&pod, "uid").unwrap_or("").is_empty());
    assert!(!rv(&pod).is_empty());
    assert_eq!(meta_str(&pod, "namespace"), Some(t.ns.as_str()));
    let got = t.client.get_pod(&t.ns, "fields").unwrap();
    assert_eq!(meta_str(&got, "uid"), meta_str(&pod, "uid"));
    let spec = json::obj_of(&got, "spec").unwrap();
    assert_eq!(json::str_of(spec, "nodeName"), Some(node.as_str()));
    // The kubelet's status fields, written through pods/status as it does, read where we read them.
    let patch = json::parse(
        r#"{"status":{"podIP":"10.9.0.5","podIPs":[{"ip":"10.9.0.5"}]}}"#,
        "p",
    )
    .unwrap();
    let got = t.client.patch_pod_status(&t.ns, "fields", &patch).unwrap();
    let info = PodInfo::from_pod(&got).unwrap();
    assert_eq!(
        info.pod_ips,
        vec!["10.9.0.5".parse::<std::net::IpAddr>().unwrap()]
    );
    assert_eq!(info.containers, vec!["istio-proxy"]);
    assert!(info.proxy.is_some());
    let status = json::obj_of(&got, "status").unwrap();
    assert_eq!(json::str_of(status, "podIP"), Some("10.9.0.5"));
}

#[test]
fn list_selects_by_node_name_and_labels_in_pages() {
    let t = Target::new();
    let (a, b) = (format!("{}-a", t.node), format!("{}-b", t.node));
    t.create_pod("p1", &a, &[("app", "x"), ("tier", "a")]);
    t.create_pod("p2", &a, &[("app", "x"), ("tier", "b")]);
    t.create_pod("p3", &a, &[("app", "y")]);
    t.create_pod("p4", &b, &[("app", "x"), ("tier", "a")]);
    // Across all namespaces, as the node agent lists.
    let on_a = t.client.list_pods(&on_node(&a)).unwrap();
    assert_eq!(names(&on_a.items), set(&["p1", "p2", "p3"]));
    assert!(!on_a.resource_version.is_empty());
    let by_labels = |sel: &str| {
        let l = t
            .client
            .list_pods(&ListParams {
                namespace: Some(t.ns.clone()),
                label_selector: Some(sel.into()),
                ..on_node(&a)
            })
            .unwrap();
        names(&l.items)
    };
    assert_eq!(by_labels("app=x"), set(&["p1", "p2"]));
    assert_eq!(by_labels("app==x,tier!=a"), set(&["p2"]));
    assert_eq!(by_labels("tier in (a,b)"), set(&["p1", "p2"]));
    assert_eq!(by_labels("tier notin (a)"), set(&["p2", "p3"]));
    assert_eq!(by_labels("!tier"), set(&["p3"]));
    assert_eq!(by_labels("tier"), set(&["p1", "p2"]));
    // Pages of 2: a continue token, then the rest without one.
    let mut p = ListParams {
        limit: Some(2),
        ..on_node(&a)
    };
    let first = t.client.list_pods(&p).unwrap();
    assert_eq!(first.items.len(), 2);
    p.continue_token = Some(first.continue_token.clone().expect("a continue token"));
    let second = t.client.list_pods(&p).unwrap();
    assert_eq!(second.items.len(), 1);
    assert!(second.continue_token.is_none());
    let mut all = names(&first.items);
    all.extend(names(&second.items));
    assert_eq!(all, set(&["p1", "p2", "p3"]));
}
