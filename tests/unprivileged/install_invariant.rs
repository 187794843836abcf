//! The readiness invariant's edge cases with the real installer process (issue 11 item 1): ready only
//! while the file the runtime will pick holds our *current* entry, exactly once — also when someone
//! edits the entry, when a symlinked primary is re-pointed at a target that already holds an entry, and
//! across a restart that finds the runtime's choice changed (the old file loses our entry, so a later
//! uninstall leaves no entry naming a removed binary behind).

use crate::support::install::node::*;
use crate::support::install::*;
use nix::sys::signal::Signal;
use std::fs;
use std::os::unix::fs::symlink;

#[test]
fn an_edited_entry_is_put_back_and_not_ready_meanwhile() {
    let n = Node::new("edited");
    n.write("10-ptp.conflist", &list_text("ptp-net", "ptp"));
    let mut p = n.start(&[]);
    n.settle_ready(&p, "initial");
    let ours = fs::read_to_string(n.conf.join("10-ptp.conflist")).unwrap();
    assert!(ours.contains("\"exclude_namespaces\": null"), "{ours}");
    // Someone edits our entry: pods in `default` would start unredirected.
    let edited = ours.replace(
        "\"exclude_namespaces\": null",
        "\"exclude_namespaces\": [\"default\"]",
    );
    n.write("10-ptp.conflist", &edited);
    poll_until("our entry is put back", LONG, || {
        fs::read_to_string(n.conf.join("10-ptp.conflist")).is_ok_and(|t| t == ours)
    });
    n.settle_ready(&p, "after the edit was undone");
    // A second copy of the entry (the plugin would run twice): also put right.
    let doubled = ours.replace(
        "\"plugins\": [",
        "\"plugins\": [\n    {\"name\": \"istio-cni\", \"type\": \"istio-cni\"},",
    );
    n.write("10-ptp.conflist", &doubled);
    poll_until("exactly one entry again", LONG, || {
        fs::read_to_string(n.conf.join("10-ptp.conflist")).is_ok_and(|t| t == ours)
    });
    n.settle_ready(&p, "after the duplicate was removed");
    p.signal(Signal::SIGTERM);
    assert!(p.wait_exit(LONG).success(), "{}", p.stderr());
}

#[test]
fn a_link_repointed_at_a_target_holding_our_entry_is_still_watched() {
    let n = Node::new("repoint");
    let (a, b) = (n.root.join("a"), n.root.join("b"));
    fs::create_dir_all(&a).unwrap();
    fs::create_dir_all(&b).unwrap();
    fs::write(
        a.join("calico.conflist"),
        list_text("k8s-pod-network", "calico"),
    )
    .unwrap();
    let link = n.conf.join("10-calico.conflist");
    symlink("../a/calico.conflist", &link).unwrap();
    let mut p = n.start(&[]);
    n.settle_ready(&p, "link to a/");
    // The primary's agent moves its file to b/, content (with our entry) unchanged, and re-points the link.
    fs::copy(a.join("calico.conflist"), b.join("calico.conflist")).unwrap();
    let tmp = n.conf.join("10-calico.conflist.tmp.1");
    symlink("../b/calico.conflist", &tmp).unwrap();
    fs::rename(&tmp, &link).unwrap();
    n.settle_ready(&p, "link to b/");
    // Then rewrites it where it now lives, without our entry: it must come back.
    atomic_write(
        &b.join("calico.conflist"),
        list_text("k8s-pod-network", "calico")
            .replace("calico\" }", "calico\", \"mtu\": 1400 }")
            .as_bytes(),
        0o644,
    );
    poll_until("entry back in b/calico.conflist", LONG, || {
        n.entries("10-calico.conflist") == 1
            && fs::read_to_string(&link).is_ok_and(|t| t.contains("1400"))
    });
    n.settle_ready(&p, "after b/ was rewritten");
    p.signal(Signal::SIGTERM);
    assert!(p.wait_exit(LONG).success(), "{}", p.stderr());
}

