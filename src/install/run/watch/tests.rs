//! The watcher on real directories: renames seen, temp names filtered, the stop descriptor, a base
//! directory removed and recreated, link-chain directories dropped.

use super::*;

#[test]
fn sees_renames_and_ignores_filtered_names() {
    let d = crate::fsutil::test_dir("watch-test");
    let mut w = Watcher::new(Box::new(|_, n: &str| !n.contains(".tmp."))).unwrap();
    w.add(&d, Role::ConfDir).unwrap();
    assert_eq!(
        w.wait(None, Some(Duration::from_millis(20))).unwrap(),
        Wake::Timeout
    );
    std::fs::write(d.join("x.tmp.1"), b"x").unwrap();
    assert_eq!(
        w.wait(None, Some(Duration::from_millis(20))).unwrap(),
        Wake::Timeout
    );
    std::fs::rename(d.join("x.tmp.1"), d.join("x.conflist")).unwrap();
    match w.wait(None, Some(Duration::from_secs(5))).unwrap() {
        Wake::Changed(c) => assert!(c.conf),
        other => panic!("{other:?}"),
    }
    let (r, wfd) = nix::unistd::pipe().unwrap();
    nix::unistd::write(&wfd, b"x").unwrap();
    assert_eq!(w.wait(Some(r.as_fd()), None).unwrap(), Wake::Stop);
    std::fs::remove_dir_all(&d).unwrap();
}

fn changed_conf(w: &mut Watcher) -> bool {
    matches!(w.wait(None, Some(Duration::from_secs(5))).unwrap(), Wake::Changed(c) if c.conf)
}

#[test]
fn a_base_directory_removed_and_recreated_is_watched_again() {
    let root = crate::fsutil::test_dir("watch-base");
    let d = root.join("a/net.d");
    std::fs::create_dir_all(&d).unwrap();
    let mut w = Watcher::new(Box::new(|_, _: &str| true)).unwrap();
    w.add(&d, Role::ConfDir).unwrap();
    // Removed with its parent: the grandparent is watched for `a`.
    std::fs::remove_dir_all(root.join("a")).unwrap();
    assert!(changed_conf(&mut w));
    assert_eq!(w.bases[0].state, BaseState::Waiting);
    assert!(w.health().is_none(), "waiting for it is healthy");
    std::fs::create_dir(root.join("a")).unwrap();
    std::fs::create_dir(&d).unwrap();
    // Watched again: a file written there is a change.
    poll(|| {
        let _ = w.drain();
        matches!(w.bases[0].state, BaseState::Watched(..))
    });
    std::fs::write(d.join("x.conflist"), b"{}").unwrap();
    assert!(changed_conf(&mut w));
    // Renamed away and replaced: the new directory at the path counts, the old one is not watched.
    std::fs::rename(&d, root.join("old")).unwrap();
    std::fs::create_dir(&d).unwrap();
    poll(|| {
        let _ = w.drain();
        w.resync();
        dirs::identity(&d).is_some_and(|id| w.bases[0].state == BaseState::Watched(id.0, id.1))
    });
    let _ = w.drain();
    std::fs::write(root.join("old/y.conflist"), b"{}").unwrap();
    assert_eq!(
        w.wait(None, Some(Duration::from_millis(50))).unwrap(),
        Wake::Timeout
    );
    std::fs::write(d.join("y.conflist"), b"{}").unwrap();
    assert!(changed_conf(&mut w));
    std::fs::remove_dir_all(&root).unwrap();
}

