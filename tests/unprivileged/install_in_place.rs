//! Files rewritten in place by another writer that keeps its descriptor open (no close, so no
//! IN_CLOSE_WRITE): the runtime reloads on the write itself (its watch includes IN_MODIFY), so the
//! installer must see it too. Our binary truncated in place cannot run; the runtime's file rewritten in
//! place without our entry is loaded without it. Both must end not ready and be repaired; a non-CNI file
//! written in place in the conf dir must not make readiness flap.

use crate::support::install::node::*;
use crate::support::install::*;
use crate::support::poll_until;
use std::fs::{self, OpenOptions};
use std::io::Write;

/// Opens `p` for writing, truncated, in place (the same inode), and writes `data`; the returned file
/// keeps the descriptor open (no close event).
fn write_in_place(p: &std::path::Path, data: &[u8]) -> fs::File {
    let mut f = OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(p)
        .unwrap();
    f.write_all(data).unwrap();
    f
}

#[test]
fn the_runtimes_file_rewritten_in_place_without_close_gets_our_entry_back() {
    let n = Node::new("in-place-conf");
    n.write("10-a.conflist", &list_text("a-net", "ptp"));
    let p = n.start(&[]);
    n.settle_ready(&p, "first install");
    let ino = |n: &Node| {
        use std::os::unix::fs::MetadataExt;
        fs::metadata(n.conf.join("10-a.conflist")).unwrap().ino()
    };
    let before = ino(&n);
    // The primary's agent rewrites its file in place, without our entry, and keeps it open.
    let held = write_in_place(
        &n.conf.join("10-a.conflist"),
        list_text("a-net", "bridge").as_bytes(),
    );
    assert_eq!(ino(&n), before, "written in place");
    poll_until("our entry merged into the rewritten file", LONG, || {
        let t = fs::read_to_string(n.conf.join("10-a.conflist")).unwrap_or_default();
        t.contains("\"bridge\"") && n.entries("10-a.conflist") == 1
    });
    n.settle_ready(&p, "after the in-place rewrite");
    drop(held);
}

#[test]
fn our_binary_truncated_in_place_without_close_is_installed_again() {
    let n = Node::new("in-place-bin");
    n.write("10-a.conflist", &list_text("a-net", "ptp"));
    let p = n.start(&[]);
    n.settle_ready(&p, "first install");
    let bin = n.root.join("bin/istio-cni");
    let want = fs::metadata(binary()).unwrap().len();
    assert_eq!(fs::metadata(&bin).unwrap().len(), want);
    // Another writer truncates it in place and keeps it open: the runtime cannot exec an empty file.
    let held = write_in_place(&bin, b"");
    poll_until("the binary installed again", LONG, || {
        fs::metadata(&bin).is_ok_and(|m| m.len() == want)
    });
    assert_eq!(fs::read(&bin).unwrap(), fs::read(binary()).unwrap());
    n.settle_ready(&p, "after the binary came back");
    drop(held);
}

#[test]
fn a_non_cni_file_written_in_place_in_the_conf_dir_does_not_flap_readiness() {
    let n = Node::new("in-place-other");
    n.write("10-a.conflist", &list_text("a-net", "ptp"));
    fs::write(n.conf.join("calico-kubeconfig"), b"x").unwrap();
    let p = n.start(&[]);
    n.settle_ready(&p, "first install");
    let mut f = OpenOptions::new()
        .append(true)
        .open(n.conf.join("calico-kubeconfig"))
        .unwrap();
    for _ in 0..100 {
        f.write_all(b"more\n").unwrap();
        assert!(
            n.ready(),
            "not ready on a non-CNI file's write\n{}",
            p.stderr()
        );
    }
    // And after the writes, while the installer looks at the last of them (a flap would follow a write by
    // its settle time, not at once): sampled for a while after the last write too.
    for _ in 0..50 {
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert!(
            n.ready(),
            "not ready after a non-CNI file's writes\n{}",
            p.stderr()
        );
    }
}
