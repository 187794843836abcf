//! The installer process injects into the file the container runtime uses when that choice rests on Go's
//! `encoding/json` rules (issue 23 H3): Unicode case folding of field names, the last of several
//! case-insensitive keys, nesting deeper than 64 (Go reads 10,000). Which file the runtime uses is written
//! down here by name (each document's verdict checked with Go 1.19, as in `src/install/config/libcni/vectors.json`),
//! never asked of our own selection code. The deep documents are read on the installer's main thread.

use crate::support::install::node::*;
use crate::support::poll_until;
use nix::sys::signal::Signal;
use std::time::Duration;

/// A list nesting `depth` levels in all, its one plugin `ptp`.
fn nested_list(depth: usize) -> String {
    let inner = depth - 3;
    format!(
        r#"{{"name":"deep","cniVersion":"1.0.0","plugins":[{{"type":"ptp","x":{}{}}}]}}"#,
        "[".repeat(inner),
        "]".repeat(inner)
    )
}

/// Starts the installer on `first` (sorting before `10-ptp.conflist`) and waits until it is ready with
/// our entry in `want`. When `want` is `00-first.conflist` (the runtime loads it), `10-ptp.conflist` is
/// the file it falls back to and holds our entry too (issue 32); when the runtime skips `00-first`, that
/// file stays untouched.
fn expect_entry_in(tag: &str, first: &str, want: &str) {
    expect_entries(tag, first, want, false);
}

/// As [`expect_entry_in`] with `want` `10-ptp.conflist`, for a `first` that libcni v1.3 skips but v1.1
/// (Debian 12's containerd 1.6 and podman 4.3) loads: it holds our entry too.
fn expect_entry_in_both(tag: &str, first: &str) {
    expect_entries(tag, first, "10-ptp.conflist", true);
}

fn expect_entries(tag: &str, first: &str, want: &str, older_loads_first: bool) {
    let n = Node::new(tag);
    n.write("00-first.conflist", first);
    n.write("10-ptp.conflist", &list_text("ptp-net", "ptp"));
    let mut p = n.start(&[]);
    let other = if want == "10-ptp.conflist" {
        "00-first.conflist"
    } else {
        "10-ptp.conflist"
    };
    poll_until(
        &format!("{tag}: ready with our entry in {want}"),
        LONG,
        || n.ready() && n.entries(want) == 1,
    );
    let fallback = want == "00-first.conflist" || older_loads_first;
    poll_until(
        &format!("{tag}: {other} holds our entry only as the runtime's fallback"),
        LONG,
        || n.entries(other) == usize::from(fallback),
    );
    assert_eq!(
        n.entries(other),
        usize::from(fallback),
        "{tag}: {other}:\n{}",
        p.stderr()
    );
    p.signal(Signal::SIGTERM);
    assert!(p.wait_exit(LONG).success(), "{}", p.stderr());
}

/// libcni refuses a plugin whose `cniVerſion` (long s) is a number, so the runtime uses 10-ptp.
#[test]
fn long_s_folds_to_s_as_in_go() {
    expect_entry_in(
        "gofold",
        r#"{"name":"fold","cniVersion":"1.0.0","plugins":[{"type":"ptp","cniVerſion":5}]}"#,
        "10-ptp.conflist",
    );
}

/// libcni decodes a plugin's keys sorted: `Type` comes after `TYPE` and its empty value wins.
#[test]
fn the_last_case_insensitive_key_wins_as_in_go() {
    expect_entry_in(
        "golast",
        r#"{"name":"last","cniVersion":"1.0.0","plugins":[{"TYPE":"ptp","Type":""}]}"#,
        "10-ptp.conflist",
    );
    // `null` leaves the type as `TYPE` set it: the runtime uses this file.
    expect_entry_in(
        "gonull",
        r#"{"name":"null","cniVersion":"1.0.0","plugins":[{"TYPE":"ptp","type":null}]}"#,
        "00-first.conflist",
    );
}

/// 200 levels: the runtime uses the file, and we merge into it.
#[test]
fn a_list_nested_200_deep_is_the_runtime_choice() {
    expect_entry_in("godeep", &nested_list(200), "00-first.conflist");
}

/// 10,001 levels: Go refuses the file and the runtime uses 10-ptp, so do we. 10,000 levels: the runtime
/// uses the file; our merge would print it (indented as upstream) as ~200 MB, so we write nothing and stay
/// not ready rather than inject into 10-ptp, which the runtime does not use.
#[test]
fn go_nesting_limit_on_the_installer_main_thread() {
    expect_entry_in("godeeper", &nested_list(10_001), "10-ptp.conflist");

    let n = Node::new("godeepest");
    n.write("00-first.conflist", &nested_list(10_000));
    n.write("10-ptp.conflist", &list_text("ptp-net", "ptp"));
    let mut p = n.start(&[]);
    poll_until("not ready, saying why", LONG, || {
        n.not_ready() && p.stderr().contains("would be larger than")
    });
    stays(
        "no entry anywhere, still not ready",
        Duration::from_millis(300),
        || n.entries("10-ptp.conflist") == 0 && n.entries("00-first.conflist") == 0 && !n.ready(),
    );
    p.signal(Signal::SIGTERM);
    assert!(p.wait_exit(LONG).success(), "{}", p.stderr());
}

/// libcni 1.3.0 (`NetworkConfFromFile`) also loads the `.conf` files of the directory `<conf dir>/<name>`,
/// so a list's `name` is a path: one holding an escaped NUL (issue 28 H3) is refused by Go's syscalls
/// (EINVAL), one naming a regular file fails with ENOTDIR, and either way the runtime skips the list and
/// uses 10-ptp. With `loadOnlyInlinedPlugins` nothing is read and the list is the runtime's file.
#[test]
fn a_list_whose_name_libcni_cannot_read_as_a_directory_is_skipped() {
    expect_entry_in_both(
        "gonul",
        r#"{"name":"x\u0000","cniVersion":"1.0.0","plugins":[{"type":"ptp"}]}"#,
    );
    expect_entry_in_both(
        "gofile",
        r#"{"name":"10-ptp.conflist","cniVersion":"1.0.0","plugins":[{"type":"ptp"}]}"#,
    );
    expect_entry_in(
        "gonul-inlined",
        r#"{"name":"x\u0000","cniVersion":"1.0.0","loadOnlyInlinedPlugins":true,"plugins":[{"type":"ptp"}]}"#,
        "00-first.conflist",
    );
}
