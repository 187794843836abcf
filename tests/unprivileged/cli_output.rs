//! Every output path of every applet with its reader gone: stdout (or stderr) a pipe whose read end is
//! closed before the process starts, so every write fails with EPIPE. A closed stdout is a normal exit
//! with the code the run would have had, never a panic (`print!` panics on EPIPE: exit 101, or 134 with
//! the release profile's abort).

use crate::support::{conformance_dir, our_binary};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};

/// A pipe's write end whose read end is already closed.
fn closed_pipe() -> Stdio {
    let (r, w) = nix::unistd::pipe().unwrap();
    drop(r);
    Stdio::from(w)
}

/// Runs `argv0 args` with stdout (or, `on_stderr`, stderr) a closed pipe and `stdin` fed in; returns the
/// exit code and what went to the other stream.
fn run_closed(
    argv0: &str,
    args: &[&str],
    env: &[(&str, &str)],
    stdin: &str,
    on_stderr: bool,
) -> (Option<i32>, String) {
    use std::io::Write;
    let mut c = Command::new(our_binary());
    c.arg0(argv0)
        .args(args)
        .env_remove("CNI_COMMAND")
        .envs(env.iter().copied());
    c.stdin(Stdio::piped());
    if on_stderr {
        c.stdout(Stdio::piped()).stderr(closed_pipe());
    } else {
        c.stdout(closed_pipe()).stderr(Stdio::piped());
    }
    let mut child = c.spawn().unwrap();
    let mut input = child.stdin.take().unwrap();
    let _ = input.write_all(stdin.as_bytes());
    drop(input);
    let o = child.wait_with_output().unwrap();
    let other = if on_stderr { &o.stdout } else { &o.stderr };
    (o.status.code(), String::from_utf8_lossy(other).into_owned())
}

/// argv[0], arguments, environment, stdin, the exit code wanted.
type Case<'a> = (
    &'a str,
    &'a [&'a str],
    &'a [(&'a str, &'a str)],
    &'a str,
    i32,
);

#[test]
fn a_closed_stdout_is_a_normal_exit() {
    let pod = conformance_dir().join("pod/basic/pod.json");
    let pod = pod.to_str().unwrap();
    let version_conf = r#"{"cniVersion":"1.0.0","name":"n","type":"istio-cni"}"#;
    let cases: &[Case] = &[
        ("istio-cni-node", &["--list"], &[], "", 0),
        ("istio-cni-node", &["--version"], &[], "", 0),
        ("istio-cni-node", &["--help"], &[], "", 0),
        ("istio-cni", &["--help"], &[], "", 0),
        ("istio-cni", &["--version"], &[], "", 0),
        ("istio-cni", &["explain", "--help"], &[], "", 0),
        ("istio-cni", &["explain", "--pod", pod], &[], "", 0),
        ("istio-cni", &["explain", "--pod", pod, "--nft"], &[], "", 0),
        // The plugin's reply to the runtime.
        (
            "istio-cni",
            &[],
            &[("CNI_COMMAND", "VERSION")],
            version_conf,
            0,
        ),
        ("install-cni", &["--help"], &[], "", 0),
        ("install-cni", &["--version"], &[], "", 0),
        ("istio-cni-repair", &["--help"], &[], "", 0),
        ("istio-cni-repair", &["--version"], &[], "", 0),
        ("istio-validation", &["--help"], &[], "", 0),
        ("istio-validation", &["--version"], &[], "", 0),
    ];
    for (argv0, args, env, stdin, want) in cases {
        let (code, err) = run_closed(argv0, args, env, stdin, false);
        assert_eq!(code, Some(*want), "{argv0} {args:?} {env:?}: {err}");
        assert!(!err.contains("panicked"), "{argv0} {args:?}: {err}");
    }
}

/// The same with stderr closed, for the paths that write there: a bad flag still exits 2 (`istio-validation`
/// 255, as upstream), a bare plugin 0.
#[test]
fn a_closed_stderr_is_no_panic_either() {
    for (argv0, args, want) in [
        ("istio-cni-node", &["--bogus"][..], 2),
        ("istio-cni-node", &[], 2),
        ("istio-cni", &[], 0),
        ("istio-cni", &["--bogus"], 2),
        ("istio-cni", &["explain"], 2),
        ("install-cni", &["--bogus"], 2),
        ("install-cni", &["--monitoring-port=x"], 2),
        ("istio-cni-repair", &["--bogus"], 2),
        ("istio-validation", &["--bogus"], 255),
    ] {
        let (code, out) = run_closed(argv0, args, &[], "", true);
        assert_eq!(code, Some(want), "{argv0} {args:?}: {out}");
        assert!(out.is_empty(), "{argv0} {args:?}: {out}");
    }
}
