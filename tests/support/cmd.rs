//! Running a host command from a test: std only, so that the dev crates outside this tree (tests/cri)
//! include the same file (`#[path]`) instead of keeping their own copy.

use std::ffi::OsStr;
use std::process::{Command, Output, Stdio};

/// Runs a command (inheriting the test's environment) and returns its output; panics if it cannot start.
pub fn sh<S: AsRef<OsStr>>(prog: &str, args: &[S]) -> Output {
    Command::new(prog)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("exec {prog}: {e}"))
}

/// Like [`sh`] but panics (with stderr) unless it exits 0; returns stdout.
pub fn sh_ok<S: AsRef<OsStr>>(prog: &str, args: &[S]) -> String {
    let o = sh(prog, args);
    if !o.status.success() {
        let a: Vec<String> = args
            .iter()
            .map(|a| a.as_ref().to_string_lossy().into_owned())
            .collect();
        panic!(
            "{prog} {} failed ({}):\n{}{}",
            a.join(" "),
            o.status,
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
    }
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// An `iptables-save` dump without its comment lines and chain counters (`:CHAIN POLICY [packets:bytes]`),
/// for comparing two dumps.
pub fn without_counters(dump: &str) -> String {
    dump.lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| {
            if l.starts_with(':') {
                l.split(" [").next().unwrap_or(l)
            } else {
                l
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}
