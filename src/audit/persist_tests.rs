use super::*;
use crate::audit::tests::{conf, det, pod, RUNNING};
use crate::audit::{AuditSink, Store};
use crate::json::{self, Object, Value};
use crate::kube::podwatch::PodSink;
use crate::pod_rules::Decided;
use crate::redirect::plan::PodPlan;

fn edited(pod: &Object, from: &str, to: &str) -> Object {
    let text = json::to_compact(&Value::Object(pod.clone()));
    assert!(text.contains(from), "{from} not in {text}");
    json::parse_object(&text.replace(from, to), "pod").unwrap()
}

fn labeled() -> Object {
    pod(
        "",
        RUNNING,
        r#","labels":{"sidecar.istio.io/inject":"false"}"#,
    )
}

fn excluded(p: &Object) -> Object {
    edited(
        p,
        r#""sidecar.istio.io/status":"{}""#,
        r#""sidecar.istio.io/status":"{}","traffic.sidecar.istio.io/excludeOutboundIPRanges":"0.0.0.0/0""#,
    )
}

/// A pod named `name` (else the base pod).
fn named(name: &str) -> Object {
    edited(
        &edited(
            &pod("", RUNNING, ""),
            r#""name":"p""#,
            &format!(r#""name":"{name}""#),
        ),
        "u-1",
        &format!("u-{name}"),
    )
}

/// The audit as it starts: its store from the run dir's file at `path`, the sink the watch feeds.
fn start(path: &Path) -> (AuditSink, Shared) {
    let store = Store::restored(load(path));
    let sink = AuditSink {
        det: det(),
        conf: conf(),
        store: store.clone(),
    };
    (sink, store)
}

fn plan(store: &Shared, key: &str) -> Option<Decided> {
    lock(store).pods.get(key).map(|p| p.plan.clone())
}

#[test]
fn a_restarted_audit_keeps_the_decisions_made_before_it_for_the_same_uid_and_pod_ip() {
    let dir = crate::fsutil::test_dir("audit-keep");
    let path = dir.join(crate::rundir::RunDir::AUDIT_DECISIONS);
    // Before the restart: three pods first seen as they started, one left alone.
    let (mut s, store) = start(&path);
    s.pod(&pod("", RUNNING, ""));
    s.pod(&named("w"));
    s.pod(&edited(&labeled(), r#""name":"p""#, r#""name":"alone""#));
    s.pod(&named("gone"));
    // Written as they come, the first list not complete yet (a node's first list admits every pod in a
    // burst: holding a copy of each until it completes cost the agent's peak memory).
    let enc = save(&store, &path)
        .unwrap()
        .expect("written before the first list");
    assert_eq!((enc.kept, enc.left_out), (4, 0));
    s.list_done();
    let started = plan(&store, "ns/p").expect("audited");
    assert_eq!(
        save(&store, &path).unwrap(),
        None,
        "unchanged: not written again"
    );
    // Written: the store holds no copy of the pods any more.
    let held = |store: &Shared| {
        let s = lock(store);
        let pods = s.pods.values().filter(|p| p.first.is_some()).count();
        pods + s.skipped.values().filter(|p| p.first.is_some()).count()
    };
    assert_eq!(held(&store), 0);
    // Its facts refreshed: the kept pods did not change, nothing to write.
    s.pod(&edited(
        &pod("", RUNNING, ""),
        r#""resourceVersion":"5""#,
        r#""resourceVersion":"6""#,
    ));
    assert_eq!(save(&store, &path).unwrap(), None);
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    drop((s, store));

    // While the agent is down: p labeled inject=false, w annotated with a wide exclusion, alone's label
    // removed, gone deleted.
    let (mut s, store) = start(&path);
    assert_eq!(lock(&store).restored.len(), 4);
    let mut p_now = labeled();
    p_now = edited(
        &p_now,
        r#""resourceVersion":"5""#,
        r#""resourceVersion":"8""#,
    );
    s.pod(&p_now);
    s.pod(&excluded(&named("w")));
    s.pod(&edited(
        &pod("", RUNNING, ""),
        r#""name":"p""#,
        r#""name":"alone""#,
    ));
    assert_eq!(
        plan(&store, "ns/p"),
        Some(started.clone()),
        "the label patched while the agent was down took the pod out"
    );
    assert!(
        lock(&store).pods["ns/p"].changed_logged,
        "the change is logged"
    );
    assert_eq!(lock(&store).pods["ns/p"].facts.resource_version, "8");
    assert_eq!(
        plan(&store, "ns/w"),
        Some(started.clone()),
        "the annotation patched while the agent was down got in"
    );
    assert!(
        lock(&store).skipped.contains_key("ns/alone"),
        "left alone as first seen"
    );
    assert_eq!(plan(&store, "ns/alone"), None);
    // A write before the first list completes keeps the pods not seen again yet (gone may still be
    // listed), as they were.
    let enc = save(&store, &path).unwrap().expect("written");
    assert_eq!((enc.kept, enc.left_out), (4, 0));
    assert!(std::fs::read_to_string(&path).unwrap().contains("u-gone"));
    // The first list done: the pod not seen again is gone, and dropped from the file.
    s.list_done();
    assert!(lock(&store).restored.is_empty());
    let enc = save(&store, &path).unwrap().expect("written");
    assert_eq!((enc.kept, enc.left_out), (3, 0));
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(!text.contains("u-gone"), "{text}");
    // Still the pods as first seen, not as they are now.
    assert!(!text.contains("excludeOutboundIPRanges"), "{text}");
    drop((s, store));

    // A third start: a pod kept with another UID or pod IP is decided as it is now.
    let (mut s, store) = start(&path);
    s.pod(&edited(&excluded(&named("w")), "u-w", "u-w2"));
    let wide = crate::pod_rules::decide(&excluded(&named("w")), Some(&conf()));
    assert!(matches!(wide, Ok(PodPlan::Redirect(_))) && wide != started);
    assert_eq!(plan(&store, "ns/w"), Some(wide.clone()), "another UID");
    s.pod(&edited(&labeled(), "10.1.2.3", "10.1.2.9"));
    assert_eq!(plan(&store, "ns/p"), None, "another pod IP");
    assert!(!lock(&store).pods["ns/w"].changed_logged);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_missing_corrupt_or_unreadable_file_starts_empty() {
    let dir = crate::fsutil::test_dir("audit-keep-bad");
    let path = dir.join(crate::rundir::RunDir::AUDIT_DECISIONS);
    assert!(load(&path).is_empty(), "missing");
    std::fs::write(&path, "garbage\n").unwrap();
    assert!(load(&path).is_empty(), "corrupt");
    std::fs::write(&path, format!("{}\n{{\"a\":", kept::header())).unwrap();
    assert!(load(&path).is_empty(), "cut short");
    std::fs::write(&path, [0xffu8, 0xfe]).unwrap();
    assert!(load(&path).is_empty(), "not UTF-8");
    std::fs::remove_file(&path).unwrap();
    std::fs::create_dir(&path).unwrap();
    assert!(load(&path).is_empty(), "a directory");
    std::fs::remove_dir(&path).unwrap();
    // The start goes on: the first write replaces whatever was there.
    std::fs::write(&path, "garbage\n").unwrap();
    let (mut s, store) = start(&path);
    s.pod(&pod("", RUNNING, ""));
    s.list_done();
    assert!(save(&store, &path).unwrap().is_some());
    assert_eq!(load(&path).len(), 1);
    // A temp file a write cut short is swept at the next start, not one being written now (another
    // agent's, sharing the run dir), nor another file's.
    let name = crate::rundir::RunDir::AUDIT_DECISIONS;
    let old = dir.join(format!("{name}.tmp.123.4"));
    let new = dir.join(format!("{name}.tmp.124.0"));
    let other = dir.join("istio-cni-kubeconfig.tmp.123.5");
    for t in [&old, &new, &other] {
        std::fs::write(t, "half").unwrap();
    }
    let long_ago = std::time::SystemTime::now() - 2 * STALE_TEMP;
    for t in [&old, &other] {
        let f = std::fs::File::options().write(true).open(t).unwrap();
        f.set_modified(long_ago).unwrap();
    }
    sweep(&path);
    assert!(!old.exists());
    assert!(new.exists() && other.exists());
    assert_eq!(load(&path).len(), 1);
    // A write that fails stays marked: the next one tries again.
    let (mut s, store) = start(&dir.join("no-such-dir/file"));
    s.pod(&pod("", RUNNING, ""));
    s.list_done();
    assert!(save(&store, &dir.join("no-such-dir/file")).is_err());
    assert!(lock(&store).changed);
    assert!(save(&store, &path).unwrap().is_some());
    assert!(!lock(&store).changed);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn pods_written_before_are_carried_over_from_the_file_and_counted_when_it_is_gone() {
    let dir = crate::fsutil::test_dir("audit-keep-carry");
    let path = dir.join(crate::rundir::RunDir::AUDIT_DECISIONS);
    let (mut s, store) = start(&path);
    s.pod(&named("a"));
    s.pod(&named("b"));
    s.list_done();
    assert_eq!(save(&store, &path).unwrap().unwrap().kept, 2);
    let before = std::fs::read_to_string(&path).unwrap();
    // A new pod, one gone: the file holds the one left as it was written, and the new one.
    s.pod(&named("c"));
    s.gone("ns/a", "u-a");
    assert_eq!(save(&store, &path).unwrap().unwrap().kept, 2);
    let after = std::fs::read_to_string(&path).unwrap();
    let line_b = before.lines().find(|l| l.starts_with("ns/b ")).unwrap();
    assert!(after.lines().any(|l| l == line_b), "{after}");
    assert!(
        after.contains("ns/c u-c ") && !after.contains("ns/a "),
        "{after}"
    );
    // The file removed meanwhile: what only it held is left out, counted; the new pod is written.
    std::fs::remove_file(&path).unwrap();
    s.pod(&named("d"));
    let enc = save(&store, &path).unwrap().unwrap();
    assert_eq!((enc.kept, enc.left_out), (1, 2));
    assert_eq!(load(&path).keys().collect::<Vec<_>>(), ["ns/d"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_watch_writes_once_it_holds_many_so_a_first_list_never_holds_every_pod() {
    let dir = crate::fsutil::test_dir("audit-keep-held");
    let path = dir.join(crate::rundir::RunDir::AUDIT_DECISIONS);
    let (mut s, store) = start(&path);
    lock(&store).keep = Some(path.clone());
    for i in 0..crate::audit::HELD_WRITE - 1 {
        s.pod(&named(&format!("w{i}")));
    }
    // Below the mark: left to the writer thread (none runs here), nothing written, all held.
    assert!(!path.exists());
    assert_eq!(lock(&store).held, crate::audit::HELD_WRITE - 1);
    // The mark reached, first list or not: written from the watch, and let go.
    s.pod(&named("last"));
    let text = std::fs::read_to_string(&path).expect("written at the mark");
    assert_eq!(text.lines().count(), 1 + crate::audit::HELD_WRITE, "{text}");
    assert_eq!(lock(&store).held, 0);
    let held = lock(&store)
        .pods
        .values()
        .filter(|p| p.first.is_some())
        .count();
    assert_eq!(held, 0);
    let _ = std::fs::remove_dir_all(&dir);
}
