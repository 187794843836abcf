use super::*;

fn pod(name: &str, uid: &str, rv: &str) -> Reduced {
    Reduced {
        namespace: "ns".into(),
        name: name.into(),
        uid: uid.into(),
        kubelet_uid: String::new(),
        resource_version: rv.into(),
        terminal: false,
        deleting: false,
        body: Some(format!(
            r#"{{"metadata":{{"name":"{name}","uid":"{uid}"}}}}"#
        )),
    }
}

fn ask(s: &Store, name: &str, uid: &str, may_wait: bool) -> Lookup {
    ask_at(s, name, uid, may_wait, Instant::now())
}

fn ask_at(s: &Store, name: &str, uid: &str, may_wait: bool, now: Instant) -> Lookup {
    s.lookup(
        &Request {
            namespace: "ns".into(),
            name: name.into(),
            uid: uid.into(),
        },
        may_wait,
        now,
    )
}

fn hit_of(l: &Lookup) -> String {
    match l {
        Lookup::Hit(b) => String::from_utf8_lossy(b).into_owned(),
        other => panic!("{other:?}"),
    }
}

/// A watch opened and caught up.
fn live(s: &mut Store) {
    s.watch_open();
    s.caught_up(Instant::now());
}

#[test]
fn nothing_is_served_before_the_first_list_completes() {
    let mut s = Store::default();
    live(&mut s);
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
    live(&mut s);
    // Matching UID, or no UID from a live watch: hit.
    hit_of(&ask(&s, "a", "u1", true));
    hit_of(&ask(&s, "a", "", true));
    // Another UID (recreated under the same name) or an unseen pod: wait while live, then say so.
    assert_eq!(ask(&s, "a", "u2", true), Lookup::Wait);
    assert_eq!(
        ask(&s, "a", "u2", false),
        Lookup::Answer(Answer::UidMismatch)
    );
    assert_eq!(ask(&s, "b", "", true), Lookup::Wait);
    assert_eq!(ask(&s, "b", "", false), Lookup::Answer(Answer::Unknown));
    // The new pod's event arrives: the new pod is served.
    s.apply(pod("a", "u2", "2"));
    assert!(hit_of(&ask(&s, "a", "u2", true)).contains("u2"));
    assert_eq!(
        ask(&s, "a", "u1", false),
        Lookup::Answer(Answer::UidMismatch)
    );
}

#[test]
fn a_watch_answers_by_name_only_once_caught_up() {
    let mut s = Store::default();
    s.apply(pod("a", "u1", "1"));
    s.list_done();
    // Open, not caught up: UIDs are served and unseen ones waited for; a name alone is not answered.
    s.watch_open();
    assert_eq!(ask(&s, "a", "", true), Lookup::Answer(Answer::NotSynced));
    hit_of(&ask(&s, "a", "u1", true));
    assert_eq!(ask(&s, "a", "u2", true), Lookup::Wait);
    s.caught_up(Instant::now());
    hit_of(&ask(&s, "a", "", true));
    // Closed and reopened: not live again until the new watch has caught up.
    s.watch_closed();
    s.watch_open();
    assert_eq!(ask(&s, "a", "", true), Lookup::Answer(Answer::NotSynced));
    // A catch-up reported with no watch open counts for nothing.
    s.watch_closed();
    s.caught_up(Instant::now());
    assert_eq!(ask(&s, "a", "", true), Lookup::Answer(Answer::NotSynced));
}

#[test]
fn a_watch_silent_for_longer_than_the_quiet_limit_answers_no_name_only_lookup() {
    let mut s = Store::default();
    s.apply(pod("a", "u1", "1"));
    s.list_done();
    s.watch_open();
    let t = Instant::now();
    s.caught_up(t);
    let just_before = t + QUIET_LIMIT - Duration::from_secs(1);
    hit_of(&ask_at(&s, "a", "", true, just_before));
    // Nothing heard for the limit: the watch may be dead without our knowing; a name alone is not
    // answered (the pod may have been recreated meanwhile), a UID still is.
    let silent = t + QUIET_LIMIT;
    assert_eq!(
        ask_at(&s, "a", "", true, silent),
        Lookup::Answer(Answer::NotSynced)
    );
    hit_of(&ask_at(&s, "a", "u1", true, silent + QUIET_LIMIT * 10));
    // A BOOKMARK (or any event) heard: answered by name again.
    s.heard(silent);
    hit_of(&ask_at(&s, "a", "", true, silent + Duration::from_secs(1)));
}

#[test]
fn through_an_outage_only_uid_matches_are_served_and_nothing_waits() {
    let mut s = Store::default();
    s.apply(pod("a", "u1", "1"));
    s.list_done();
    live(&mut s);
    s.watch_closed();
    hit_of(&ask(&s, "a", "u1", true));
    assert_eq!(ask(&s, "a", "", true), Lookup::Answer(Answer::NotSynced));
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
    live(&mut s);
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
    live(&mut s);
    for uid in ["kubelet-uid", "api-uid", ""] {
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

/// By name alone, a pod being deleted is not the answer: the sandbox asked for is the pod that replaces it
/// under that name (a StatefulSet's `web-0` recreated once the old one is gone), which the watch has not
/// delivered yet. The old pod's redirect configuration is not the new pod's: a hit that redirects with
/// the old annotations (say, `includeOutboundIPRanges: ""`) would start the new pod with the old capture,
/// and only a skip is read again from the API server (`name_only_skip`). Waited for while the watch is
/// open, then `unknown` (the API server answers); by its own UID it is still that pod.
#[test]
fn by_name_a_pod_being_deleted_is_waited_past_not_answered() {
    let old = crate::json::parse_object(
        r#"{"metadata":{"namespace":"ns","name":"web-0","uid":"u-old","resourceVersion":"5",
            "deletionTimestamp":"2026-11-30T00:00:00Z"},
           "spec":{"containers":[{"name":"app"}]}}"#,
        "old",
    )
    .unwrap();
    let mut s = Store::default();
    s.apply(crate::redirect::reduce::reduce(&old));
    s.list_done();
    live(&mut s);
    assert_eq!(ask(&s, "web-0", "", true), Lookup::Wait);
    assert_eq!(ask(&s, "web-0", "", false), Lookup::Answer(Answer::Unknown));
    hit_of(&ask(&s, "web-0", "u-old", true));
    // The old pod goes, the new one arrives: it is the answer by name.
    s.delete("ns/web-0", "u-old");
    s.apply(pod("web-0", "u-new", "7"));
    assert!(hit_of(&ask(&s, "web-0", "", true)).contains("u-new"));
}
