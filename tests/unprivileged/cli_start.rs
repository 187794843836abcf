//! What an operator sees when an applet starts: a start that fails leaves nothing behind and says why
//! once; log lines read like upstream's (`<time>\t<level>\t<scope>\t<msg>`).

use crate::support::install::node::{list_text, Node, LONG};
use crate::support::install::{names, spawn_installer};
use crate::support::our_binary;
use std::fs;
use std::process::Command;

/// Runs `install-cni <args>` on `n` with `extra` on top of its environment; returns the exit code and
/// the stderr.
fn install(n: &Node, extra: &[(&str, &str)], args: &[&str]) -> (Option<i32>, String) {
    let mut p = spawn_installer(&n.env(extra), args, &n.root.join("stderr"));
    let st = p.wait_exit(LONG);
    (st.code(), p.stderr())
}

/// Lines of `err` that contain `what`.
fn count(err: &str, what: &str) -> usize {
    err.lines().filter(|l| l.contains(what)).count()
}

/// Extra environment, arguments, and what the one error line names.
type Start<'a> = (Vec<(&'a str, &'a str)>, Vec<&'a str>, &'a str);

/// Every check that can be made before the first write is made first: a one-shot run with a conf dir
/// that is not there, a missing bin dir, a kubeconfig that cannot be written: each fails at once, leaving
/// no directory, record, binary or kubeconfig behind, and says why in one line.
#[test]
fn a_failed_start_leaves_nothing_behind() {
    let n = Node::new("failedstart");
    let (run, bin) = (n.root.join("run-new"), n.root.join("bin"));
    let run_s = run.to_str().unwrap().to_string();
    fs::remove_dir(&n.conf).unwrap();
    let conf_s = n.conf.to_str().unwrap().to_string();
    let missing_bin = n.root.join("no-bin");
    let cases: Vec<Start> = vec![
        // A one-shot run cannot wait for a conf dir to appear: a missing one is a wrong path.
        (
            vec![("WAIT_TIMEOUT", "2s")],
            vec!["--once"],
            conf_s.as_str(),
        ),
        // The daemon would create the conf and run dirs, but the bin dir is not there.
        (
            vec![("CNI_BIN_DIR", missing_bin.to_str().unwrap())],
            vec![],
            "bin dir",
        ),
        (
            vec![("KUBERNETES_SERVICE_HOST", "")],
            vec![],
            "KUBERNETES_SERVICE_HOST",
        ),
    ];
    for (mut env, args, what) in cases {
        env.push(("CNI_AGENT_RUN_DIR", &run_s));
        let (code, err) = install(&n, &env, &args);
        assert_eq!(code, Some(1), "{env:?} {args:?}: {err}");
        assert!(
            !n.conf.exists(),
            "{env:?} {args:?}: conf dir created\n{err}"
        );
        assert!(!run.exists(), "{env:?} {args:?}: run dir created\n{err}");
        assert!(
            names(&bin).is_empty(),
            "{env:?} {args:?}: {:?}",
            names(&bin)
        );
        assert_eq!(count(&err, what), 1, "{env:?} {args:?}: said once?\n{err}");
    }
    // The kubeconfig case again with the conf dir there: still nothing written into it.
    fs::create_dir(&n.conf).unwrap();
    n.write("10-net.conflist", &list_text("net", "ptp"));
    let (code, err) = install(&n, &[("KUBERNETES_SERVICE_HOST", "")], &["--once"]);
    assert_eq!(code, Some(1), "{err}");
    assert_eq!(names(&n.conf), ["10-net.conflist"], "{err}");
    assert_eq!(n.entries("10-net.conflist"), 0, "{err}");
    assert!(
        names(&bin).is_empty() && names(&n.root.join("run")).is_empty(),
        "{err}"
    );
}

/// Whether `line` is an upstream-style log line: RFC 3339 UTC time with microseconds, a lower-case level,
/// a scope unless it is `default`, the message; no module path.
fn upstream_style(line: &str) -> bool {
    let f: Vec<&str> = line.splitn(4, '\t').collect();
    let time = f[0].as_bytes();
    let time_ok = time.len() == 27
        && time[4] == b'-'
        && time[10] == b'T'
        && time[19] == b'.'
        && time[26] == b'Z'
        && f[0][..4].bytes().all(|b| b.is_ascii_digit());
    let level_ok = f.len() >= 3 && ["debug", "info", "warn", "error"].contains(&f[1]);
    let scope_ok =
        f.len() < 4 || ["install", "repair", "cni-plugin"].contains(&f[2]) || f[2].contains(' ');
    time_ok && level_ok && scope_ok && !line.contains("istio_cni::")
}

/// The installer's lines (install scope, default scope) and the repair agent's read like upstream's.
#[test]
fn log_lines_read_like_upstreams() {
    let n = Node::new("loglines");
    n.write("10-net.conflist", &list_text("net", "ptp"));
    let (code, err) = install(&n, &[], &["--once"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(err.lines().count() >= 3, "{err}");
    for l in err.lines() {
        assert!(upstream_style(l), "not upstream's format: {l:?}\n{err}");
    }
    assert!(
        err.lines().any(|l| l.contains("\tinfo\tinstall\t")),
        "no install-scope line:\n{err}"
    );
    assert!(!err.contains("Some(") && !err.contains("None"), "{err}");
}

/// The repair agent outside a pod, without a kubeconfig: one error line that says what to give it.
#[test]
fn repair_outside_a_pod_says_once_what_to_give_it() {
    let o = Command::new(our_binary())
        .args(["istio-cni-repair", "--repair-node-name=n", "--label-pods"])
        .env_clear()
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert_eq!(count(&err, "KUBERNETES_SERVICE_HOST"), 1, "{err}");
    let line = err
        .lines()
        .find(|l| l.contains("KUBERNETES_SERVICE_HOST"))
        .unwrap();
    assert!(
        line.contains("--kubeconfig") && line.contains("KUBECONFIG"),
        "{line}"
    );
    assert!(upstream_style(line), "{line}");
}
