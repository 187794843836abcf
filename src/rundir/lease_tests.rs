//! The lease with real files and real locks: each `Lease` opens the file itself, so two leases in one
//! process are two open file descriptions, as two agents are.

use super::*;
use crate::fsutil::test_dir;
use std::os::fd::AsFd;

#[test]
fn the_newest_live_agent_owns_the_node_and_a_restarted_one_takes_over() {
    let d = test_dir("lease");
    let mut a = Lease::join(&d, "pod a").unwrap();
    assert_eq!(a.generation(), 1);
    assert_eq!(a.newer(), None);
    let mut b = Lease::join(&d, "pod b").unwrap();
    assert_eq!(b.generation(), 2);
    let p = a.newer().expect("b supersedes a");
    assert!(p.newer && p.who == "pod b, generation 2", "{p:?}");
    assert_eq!(b.newer(), None);
    // b's process ends (here: its descriptor closes): a owns the node again.
    drop(b);
    assert_eq!(a.newer(), None);
    // b restarted in place: its predecessor's lock is gone, it is the newest and takes over.
    let b2 = Lease::join(&d, "pod b").unwrap();
    assert_eq!(b2.generation(), 2);
    assert!(a.newer().is_some());
    // No live agent at all: a restart starts from the first slot again.
    drop((a, b2));
    assert_eq!(Lease::join(&d, "pod c").unwrap().generation(), 1);
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_superseded_agent_wakes_when_the_newer_one_is_gone_or_at_the_stop() {
    let d = test_dir("lease");
    let mut a = Lease::join(&d, "pod a").unwrap();
    let b = Lease::join(&d, "pod b").unwrap();
    let gone = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        drop(b);
    });
    assert!(a.wait_until_newest(None).unwrap());
    gone.join().unwrap();
    assert_eq!(a.newer(), None);

    let _c = Lease::join(&d, "pod c").unwrap();
    let (stop_r, stop_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
    nix::unistd::write(&stop_w, b"x").unwrap();
    assert!(!a.wait_until_newest(Some(stop_r.as_fd())).unwrap());
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn of_agents_stopping_one_after_the_other_only_the_last_decides() {
    for newer_first in [false, true] {
        let d = test_dir("lease");
        let mut a = Lease::join(&d, "pod a").unwrap();
        let mut b = Lease::join(&d, "pod b").unwrap();
        let (first, last, other) = if newer_first {
            (&mut b, &mut a, "pod a, generation 1")
        } else {
            (&mut a, &mut b, "pod b, generation 2")
        };
        let p = first.at_stop().expect("the other one still runs");
        assert_eq!(p.newer, !newer_first, "{p:?}");
        assert_eq!(p.who, other);
        assert!(first.remove().unwrap().ends_with("left in place"));
        assert_eq!(last.at_stop(), None, "the last one out decides");
        assert!(last.remove().unwrap().ends_with("removed"));
        std::fs::remove_dir_all(&d).unwrap();
    }
}

#[test]
fn an_agent_starting_during_the_last_ones_cleanup_waits_and_joins_a_new_file() {
    let d = test_dir("lease");
    let mut a = Lease::join(&d, "pod a").unwrap();
    assert_eq!(a.at_stop(), None);
    let path = RunDir::new(&d).lease();
    assert_eq!(identity(&path), Some(a.id));
    let (tx, rx) = std::sync::mpsc::channel();
    let joiner = {
        let d = d.clone();
        std::thread::spawn(move || {
            let l = Lease::join(&d, "pod b").unwrap();
            tx.send(()).unwrap();
            l
        })
    };
    // Still cleaning up: the joiner waits.
    assert!(rx.recv_timeout(Duration::from_millis(200)).is_err());
    assert!(a.remove().unwrap().ends_with("removed"));
    drop(a);
    let mut b = joiner.join().unwrap();
    assert_eq!(b.generation(), 1);
    // A new file (generation 1 again), and b holds the one at the path. Its inode number may be the first
    // file's again: the kernel reuses a freed inode number, so only the content tells the files apart.
    assert!(identity(&path).is_some_and(|id| Some(id) == Some(b.id)));
    assert_eq!(b.newer(), None);
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_file_removed_by_hand_is_joined_again() {
    let d = test_dir("lease");
    let mut a = Lease::join(&d, "pod a").unwrap();
    std::fs::remove_file(RunDir::new(&d).lease()).unwrap();
    let mut b = Lease::join(&d, "pod b").unwrap();
    assert_eq!(b.generation(), 1, "a new file");
    // a looks before its next write, finds the file replaced and joins it: both see each other again.
    assert!(a.newer().is_none() && a.generation() == 2);
    assert!(b.newer().is_some_and(|p| p.who == "pod a, generation 2"));
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn uninstall_removes_the_file_only_when_no_agent_holds_it() {
    let d = test_dir("lease");
    assert!(remove_unheld(&d).unwrap().ends_with("absent"));
    let a = Lease::join(&d, "pod a").unwrap();
    assert!(remove_unheld(&d)
        .unwrap()
        .ends_with("left in place: an agent runs"));
    drop(a);
    assert!(remove_unheld(&d).unwrap().ends_with("removed"));
    assert!(!RunDir::new(&d).lease().exists());
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_file_others_can_open_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let d = test_dir("lease");
    let path = RunDir::new(&d).lease();
    std::fs::write(&path, b"").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let e = Lease::join(&d, "pod a").err().expect("refused").to_string();
    assert!(
        e.contains("is not this user's alone") && e.contains("mode 644"),
        "{e}"
    );
    std::fs::remove_file(&path).unwrap();
    std::os::unix::fs::symlink(d.join("elsewhere"), &path).unwrap();
    assert!(
        Lease::join(&d, "pod a").is_err(),
        "a symlink is not followed"
    );
    assert!(!d.join("elsewhere").exists());
    std::fs::remove_dir_all(&d).unwrap();
}
