//! The multicall front end, exec'd for real: applet dispatch on argv[0] and on the first argument,
//! `--list`, `--version`, `--help` with the applet's name, and unknown applets; every applet's bad-flag
//! convention and boolean forms (its help: `cli_help`).

use crate::cli_help::{help, options_of};
use crate::support::{our_binary, PluginDir};
use std::process::{Command, Output, Stdio};

/// Runs our binary with argv[0] = `argv0` and `args`, no CNI variables, no stdin.
pub fn run(argv0: &str, args: &[&str]) -> Output {
    use std::os::unix::process::CommandExt;
    Command::new(our_binary())
        .arg0(argv0)
        .args(args)
        .env_remove("CNI_COMMAND")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

pub const APPLETS: [&str; 4] = [
    "istio-cni",
    "install-cni",
    "istio-cni-repair",
    "istio-validation",
];

#[test]
fn list_names_every_applet() {
    let o = run("istio-cni-node", &["--list"]);
    assert!(o.status.success(), "{o:?}");
    let listed: Vec<String> = text(&o.stdout).lines().map(str::to_string).collect();
    for a in APPLETS {
        assert!(
            listed.iter().any(|l| l == a),
            "--list lacks {a}: {listed:?}"
        );
    }
}

#[test]
fn version_names_commit_and_cni_versions() {
    for (argv0, args) in [
        ("istio-cni-node", vec!["--version"]),
        ("/some/dir/istio-cni-node", vec!["--version"]),
        ("istio-cni-node", vec!["istio-cni", "--version"]),
        ("istio-cni", vec!["--version"]),
    ] {
        let o = run(argv0, &args);
        assert!(o.status.success(), "{argv0} {args:?}: {o:?}");
        let out = text(&o.stdout);
        assert!(out.contains("commit"), "{argv0} {args:?}: {out}");
        // What a rebuild needs: the target triple and the compiler (build.rs records both).
        assert!(
            out.contains(&format!("; {}; rustc 1.", env!("BUILD_TARGET"))),
            "{argv0} {args:?}: no target triple and rustc version: {out}"
        );
        for v in [
            "0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0",
        ] {
            assert!(out.contains(v), "{argv0} {args:?} lacks {v}: {out}");
        }
    }
}

#[test]
fn applet_help_shows_the_applet_name() {
    for a in APPLETS {
        let o = run("istio-cni-node", &[a, "--help"]);
        let all = text(&o.stdout) + &text(&o.stderr);
        assert!(all.contains(a), "{a} --help does not name {a}: {all}");
        assert!(all.contains("Usage"), "{a} --help: {all}");
    }
}

#[test]
fn applet_by_link_name() {
    // A symlink named after the applet, as installed on a node, runs that applet.
    let dir = PluginDir::new();
    let o = Command::new(dir.istio_cni())
        .arg("--version")
        .env_remove("CNI_COMMAND")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    assert!(text(&o.stdout).starts_with("istio-cni "), "{o:?}");
}

#[test]
fn unknown_applet_fails() {
    let o = run("istio-cni-node", &["no-such-applet"]);
    assert!(!o.status.success(), "{o:?}");
    assert!(text(&o.stdout).is_empty(), "{o:?}");
    assert!(text(&o.stderr).contains("no-such-applet"), "{o:?}");
}

#[test]
fn no_arguments_under_the_multicall_name_prints_usage_and_fails() {
    let o = run("istio-cni-node", &[]);
    assert!(!o.status.success(), "{o:?}");
    let err = text(&o.stderr);
    for a in APPLETS {
        assert!(err.contains(a), "usage lacks {a}: {err}");
    }
}

/// A bad flag in any applet: one line `<applet>: <what> (try '<applet> --help')` on stderr, exit 2
/// (`istio-validation`: 255, upstream `istio-iptables`' code), and nothing on stdout; the same for a bad
/// value.
#[test]
fn bad_flags_have_one_convention() {
    let cases: &[(&str, &[&str], &str)] = &[
        ("istio-cni-node", &["--bogus"], "unknown applet \"--bogus\""),
        ("istio-cni", &["--bogus"], "unrecognized argument: --bogus"),
        (
            "istio-cni",
            &["explain", "--bogus"],
            "unrecognized argument: --bogus",
        ),
        (
            "install-cni",
            &["--bogus"],
            "unrecognized argument: --bogus",
        ),
        (
            "istio-cni-repair",
            &["--bogus"],
            "unrecognized argument: --bogus",
        ),
        (
            "istio-validation",
            &["--bogus"],
            "unrecognized argument: --bogus",
        ),
        ("install-cni", &["--monitoring-port=x"], "--monitoring-port"),
        ("install-cni", &["--once=maybe"], "--once"),
        (
            "istio-cni-repair",
            &["--label-pods", "maybe"],
            "--label-pods",
        ),
        (
            "istio-cni-repair",
            &["--monitoring-port", "x"],
            "--monitoring-port",
        ),
        (
            "istio-validation",
            &["--probe-timeout", "soon"],
            "--probe-timeout",
        ),
        (
            "istio-validation",
            &["--run-validation=maybe"],
            "run-validation",
        ),
    ];
    for (applet, args, what) in cases {
        let o = run(applet, args);
        let err = text(&o.stderr);
        let want = if *applet == "istio-validation" {
            255
        } else {
            2
        };
        assert_eq!(o.status.code(), Some(want), "{applet} {args:?}: {err}");
        assert!(o.stdout.is_empty(), "{applet} {args:?}: {o:?}");
        assert_eq!(err.lines().count(), 1, "{applet} {args:?}: {err}");
        // A flag is called a flag, not an environment variable.
        assert!(!err.contains("environment variable --"), "{err}");
        assert!(
            err.starts_with(&format!("{applet}: "))
                && err.contains(what)
                && err.ends_with(&format!(" (try '{applet} --help')\n")),
            "{applet} {args:?}: {err}"
        );
    }
}

/// Every boolean flag of every applet (those whose help shows `[default: true]` or `[default: false]`)
/// takes the same forms: bare, `--flag=false` and `--flag false`; a value that is no boolean is refused,
/// naming the flag.
#[test]
fn boolean_flags_take_the_same_forms_everywhere() {
    // The forms the issue met: a value as the next argument, a bare boolean, Istio's underscore spelling.
    for (a, args) in [
        (
            "istio-cni-repair",
            &["--repair-run-as-daemon", "false", "--version"][..],
        ),
        ("istio-cni-repair", &["--run-as-daemon", "0", "--version"]),
        ("install-cni", &["--chained-cni-plugin", "--version"]),
        ("install-cni", &["--log_as_json=false", "--version"]),
        ("install-cni", &["--once", "false", "--version"]),
    ] {
        let o = run(a, args);
        assert!(o.status.success(), "{a} {args:?}: {o:?}");
    }
    let mut n = 0;
    for a in ["install-cni", "istio-cni-repair", "istio-validation"] {
        let h = help(&[a, "--help"]);
        for (names, desc) in options_of(&h) {
            if !desc.ends_with("[default: true]") && !desc.ends_with("[default: false]") {
                continue;
            }
            let flag = names.rsplit(", ").next().unwrap();
            for form in [
                vec![flag.to_string()],
                vec![format!("{flag}=false")],
                vec![flag.to_string(), "false".into()],
                vec![flag.to_string(), "true".into()],
            ] {
                let mut args: Vec<&str> = form.iter().map(String::as_str).collect();
                args.push("--version");
                let o = run(a, &args);
                assert!(
                    o.status.success() && text(&o.stdout).starts_with(a),
                    "{a} {args:?}: {o:?}"
                );
            }
            let o = run(a, &[&format!("{flag}=maybe")]);
            let err = text(&o.stderr);
            let want = if a == "istio-validation" { 255 } else { 2 };
            assert_eq!(o.status.code(), Some(want), "{a} {flag}=maybe: {err}");
            assert!(err.contains(flag) && err.contains("maybe"), "{a}: {err}");
            n += 1;
        }
    }
    assert!(n >= 20, "only {n} boolean flags found");
}

/// `explain --nft false` is the iptables output, `--nft` (and `--nft true`) the nftables script.
#[test]
fn explain_nft_takes_a_value() {
    let pod = crate::support::conformance_dir().join("pod/basic/pod.json");
    let pod = pod.to_str().unwrap();
    let out = |extra: &[&str]| {
        let mut args = vec!["explain", "--pod", pod];
        args.extend_from_slice(extra);
        let o = run("istio-cni", &args);
        assert!(o.status.success(), "{args:?}: {o:?}");
        text(&o.stdout)
    };
    let (plain, f, nft, t) = (
        out(&[]),
        out(&["--nft", "false"]),
        out(&["--nft"]),
        out(&["--nft=true"]),
    );
    assert!(
        plain.contains("\n-N ISTIO_INBOUND\n") && nft.starts_with("add table inet "),
        "{plain}\n{nft}"
    );
    assert_eq!((f, t), (plain, nft));
}
