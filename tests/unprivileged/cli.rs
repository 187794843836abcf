//! The multicall front end, exec'd for real: applet dispatch on argv[0] and on the first argument,
//! `--list`, `--version`, `--help` with the applet's name, and unknown applets.

use crate::support::{our_binary, PluginDir};
use std::process::{Command, Output, Stdio};

/// Runs our binary with argv[0] = `argv0` and `args`, no CNI variables, no stdin.
fn run(argv0: &str, args: &[&str]) -> Output {
    use std::os::unix::process::CommandExt;
    Command::new(our_binary())
        .arg0(argv0)
        .args(args)
        .env_remove("CNI_COMMAND")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

const APPLETS: [&str; 4] = [
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
