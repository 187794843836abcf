//! Readiness through symlinks (issue 23 H1), with the real installer process, real files and inotify:
//! `/readyz` is 200 only while the file the runtime will load holds our entry, also when that file is
//! reached through links — a dangling higher-priority link whose target appears later (also in a
//! directory that does not exist yet), a link to a link re-pointed in its own directory, a link whose
//! parent directory is itself a link that gets re-pointed. Every directory a candidate's resolution
//! looks a name up in is watched; nothing waits for an unrelated event in the conf dir. Beyond the 64
//! watched directories, the periodic re-resolve (every 5 s) is the backstop.
//! Timings are bounded generously ("not hung"); the figures are printed, never asserted.

use crate::support::install::node::*;
use crate::support::install::*;
use nix::sys::signal::Signal;
use std::fs;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::time::{Duration, Instant};

/// Re-points the link `at` to `to` atomically (a new link renamed over the old, as agents do).
fn repoint(at: &Path, to: &str) {
    let tmp = at.with_file_name(".repoint-tmp");
    let _ = fs::remove_file(&tmp);
    symlink(to, &tmp).unwrap();
    fs::rename(&tmp, at).unwrap();
}

/// After a change at `t0`: waits until ready with our entry in the runtime's file, and prints how long
/// that took and for how much of it `/readyz` said 200 while the runtime's file lacked our entry (the
/// figures for the report).
fn settle_after(n: &Node, p: &Proc, t0: Instant, what: &str) {
    let mut violated = Duration::ZERO;
    let mut last = Instant::now();
    while !(n.ready() && n.runtime_file_has_entry()) {
        let now = Instant::now();
        if n.ready() {
            violated += now - last;
        }
        last = now;
        if t0.elapsed() > LONG {
            eprintln!(
                "{what}: /readyz 200 without our entry in the runtime's file for {violated:?}"
            );
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    n.settle_ready(p, what);
    eprintln!(
        "{what}: invariant restored after {:?} (200 without our entry for {violated:?})",
        t0.elapsed()
    );
}

#[test]
fn a_dangling_higher_priority_link_whose_target_appears_is_followed() {
    let n = Node::new("dangling");
    n.write("10-ptp.conflist", &list_text("ptp-net", "ptp"));
    // Dangling now: the runtime skips it (its target does not exist), so 10-ptp is its choice.
    fs::create_dir_all(n.root.join("t")).unwrap();
    symlink("../t/real.conflist", n.conf.join("05-link.conflist")).unwrap();
    let mut p = n.start(&[]);
    n.settle_ready(&p, "initial");
    assert_eq!(n.runtime_file().as_deref(), Some("10-ptp.conflist"));
    // The target appears (another agent writes it): the runtime now loads 05-link.
    let t0 = Instant::now();
    atomic_write(
        &n.root.join("t/real.conflist"),
        list_text("link-net", "bridge").as_bytes(),
        0o644,
    );
    settle_after(&n, &p, t0, "dangling link's target appeared");
    assert_eq!(n.runtime_file().as_deref(), Some("05-link.conflist"));
    assert_eq!(n.entries("05-link.conflist"), 1);
    p.signal(Signal::SIGTERM);
    assert!(p.wait_exit(LONG).success(), "{}", p.stderr());
}

#[test]
fn a_dangling_link_into_a_directory_that_does_not_exist_yet_is_followed() {
    let n = Node::new("dangling-dir");
    n.write("10-ptp.conflist", &list_text("ptp-net", "ptp"));
    // Neither t/ nor t/sub/ exists: only the nearest existing ancestor can be watched.
    symlink("../t/sub/real.conflist", n.conf.join("05-link.conflist")).unwrap();
    let mut p = n.start(&[]);
    n.settle_ready(&p, "initial");
    fs::create_dir_all(n.root.join("t/sub")).unwrap();
    n.settle_ready(&p, "directories created, target still missing");
    let t0 = Instant::now();
    atomic_write(
        &n.root.join("t/sub/real.conflist"),
        list_text("link-net", "bridge").as_bytes(),
        0o644,
    );
    settle_after(&n, &p, t0, "target appeared in a new directory");
    assert_eq!(n.runtime_file().as_deref(), Some("05-link.conflist"));
    p.signal(Signal::SIGTERM);
    assert!(p.wait_exit(LONG).success(), "{}", p.stderr());
}

#[test]
fn re_pointing_an_intermediate_link_is_noticed() {
    let n = Node::new("chain");
    let (x, y, z) = (n.root.join("x"), n.root.join("y"), n.root.join("z"));
    for dir in [&x, &y, &z] {
        fs::create_dir_all(dir).unwrap();
    }
    fs::write(
        y.join("real.conflist"),
        list_text("k8s-pod-network", "calico"),
    )
    .unwrap();
    // conf/10-calico.conflist -> x/mid -> y/real.conflist (absolute, then relative).
    symlink(x.join("mid"), n.conf.join("10-calico.conflist")).unwrap();
    symlink("../y/real.conflist", x.join("mid")).unwrap();
    let mut p = n.start(&[]);
    n.settle_ready(&p, "through two links");
    assert_eq!(n.entries("10-calico.conflist"), 1);
    // The middle link is re-pointed at another file without our entry: the runtime reads that now.
    fs::write(
        z.join("other.conflist"),
        list_text("k8s-pod-network", "calico"),
    )
    .unwrap();
    n.settle_ready(&p, "an unrelated file written");
    let t0 = Instant::now();
    repoint(&x.join("mid"), "../z/other.conflist");
    settle_after(&n, &p, t0, "intermediate link re-pointed");
    assert!(fs::read_to_string(z.join("other.conflist"))
        .unwrap()
        .contains("istio-cni"));
    p.signal(Signal::SIGTERM);
    assert!(p.wait_exit(LONG).success(), "{}", p.stderr());
}

#[test]
fn re_pointing_a_linked_parent_directory_is_noticed() {
    let n = Node::new("dirlink");
    let (d, e1, e2) = (n.root.join("d"), n.root.join("e1"), n.root.join("e2"));
    for dir in [&d, &e1, &e2] {
        fs::create_dir_all(dir).unwrap();
    }
    fs::write(
        e1.join("c.conflist"),
        list_text("k8s-pod-network", "calico"),
    )
    .unwrap();
    fs::write(
        e2.join("c.conflist"),
        list_text("k8s-pod-network", "calico"),
    )
    .unwrap();
    // conf/10-c.conflist -> d/cur/c.conflist, where d/cur is itself a link to e1/.
    symlink("../e1", d.join("cur")).unwrap();
    symlink("../d/cur/c.conflist", n.conf.join("10-c.conflist")).unwrap();
    let mut p = n.start(&[]);
    n.settle_ready(&p, "through a linked directory");
    assert!(fs::read_to_string(e1.join("c.conflist"))
        .unwrap()
        .contains("istio-cni"));
    // d/cur now points at e2/: same name, another file, no entry.
    let t0 = Instant::now();
    repoint(&d.join("cur"), "../e2");
    settle_after(&n, &p, t0, "linked parent directory re-pointed");
    assert!(fs::read_to_string(e2.join("c.conflist"))
        .unwrap()
        .contains("istio-cni"));
    p.signal(Signal::SIGTERM);
    assert!(p.wait_exit(LONG).success(), "{}", p.stderr());
}

#[test]
fn pinned_a_dangling_higher_priority_link_that_resolves_makes_us_not_ready() {
    let n = Node::new("pinned-dangling");
    n.write("10-ptp.conflist", &list_text("ptp-net", "ptp"));
    fs::create_dir_all(n.root.join("t")).unwrap();
    symlink("../t/real.conflist", n.conf.join("05-link.conflist")).unwrap();
    let mut p = n.start(&[("CNI_CONF_NAME", "10-ptp.conflist")]);
    n.settle_ready(&p, "pinned");
    let t0 = Instant::now();
    atomic_write(
        &n.root.join("t/real.conflist"),
        list_text("link-net", "bridge").as_bytes(),
        0o644,
    );
    poll_until("503 once the runtime loads the link", LONG, || {
        n.not_ready()
    });
    eprintln!("pinned, link target appeared: 503 after {:?}", t0.elapsed());
    p.signal(Signal::SIGTERM);
    assert!(p.wait_exit(LONG).success(), "{}", p.stderr());
}

#[test]
fn beyond_the_watched_directories_the_periodic_re_resolve_notices() {
    let n = Node::new("backstop");
    n.write("10-ptp.conflist", &list_text("ptp-net", "ptp"));
    // 70 dangling higher-priority links, each into its own directory: more directories than are watched
    // (64), so the last links' directories are not; only the periodic re-resolve can see them change.
    for i in 0..70 {
        fs::create_dir_all(n.root.join(format!("d{i:02}"))).unwrap();
        symlink(
            format!("../d{i:02}/x.conflist"),
            n.conf.join(format!("01-l{i:02}.conflist")),
        )
        .unwrap();
    }
    let mut p = n.start(&[]);
    n.settle_ready(&p, "initial");
    let t0 = Instant::now();
    atomic_write(
        &n.root.join("d69/x.conflist"),
        list_text("late-net", "bridge").as_bytes(),
        0o644,
    );
    settle_after(&n, &p, t0, "unwatched link target appeared");
    assert_eq!(n.runtime_file().as_deref(), Some("01-l69.conflist"));
    assert!(
        p.stderr().contains("beyond the 64 watched"),
        "the operator is told:\n{}",
        p.stderr()
    );
    p.signal(Signal::SIGTERM);
    assert!(p.wait_exit(LONG).success(), "{}", p.stderr());
}

#[test]
fn link_directories_no_longer_on_any_chain_are_unwatched() {
    let n = Node::new("unwatch");
    n.write("10-ptp.conflist", &list_text("ptp-net", "ptp"));
    let p = n.start(&[]);
    n.settle_ready(&p, "initial");
    let pid = p.child.id();
    let base = inotify_watches(pid);
    // A lower-priority link re-pointed into a new directory again and again: the watch count stays bounded.
    for round in 0..20 {
        let dir = n.root.join(format!("r{round}"));
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("x.conflist"), list_text("x-net", "bridge")).unwrap();
        repoint(
            &n.conf.join("50-moving.conflist"),
            &format!("../r{round}/x.conflist"),
        );
        n.settle_ready(&p, "after a re-point");
    }
    poll_until("stale link-dir watches dropped", LONG, || {
        inotify_watches(pid) <= base + 3
    });
    eprintln!(
        "inotify watches: {base} at start, {} after 20 re-points",
        inotify_watches(pid)
    );
}

/// The number of inotify watches the process holds (its fdinfo lists one `inotify wd:` line each).
fn inotify_watches(pid: u32) -> usize {
    let mut n = 0;
    for fd in fs::read_dir(format!("/proc/{pid}/fdinfo"))
        .unwrap()
        .flatten()
    {
        if let Ok(t) = fs::read_to_string(fd.path()) {
            n += t.lines().filter(|l| l.starts_with("inotify wd:")).count();
        }
    }
    n
}
