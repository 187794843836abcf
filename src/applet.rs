//! What every applet's entry point shares: the version line and argh parsing with Go's exit codes. A
//! leaf: the applets use it, and the multicall dispatch in [`crate::cli`] uses them.

use crate::cni::version::SUPPORTED;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

static START: OnceLock<Instant> = OnceLock::new();

/// Marks the process's start: an applet's entry point calls it first (later calls change nothing).
pub fn mark_start() -> Instant {
    *START.get_or_init(Instant::now)
}

/// Time since [`mark_start`] (since the first call of either, when the entry point did not mark it).
pub fn since_start() -> Duration {
    mark_start().elapsed()
}

/// `<applet> <version> (commit <sha>; <target triple>; <rustc -V>); CNI spec versions: ...`: what a
/// rebuild needs to reproduce this binary (build.rs records the commit, target and compiler).
pub fn version_text(applet: &str) -> String {
    format!(
        "{applet} {} (commit {}; {}; {}); CNI spec versions: {}",
        env!("CARGO_PKG_VERSION"),
        env!("GIT_COMMIT"),
        env!("BUILD_TARGET"),
        env!("RUSTC_VERSION"),
        SUPPORTED.join(", ")
    )
}

/// Exit code of a bad invocation in every applet: an unknown flag, a missing or malformed value, a
/// setting (flag or environment variable) that is invalid. Nothing was done.
pub const EXIT_USAGE: i32 = 2;

/// Writes `text` to stdout and returns `code`. A reader that went away (`| head -1`: EPIPE) is a normal
/// end, not an error: the rest was not wanted. Any other failure (a full disk under `> file`) is reported
/// and gives 1. Never panics, unlike `print!`, so every applet's output goes through here.
pub fn print_out(applet: &str, text: &str, code: i32) -> i32 {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => code,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => code,
        Err(e) => {
            print_err(&format!("{applet}: write to stdout: {e}\n"));
            1
        }
    }
}

/// Writes `text` to stderr; a failure is ignored (there is nowhere left to report it). Never panics,
/// unlike `eprint!`.
pub fn print_err(text: &str) {
    use std::io::Write;
    let _ = std::io::stderr().lock().write_all(text.as_bytes());
}

/// A bad invocation: `<applet>: <what> (try '<applet> --help')` on stderr; returns [`EXIT_USAGE`].
pub fn usage_error(applet: &str, what: &str) -> i32 {
    let what = what.trim_end().trim_end_matches('.');
    // argh's messages start with a capital ("Unrecognized argument: --x"); ours continue the line.
    let mut c = what.chars();
    let what = match c.next() {
        Some(f) if f.is_ascii_uppercase() && !c.next().is_some_and(|n| n.is_ascii_uppercase()) => {
            format!("{}{}", f.to_ascii_lowercase(), &what[1..])
        }
        _ => what.to_string(),
    };
    print_err(&format!("{applet}: {what} (try '{applet} --help')\n"));
    EXIT_USAGE
}

/// An error that ends an applet whose logging runs: one error log line (under `target`'s scope), or one
/// plain `<applet>: <error>` line when logging would drop it (its level is `none`). Never both.
pub fn fatal(applet: &str, target: &str, e: &dyn std::fmt::Display) {
    if log::log_enabled!(target: target, log::Level::Error) {
        log::error!(target: target, "{e}");
    } else {
        print_err(&format!("{applet}: {e}\n"));
    }
}

/// The version line on stdout ([`version_text`]); returns the exit code.
pub fn print_version(applet: &str) -> i32 {
    print_out(applet, &format!("{}\n", version_text(applet)), 0)
}

/// An applet's flags: its normalized arguments (`Err`: why they are not) parsed with argh, `name` shown in
/// `--help`. `Err(code)` when that ended the run: a usage error on stderr ([`usage_error`],
/// [`EXIT_USAGE`]), help on stdout (0), or the version line when `version` says it was asked for.
pub fn parse_args<T: argh::FromArgs>(
    name: &str,
    args: Result<Vec<String>, String>,
    version: fn(&T) -> bool,
) -> Result<T, i32> {
    let args = args.map_err(|e| usage_error(name, &e))?;
    let strs: Vec<&str> = args.iter().map(String::as_str).collect();
    let parsed = T::from_args(&[name], &strs).map_err(|early| match early.status {
        Ok(()) => print_out(name, &early.output, 0),
        Err(()) => usage_error(name, &early.output),
    })?;
    match version(&parsed) {
        true => Err(print_version(name)),
        false => Ok(parsed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_text_names_everything() {
        let v = version_text("istio-cni");
        assert!(v.starts_with("istio-cni "));
        assert!(v.contains("commit"));
        assert!(
            v.contains(env!("BUILD_TARGET")) && v.contains("; rustc 1."),
            "{v}"
        );
        assert!(v.contains("1.1.0") && v.contains("0.1.0"));
    }
}
