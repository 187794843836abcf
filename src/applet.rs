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

/// Parses an applet's arguments with argh, `name` shown in `--help`. `Err(code)` when parsing ended the run:
/// help printed on stdout (0) or a usage error on stderr (2).
pub fn parse_args<T: argh::FromArgs>(name: &str, args: &[String]) -> Result<T, i32> {
    let strs: Vec<&str> = args.iter().map(String::as_str).collect();
    T::from_args(&[name], &strs).map_err(|early| match early.status {
        Ok(()) => {
            println!("{}", early.output);
            0
        }
        Err(()) => {
            eprintln!("{}", early.output);
            2
        }
    })
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