fn poll(mut f: impl FnMut() -> bool) {
    let until = Instant::now() + Duration::from_secs(5);
    while !f() {
        assert!(Instant::now() < until, "timed out");
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn link_directories_are_watched_for_their_names_and_dropped_when_unused() {
    use std::os::unix::fs::symlink;
    let root = crate::fsutil::test_dir("watch-links");
    let conf = root.join("conf");
    for sub in ["conf", "t1", "t2"] {
        std::fs::create_dir_all(root.join(sub)).unwrap();
    }
    symlink("../t1/x.conflist", conf.join("10.conflist")).unwrap();
    let mut w = Watcher::new(Box::new(|_, _: &str| true)).unwrap();
    w.add(&conf, Role::ConfDir).unwrap();
    let follow = |w: &mut Watcher| w.follow_links(crate::install::config::links::chains_of(&conf));
    assert!(follow(&mut w), "first look");
    assert!(!follow(&mut w), "nothing changed");
    let links = |w: &Watcher| {
        w.marks
            .iter()
            .filter(|m| matches!(m.why, Why::Link(..)))
            .count()
    };
    assert_eq!(links(&w), 2, "the root (for t1) and t1 (for x.conflist)");
    // Another name in t1 is not a change; the dangling target appearing is.
    std::fs::write(root.join("t1/other"), b"").unwrap();
    assert_eq!(
        w.wait(None, Some(Duration::from_millis(50))).unwrap(),
        Wake::Timeout
    );
    std::fs::write(root.join("t1/x.conflist"), b"{}").unwrap();
    assert!(changed_conf(&mut w));
    assert!(follow(&mut w), "the chain now ends at a file");
    // Re-pointed at t2: t1 is dropped.
    std::fs::remove_file(conf.join("10.conflist")).unwrap();
    symlink("../t2/x.conflist", conf.join("10.conflist")).unwrap();
    assert!(follow(&mut w));
    assert_eq!(links(&w), 2);
    assert!(w.marks.iter().all(|m| !m.dir.ends_with("t1")));
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn a_file_written_in_place_without_close_is_a_change_for_the_names_that_matter() {
    use std::io::Write;
    let d = crate::fsutil::test_dir("watch-in-place");
    let bin = d.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    for (dir, name) in [
        (&d, "10-a.conflist"),
        (&d, "calico-kubeconfig"),
        (&bin, "istio-cni"),
    ] {
        std::fs::write(dir.join(name), b"{}").unwrap();
    }
    let mut w = Watcher::new(Box::new(|role, n: &str| {
        role != Role::BinDir || n == "istio-cni"
    }))
    .unwrap();
    w.add(&d, Role::ConfDir).unwrap();
    w.add(&bin, Role::BinDir).unwrap();
    let open = |p: std::path::PathBuf| {
        std::fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(p)
            .unwrap()
    };
    // Truncated and rewritten in place, the descriptor kept open: no close event.
    let mut conf = open(d.join("10-a.conflist"));
    conf.write_all(b"{\"plugins\":[]}").unwrap();
    match w.wait(None, Some(Duration::from_secs(5))).unwrap() {
        Wake::Changed(c) => assert!(c.conf && !c.bin, "{c:?}"),
        other => panic!("an in-place write of a CNI config was missed: {other:?}"),
    }
    let _bin_fd = open(bin.join("istio-cni"));
    match w.wait(None, Some(Duration::from_secs(5))).unwrap() {
        Wake::Changed(c) => assert!(c.bin, "{c:?}"),
        other => panic!("our binary truncated in place was missed: {other:?}"),
    }
    // A file the runtime does not read, written in place in the conf dir: not a change.
    let mut other = open(d.join("calico-kubeconfig"));
    other.write_all(b"x").unwrap();
    assert_eq!(
        w.wait(None, Some(Duration::from_millis(50))).unwrap(),
        Wake::Timeout
    );
    // Its close is (as before: a finished write of any conf-dir file is looked at).
    drop(other);
    assert!(changed_conf(&mut w));
    // Settling: an unclosed write is waited for until quiet; a close ends it at once.
    conf.write_all(b" ").unwrap();
    assert!(changed_conf(&mut w));
    assert!(w.modified_at.is_some());
    assert_eq!(
        w.settle(None, Duration::from_millis(20), Duration::from_secs(5))
            .unwrap(),
        Wake::Timeout
    );
    assert!(w.modified_at.is_none());
    drop(conf);
    std::fs::remove_dir_all(&d).unwrap();
}
