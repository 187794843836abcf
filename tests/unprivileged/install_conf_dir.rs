//! Readiness against what the runtime loads from the conf dir (issue 23 M1, L1), with the real installer
//! process, real files and inotify: `.json` files are configurations for containerd and CRI-O (libcni
//! `ConfFiles(dir, [".conf", ".conflist", ".json"])`, a `.json` loaded like a `.conf`); file names are
//! bytes, sorted and opened as Go does, never re-spelled through UTF-8.

use crate::support::install::node::*;
use crate::support::install::*;
use nix::sys::signal::Signal;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::time::{Duration, Instant};

fn conf_text(name: &str, plugin: &str) -> String {
    format!("{{\"cniVersion\":\"1.0.0\",\"name\":\"{name}\",\"type\":\"{plugin}\"}}\n")
}

#[test]
fn a_json_config_the_runtime_loads_first_gets_our_entry() {
    let n = Node::new("json");
    n.write("10-ptp.conflist", &list_text("ptp-net", "ptp"));
    let mut p = n.start(&[]);
    n.settle_ready(&p, "initial");
    // A single-plugin `.json` sorting first: containerd and CRI-O load it as their primary.
    let t0 = Instant::now();
    n.write("05-x.json", &conf_text("x-net", "bridge"));
    poll_until("our entry follows the .json primary", LONG, || {
        n.entries("05-x.conflist") == 1 && !n.conf.join("05-x.json").exists() && n.ready()
    });
    eprintln!(
        ".json primary: ready with our entry after {:?}",
        t0.elapsed()
    );
    // The old primary keeps it: the runtime falls back to it if the .json's list goes (issue 32).
    assert_eq!(n.entries("10-ptp.conflist"), 1, "the old primary keeps it");
    n.settle_ready(&p, "after the .json primary appeared");
    p.signal(Signal::SIGTERM);
    assert!(p.wait_exit(LONG).success(), "{}", p.stderr());
}

#[test]
fn pinned_a_json_file_sorting_first_makes_us_not_ready() {
    let n = Node::new("json-pinned");
    n.write("10-ptp.conflist", &list_text("ptp-net", "ptp"));
    let mut p = n.start(&[("CNI_CONF_NAME", "10-ptp.conflist")]);
    n.settle_ready(&p, "pinned");
    let t0 = Instant::now();
    n.write("05-x.json", &conf_text("x-net", "bridge"));
    poll_until("503: the runtime loads 05-x.json", LONG, || n.not_ready());
    eprintln!("pinned, .json primary: 503 after {:?}", t0.elapsed());
    stays(
        "stays not ready while 05-x.json lacks our entry",
        Duration::from_secs(1),
        || n.not_ready(),
    );
    assert!(
        p.stderr().contains("05-x.json"),
        "the log names the file:\n{}",
        p.stderr()
    );
    p.signal(Signal::SIGTERM);
    assert!(p.wait_exit(LONG).success(), "{}", p.stderr());
}

#[test]
fn a_json_file_holding_a_list_is_skipped_as_the_runtime_skips_it() {
    let n = Node::new("json-list");
    n.write("10-ptp.conflist", &list_text("ptp-net", "ptp"));
    // A list in a `.json`: libcni loads it as a single plugin, finds no `type`, and skips it.
    n.write("05-x.json", &list_text("x-net", "bridge"));
    let mut p = n.start(&[]);
    n.settle_ready(&p, "a list in a .json is not the primary");
    assert_eq!(n.entries("10-ptp.conflist"), 1);
    assert_eq!(n.entries("05-x.json"), 0);
    p.signal(Signal::SIGTERM);
    assert!(p.wait_exit(LONG).success(), "{}", p.stderr());
}