/// Issue 32: the previous primary is the file the runtime falls back to if the new one goes: it keeps
/// our entry across a restart (before, the restart took it out, and a new primary disappearing again left
/// the runtime on a file without our entry); uninstall takes it out of both.
#[test]
fn a_restart_keeps_our_entry_in_the_previous_primary_and_uninstall_removes_both() {
    let n = Node::new("restart-old");
    n.write("10-ptp.conflist", &list_text("ptp-net", "ptp"));
    let p = n.start(&[]);
    n.settle_ready(&p, "first run");
    p.signal(Signal::SIGKILL);
    drop(p);
    // While we were down, a higher-priority config appeared.
    n.write("05-new.conflist", &list_text("new-net", "bridge"));
    let mut p = n.start(&[]);
    n.settle_ready(&p, "after restart");
    assert_eq!(n.entries("05-new.conflist"), 1);
    assert_eq!(
        n.entries("10-ptp.conflist"),
        1,
        "the fallback keeps our entry"
    );
    p.signal(Signal::SIGTERM);
    assert!(p.wait_exit(LONG).success(), "{}", p.stderr());
    // Uninstalled: no file names the removed plugin, whichever the runtime picks next.
    assert_eq!(n.entries("05-new.conflist"), 0);
    assert_eq!(n.entries("10-ptp.conflist"), 0);
}

#[test]
fn pinned_a_symlinked_higher_priority_file_losing_our_entry_makes_us_not_ready() {
    let n = Node::new("pinned-link");
    let b = n.root.join("b");
    fs::create_dir_all(&b).unwrap();
    n.write("10-ptp.conflist", &list_text("ptp-net", "ptp"));
    let mut p = n.start(&[("CNI_CONF_NAME", "10-ptp.conflist")]);
    n.settle_ready(&p, "pinned");
    // A higher-priority file, a link into another directory, whose target holds our entry: the runtime
    // uses it and pods are redirected, so we stay ready.
    fs::copy(n.conf.join("10-ptp.conflist"), b.join("x.conflist")).unwrap();
    symlink("../b/x.conflist", n.conf.join("05-link.conflist")).unwrap();
    n.settle_ready(&p, "higher-priority link holding our entry");
    // Its agent rewrites the target where it lives, without our entry: not ready any more.
    atomic_write(
        &b.join("x.conflist"),
        list_text("x-net", "bridge").as_bytes(),
        0o644,
    );
    poll_until("503 once the runtime's file lost our entry", LONG, || {
        n.not_ready()
    });
    p.signal(Signal::SIGTERM);
    assert!(p.wait_exit(LONG).success(), "{}", p.stderr());
}

#[test]
fn a_primary_libcni_stops_accepting_is_left_for_the_file_the_runtime_uses_next() {
    let n = Node::new("invalidated");
    n.write("05-a.conflist", &list_text("a-net", "bridge"));
    n.write("10-b.conflist", &list_text("b-net", "ptp"));
    let mut p = n.start(&[]);
    n.settle_ready(&p, "initial");
    assert_eq!(n.entries("05-a.conflist"), 1);
    // 05-a keeps our entry but libcni now skips it (a capabilities value that is not a boolean), so the
    // runtime uses 10-b: our entry must follow.
    let broken = fs::read_to_string(n.conf.join("05-a.conflist"))
        .unwrap()
        .replace(
            "\"type\": \"bridge\"",
            "\"type\": \"bridge\", \"capabilities\": {\"portMappings\": \"true\"}",
        );
    assert_ne!(
        broken,
        fs::read_to_string(n.conf.join("05-a.conflist")).unwrap()
    );
    n.write("05-a.conflist", &broken);
    poll_until("entry moved to 10-b", LONG, || {
        n.entries("10-b.conflist") == 1
    });
    n.settle_ready(&p, "after 05-a became invalid");
    assert_eq!(n.runtime_file().as_deref(), Some("10-b.conflist"));
    p.signal(Signal::SIGTERM);
    assert!(p.wait_exit(LONG).success(), "{}", p.stderr());
}
