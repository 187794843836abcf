use super::*;

fn pod(name: &str, uid: &str, rv: &str) -> Reduced {
    Reduced {
        namespace: "ns".into(),
        name: name.into(),
        uid: uid.into(),
        kubelet_uid: String::new(),
        resource_version: rv.into(),
        terminal: false,
        body: Some(format!(
            r#"{{"metadata":{{"name":"{name}","uid":"{uid}"}}}}"#
        )),
    }
}

fn ask(s: &Store, name: &str, uid: &str, may_wait: bool) -> Lookup {
    s.lookup(
        &Request {
            namespace: "ns".into(),
            name: name.into(),
            uid: uid.into(),
        },
        may_wait,
    )
}

fn hit_of(l: &Lookup) -> String {
    match l {
        Lookup::Hit(b) => String::from_utf8_lossy(b).into_owned(),
        other => panic!("{other:?}"),
    }
}

#[test]
fn nothing_is_served_before_the_first_list_completes() {
    let mut s = Store::default();
    s.watch_open();
    s.apply(pod("a", "u1", "1"));
    assert_eq!(ask(&s, "a", "u1", true), Lookup::Answer(Answer::NotSynced));
    s.list_done();
    assert!(hit_of(&ask(&s, "a", "u1", true)).contains(r#""uid":"u1""#));
}

#[test]
fn uid_rules_and_waiting_for_unseen_pods() {
    let mut s = Store::default();
    s.apply(pod("a", "u1", "1"));
    s.list_done();
    s.watch_open();
    // Matching UID: hit.
    hit_of(&ask(&s, "a", "u1", true));
    // Another UID (recreated under the same name) or an unseen pod: wait while live, then say so.
    assert_eq!(ask(&s, "a", "u2", true), Lookup::Wait);
    assert_eq!(
        ask(&s, "a", "u2", false),
        Lookup::Answer(Answer::UidMismatch)
    );
    assert_eq!(ask(&s, "b", "u3", true), Lookup::Wait);
    assert_eq!(ask(&s, "b", "u3", false), Lookup::Answer(Answer::Unknown));
    // The new pod's event arrives: the new pod is served.
    s.apply(pod("a", "u2", "2"));
    assert!(hit_of(&ask(&s, "a", "u2", true)).contains("u2"));
    assert_eq!(
        ask(&s, "a", "u1", false),
        Lookup::Answer(Answer::UidMismatch)
    );
}

/// Name and namespace alone (an older plugin's request when the runtime gave no UID) are never answered
/// from the cache, whatever it holds under that name and whatever the watch's state: the pod held may be
/// the previous one of that name (force-deleted, so never seen with a `deletionTimestamp`, and recreated
/// by its StatefulSet while the watch lags), whose redirect configuration is not the new pod's. `unknown`
/// at once, never `wait`: no event makes it an answer.
#[test]
fn a_lookup_by_name_alone_is_never_answered_from_the_cache() {
    let mut s = Store::default();
    assert_eq!(ask(&s, "a", "", true), Lookup::Answer(Answer::Unknown));
    s.apply(pod("a", "u1", "1"));
    s.list_done();
    s.watch_open();
    hit_of(&ask(&s, "a", "u1", true));
    for (name, may_wait) in [("a", true), ("a", false), ("b", true)] {
        assert_eq!(
            ask(&s, name, "", may_wait),
            Lookup::Answer(Answer::Unknown),
            "{name}"
        );
    }
    s.watch_closed();
    assert_eq!(ask(&s, "a", "", true), Lookup::Answer(Answer::Unknown));
}

#[test]
fn through_an_outage_only_uid_matches_are_served_and_nothing_waits() {
    let mut s = Store::default();
    s.apply(pod("a", "u1", "1"));
    s.list_done();
    s.watch_open();
    s.watch_closed();
    hit_of(&ask(&s, "a", "u1", true));
    assert_eq!(
        ask(&s, "a", "u9", true),
        Lookup::Answer(Answer::UidMismatch)
    );
    assert_eq!(ask(&s, "b", "u3", true), Lookup::Answer(Answer::Unknown));
}

#[test]
fn deletes_relists_terminal_and_large_pods() {
    let mut s = Store::default();
    for n in ["a", "b", "c"] {
        s.apply(pod(n, &format!("u-{n}"), "1"));
    }
    s.list_done();
    s.watch_open();
    assert_eq!(s.len(), 3);
    // A DELETED of an older UID leaves the current pod alone.
    s.delete("ns/a", "u-old");
    assert_eq!(s.len(), 3);
    s.delete("ns/a", "u-a");
    assert_eq!(ask(&s, "a", "u-a", false), Lookup::Answer(Answer::Unknown));
    // A relist that does not list c (the watch tells it gone) keeps the rest.
    s.delete("ns/c", "u-c");
    s.apply(pod("b", "u-b", "1"));
    s.list_done();
    assert_eq!(s.len(), 1);
    // A finished pod is dropped; a too large one is known but not served.
    let mut t = pod("b", "u-b", "2");
    t.terminal = true;
    s.apply(t);
    assert!(s.is_empty());
    let mut big = pod("d", "u-d", "1");
    big.body = None;
    s.apply(big);
    assert_eq!(ask(&s, "d", "u-d", true), Lookup::Answer(Answer::TooLarge));
    // An unchanged pod (same UID and resourceVersion) keeps its rendered line.
    s.apply(pod("e", "u-e", "1"));
    let first = match ask(&s, "e", "u-e", false) {
        Lookup::Hit(b) => b,
        other => panic!("{other:?}"),
    };
    s.apply(pod("e", "u-e", "1"));
    match ask(&s, "e", "u-e", false) {
        Lookup::Hit(b) => assert!(Arc::ptr_eq(&first, &b)),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_static_pod_is_found_by_the_kubelet_uid_the_runtime_sends() {
    // The mirror's own UID is the API server's; the runtime sends the kubelet's, kept in the mirror
    // annotation. Before, such a sandbox always answered uid_mismatch and went to the API server.
    let mirror = crate::json::parse_object(
        r#"{"metadata":{"namespace":"ns","name":"etcd-n1","uid":"api-uid","resourceVersion":"3",
            "annotations":{"kubernetes.io/config.mirror":"kubelet-uid"}},
           "spec":{"containers":[{"name":"etcd"}]}}"#,
        "mirror",
    )
    .unwrap();
    let mut s = Store::default();
    s.apply(crate::redirect::reduce::reduce(&mirror));
    s.list_done();
    s.watch_open();
    for uid in ["kubelet-uid", "api-uid"] {
        let line = hit_of(&ask(&s, "etcd-n1", uid, false));
        let Ok(super::super::proto::Reply::Hit(pod)) =
            super::super::proto::decode_reply(line.trim_end().as_bytes())
        else {
            panic!("{uid}: {line}");
        };
        let req = Request {
            namespace: "ns".into(),
            name: "etcd-n1".into(),
            uid: uid.into(),
        };
        assert!(
            super::super::client::is_the_pod_asked_for(&pod, &req),
            "{uid}: {line}"
        );
    }
    // Any other UID is still another pod of that name.
    assert_eq!(
        ask(&s, "etcd-n1", "other", false),
        Lookup::Answer(Answer::UidMismatch)
    );
    // A DELETED names the API server's UID.
    s.delete("ns/etcd-n1", "api-uid");
    assert_eq!(s.len(), 0);
}
