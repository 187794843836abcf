//! The round's effects that need no namespace of their own: a pod whose namespace cannot be found or told
//! is unverifiable, never redirected; what follows a verdict (the mode's action under its back-off, what
//! is remembered with the pod).
use super::super::admit;
use super::super::tests::{self as fixture, conf};
use super::*;
use crate::json;
use crate::kube::{Client, Config};
use crate::repair::options::Options;
use std::path::PathBuf;

fn opts() -> Options {
    Options {
        node_name: "n1".into(),
        delete_pods: true,
        ..Options::default()
    }
}

/// A running sidecar pod with this UID and IP, as the store keeps it.
fn pod(uid: &str, ip: &str) -> Pod {
    let text = json::to_compact(&json::Value::Object(fixture::pod("", fixture::RUNNING, "")));
    let text = text.replace("u-1", uid).replace("10.1.2.3", ip);
    admit(
        &fixture::det(),
        &conf(),
        &json::parse_object(&text, "pod").unwrap(),
    )
    .unwrap()
}

/// A host `/proc` with one process (`pid`) whose cgroup is `cgroup` and whose `ns/net` is a plain file.
fn fake_proc(tag: &str, pid: u32, cgroup: &str) -> PathBuf {
    let dir = crate::fsutil::test_dir(&format!("audit-round-{tag}"));
    let p = dir.join(pid.to_string());
    std::fs::create_dir_all(p.join("ns")).unwrap();
    std::fs::write(p.join("cgroup"), cgroup).unwrap();
    std::fs::write(p.join("ns/net"), "").unwrap();
    dir
}

#[test]
fn a_pod_whose_namespace_cannot_be_found_or_told_is_unverifiable_never_redirected() {
    let uid = "0a1b2c3d-0000-4000-8000-00000000000a";
    let un = |v: Option<Verdict>| match v {
        Some(Verdict::Unverifiable(why)) => why,
        other => panic!("{other:?}"),
    };
    let none = PathBuf::from("/nonexistent/audit-proc");
    let why = un(verify(&pod(uid, "10.1.2.3"), &none, &conf(), None));
    assert!(why.contains("/nonexistent/audit-proc"), "{why}");
    let why = un(verify(&pod(uid, "ten"), &none, &conf(), None));
    assert_eq!(why, "status.podIP is not an address");
    // Another pod's process only: no candidate, the IP alone never decides.
    let other = fake_proc(
        "other",
        4242,
        "0::/kubepods/pod0a1b2c3d-0000-4000-8000-00000000000b/c1\n",
    );
    for scan in [None, procfs::Scan::read(&other).ok()] {
        let why = un(verify(
            &pod(uid, "10.1.2.3"),
            &other,
            &conf(),
            scan.as_ref(),
        ));
        assert!(why.contains("no process is in the cgroup of pod"), "{why}");
    }
    // The pod's own process, in a namespace whose owner cannot be read: refused, not guessed.
    let own = fake_proc("own", 4243, &format!("0::/kubepods/pod{uid}/c1\n"));
    for scan in [None, procfs::Scan::read(&own).ok()] {
        let why = un(verify(&pod(uid, "10.1.2.3"), &own, &conf(), scan.as_ref()));
        assert!(why.contains("refusing to program"), "{why}");
    }
    for d in [other, own] {
        let _ = std::fs::remove_dir_all(d);
    }
}

/// An auditor over `store` whose actions go to an API server that refuses every connection.
fn auditor(store: &Shared) -> Auditor {
    let kubeconfig = r#"{"apiVersion":"v1","kind":"Config",
        "clusters":[{"name":"c","cluster":{"server":"http://127.0.0.1:1"}}],
        "users":[{"name":"u","user":{}}],
        "contexts":[{"name":"x","context":{"cluster":"c","user":"u"}}],"current-context":"x"}"#;
    let cfg = Config::from_kubeconfig_text(kubeconfig, std::path::Path::new("/"), "k").unwrap();
    let client = Client::from_config(cfg).unwrap();
    let actor = Actor::new(client, &opts(), "/nonexistent".into(), conf());
    Auditor::new(store.clone(), Duration::from_secs(60), actor)
}

#[test]
fn an_unredirected_pod_is_acted_on_under_its_backoff_and_remembered_with_its_uid() {
    let store = Shared::default();
    let mut a = auditor(&store);
    let old = pod("u-1", "10.1.2.3");
    lock(&store)
        .pods
        .insert("ns/p".into(), Box::new(old.clone()));
    // One verdict in `round` for the pod as the store has it now; what is remembered with it after.
    let mut after = |round: u64, v: &Verdict| {
        a.rounds = round;
        let p = lock(&store).pods["ns/p"].clone();
        a.after("ns/p", &p, v.clone());
        let seen = lock(&store).pods["ns/p"].seen.clone();
        seen.map(|s| (s.verdict, s.backoff.acts, s.backoff.next_round))
    };
    let missing = Verdict::Missing("IPv4: missing -t nat -N ISTIO_OUTPUT".into());
    // Round 1: the delete mode acts (and fails: the API server refuses), the back-off starts.
    assert_eq!(after(1, &missing), Some((missing.clone(), 1, 2)));
    // The same round again: not due, no second action.
    assert_eq!(after(1, &missing), Some((missing.clone(), 1, 2)));
    // Round 2: due again, and the next one waits two rounds.
    assert_eq!(after(2, &missing), Some((missing.clone(), 2, 4)));
    // Unverifiable: never acted on, its back-off kept.
    let blind = Verdict::Unverifiable("no host /proc".into());
    assert_eq!(after(4, &blind), Some((blind, 2, 4)));
    // Seen redirected: the back-off starts over.
    assert_eq!(
        after(4, &Verdict::Redirected),
        Some((Verdict::Redirected, 0, 0))
    );
    // A pod replaced meanwhile (another UID) keeps nothing of the old one's verdict.
    lock(&store)
        .pods
        .insert("ns/p".into(), Box::new(pod("u-2", "10.1.2.4")));
    a.after("ns/p", &old, missing);
    assert_eq!(lock(&store).pods["ns/p"].seen, None);
}