#[test]
fn a_primary_with_a_non_utf8_name_gets_our_entry() {
    let n = Node::new("bytes");
    let name = OsStr::from_bytes(b"10-\xff.conflist");
    atomic_write(
        &n.conf.join(name),
        list_text("ptp-net", "ptp").as_bytes(),
        0o644,
    );
    let mut p = n.start(&[]);
    let t0 = Instant::now();
    poll_until("ready with our entry in the file", LONG, || {
        n.ready() && entries_at(&n.conf.join(name)) == 1
    });
    eprintln!("non-UTF-8 primary: ready after {:?}", t0.elapsed());
    p.signal(Signal::SIGTERM);
    assert!(p.wait_exit(LONG).success(), "{}", p.stderr());
    assert_eq!(entries_at(&n.conf.join(name)), 0, "cleanup found it too");
}

#[test]
fn names_sort_as_bytes_as_the_runtime_sorts_them() {
    let n = Node::new("bytesort");
    // Bytewise (Go's sort.Strings) 0x80 sorts before 0xc3 (é); spelled through UTF-8 with U+FFFD (ef bf bd)
    // it would sort after.
    let raw = OsStr::from_bytes(b"10-a\x80.conflist");
    let utf8 = OsStr::from_bytes("10-aé.conflist".as_bytes());
    atomic_write(
        &n.conf.join(raw),
        list_text("raw-net", "ptp").as_bytes(),
        0o644,
    );
    atomic_write(
        &n.conf.join(utf8),
        list_text("utf8-net", "bridge").as_bytes(),
        0o644,
    );
    let mut p = n.start(&[]);
    poll_until("ready with our entry in the runtime's file", LONG, || {
        n.ready() && entries_at(&n.conf.join(raw)) == 1
    });
    // The other file is valid too: the runtime falls back to it, so it holds our entry as well.
    poll_until("our entry in the fallback", LONG, || {
        entries_at(&n.conf.join(utf8)) == 1
    });
    p.signal(Signal::SIGTERM);
    assert!(p.wait_exit(LONG).success(), "{}", p.stderr());
}

/// A valid configuration over our 4 MiB read limit (blank padding) sorting first: libcni reads files of
/// any size, so the runtime loads it and it lacks our entry. Before, we skipped it as unreadable and stayed
/// ready with our entry in the next file (the runtime's file without it); now we are not ready while it is
/// there and ready again once it is gone. A sparse file of zeros (no runtime loads it) changes nothing.
#[test]
fn an_oversized_config_the_runtime_may_load_first_makes_us_not_ready() {
    let n = Node::new("oversized");
    n.write("10-ptp.conflist", &list_text("ptp-net", "ptp"));
    let mut p = n.start(&[]);
    n.settle_ready(&p, "initial");
    // Zeros: Go's json rejects the first byte, so the runtime skips it as we do.
    let zeros = std::fs::File::create(n.conf.join("01-zeros.conflist")).unwrap();
    zeros.set_len(1 << 30).unwrap();
    drop(zeros);
    // Its events make us re-check (not ready for that moment): wait them out, then we must be ready
    // with the entry where it was, the zeros never taken for a candidate the runtime may load.
    std::thread::sleep(Duration::from_millis(500));
    n.settle_ready(&p, "a sparse file of zeros leaves us ready");
    assert_eq!(n.entries("10-ptp.conflist"), 1);
    assert!(
        !p.stderr().contains("01-zeros.conflist sorts"),
        "{}",
        p.stderr()
    );
    let big =
        list_text("big-net", "bridge").replacen('{', &format!("{{{}", " ".repeat(5 << 20)), 1);
    let t0 = Instant::now();
    n.write("05-big.conflist", &big);
    poll_until("503: the runtime may load 05-big.conflist", LONG, || {
        n.not_ready()
    });
    eprintln!("oversized primary: 503 after {:?}", t0.elapsed());
    stays(
        "stays not ready while it is there",
        Duration::from_secs(1),
        || n.not_ready(),
    );
    assert!(
        p.stderr().contains("05-big.conflist"),
        "the log names the file:\n{}",
        p.stderr()
    );
    std::fs::remove_file(n.conf.join("05-big.conflist")).unwrap();
    poll_until("ready again once it is gone", LONG, || {
        n.ready() && n.entries("10-ptp.conflist") == 1
    });
    p.signal(Signal::SIGTERM);
    assert!(p.wait_exit(LONG).success(), "{}", p.stderr());
}
