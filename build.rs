// Records what `--version` prints besides the crate version: the git commit, the target triple and the
// compiler. Nothing here depends on the time or the build directory, so two builds of one commit match.
//
// The commit: $ISTIO_CNI_COMMIT when set (a build from a source tarball can name its commit so), else
// `git rev-parse` when this crate is the root of a git checkout, else "unknown".
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    println!("cargo:rerun-if-env-changed=ISTIO_CNI_COMMIT");
    let commit = match std::env::var("ISTIO_CNI_COMMIT") {
        Ok(c) if !c.trim().is_empty() => c.trim().to_string(),
        _ => git_commit(&dir).unwrap_or_else(|| "unknown".to_string()),
    };
    println!("cargo:rustc-env=GIT_COMMIT={commit}");

    let target = std::env::var("TARGET").unwrap_or_else(|_| "unknown".to_string());
    println!("cargo:rustc-env=BUILD_TARGET={target}");

    // `rustc -V`, e.g. "rustc 1.95.0 (59807616e 2026-04-14)". Cargo reruns this script when rustc changes.
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let rustc_version =
        output(Command::new(rustc).arg("-V")).unwrap_or_else(|| "rustc unknown".to_string());
    println!("cargo:rustc-env=RUSTC_VERSION={rustc_version}");
}

/// HEAD's commit (12 hex digits) when `dir` is the top of a git work tree; also tells cargo which files to
/// watch so that a new commit or checkout rebuilds the version line (HEAD and the branch it points to,
/// wherever git keeps them: a linked worktree has its HEAD apart from the branch refs).
fn git_commit(dir: &Path) -> Option<String> {
    let git = |args: &[&str]| output(Command::new("git").arg("-C").arg(dir).args(args));
    let top = git(&["rev-parse", "--show-toplevel"])?;
    if Path::new(&top).canonicalize().ok()? != dir.canonicalize().ok()? {
        return None; // a source tree unpacked inside some other repository
    }
    let mut watch = vec![git(&["rev-parse", "--git-path", "HEAD"])?];
    watch.extend(git(&["rev-parse", "--git-path", "packed-refs"]));
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watch.extend(git(&["rev-parse", "--git-path", &branch]));
    }
    // Only files that exist: cargo reruns the script on every build while a watched path is missing.
    for p in watch.iter().map(|p| dir.join(p)).filter(|p| p.is_file()) {
        println!("cargo:rerun-if-changed={}", p.display());
    }
    git(&["rev-parse", "--short=12", "HEAD"])
}

/// The trimmed stdout of a command that succeeded with some output.
fn output(cmd: &mut Command) -> Option<String> {
    let o = cmd.output().ok().filter(|o| o.status.success())?;
    let s = String::from_utf8(o.stdout).ok()?.trim().to_string();
    (!s.is_empty()).then_some(s)
}
