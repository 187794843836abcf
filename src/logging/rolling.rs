//! The plugin's rolling log file, `<cni_agent_run_dir>/istio-cni.log`, as upstream's plugin keeps it
//! (`pkg/log` `WithTeeToRollingLocal`: lumberjack, 10 MiB, one backup, 2 days, zap's JSON at info and up).
//!
//! The file is opened once per process when the plugin has read its configuration ([`attach`]):
//! `O_WRONLY|O_APPEND|O_CREAT|O_CLOEXEC|O_NOFOLLOW|O_NONBLOCK`, mode 0600, in the run dir only when that
//! directory exists (it is never created). Each info, warn or error line is one `write(2)` of Istio's JSON
//! line and a newline: `O_APPEND` keeps the lines of plugin processes running at once whole.
//!
//! **Rotation** is decided at open only (one `fstat`): a file of 10 MiB or more is renamed to
//! `istio-cni-<UTC 2006-01-02T15-04-05.000>.log` (lumberjack's backup name) and a fresh file opened. A
//! process writes a handful of lines, so the file passes the limit by at most one process's lines. Many
//! plugins may open a full file at once: each tries an exclusive `flock` on its descriptor without waiting;
//! the one that gets it renames only while the path still names the inode it opened (same device and
//! inode), so one rotation happens; one that finds the inode changed opens the path again, one that finds
//! the lock held keeps writing to the file it has (about to become the backup). The rotating process then
//! removes every `istio-cni-*.log` backup but the newest, and any older than 2 days (by the time in the
//! name, as lumberjack).
//!
//! Nothing about the file can fail or hold up the CNI command: a failure to open or rotate is at most one
//! warning line (a missing run dir none), a failed write is dropped.

use log::Level;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Size at which the file is rotated (lumberjack's `MaxSize: 10`, megabytes of 1024 × 1024 bytes).
pub const MAX_SIZE: u64 = 10 * 1024 * 1024;
/// Backups older than this are removed (`MaxAge: 2`, days).
pub const MAX_AGE: Duration = Duration::from_secs(2 * 86_400);
/// The least severe level written (upstream's `zap.InfoLevel`).
pub const MIN_LEVEL: Level = Level::Info;

/// This process's file, once [`attach`] opened it.
static FILE: OnceLock<File> = OnceLock::new();

/// Opens `<run_dir>/istio-cni.log` for this process's lines (once; later calls do nothing).
pub fn attach(run_dir: &str) {
    if FILE.get().is_some() {
        return;
    }
    let path = crate::rundir::RunDir::new(run_dir).plugin_log();
    let (file, problem) = open(&path, SystemTime::now());
    if let Some(f) = file {
        let _ = FILE.set(f);
    }
    if let Some(p) = problem {
        log::warn!("log file {}: {p}; lines go to stderr only", path.display());
    }
}

/// Whether this process writes a log file ([`attach`] opened one).
pub fn attached() -> bool {
    FILE.get().is_some()
}

/// Writes `line` (Istio's JSON line) to this process's file, if any, when `level` is info or more severe.
pub fn record(level: Level, line: &str) {
    if let Some(f) = FILE.get() {
        append(f, level, line);
    }
}

/// One `write(2)` of `line` and a newline, for info, warn and error; a failure is dropped.
fn append(mut f: &File, level: Level, line: &str) -> bool {
    if level > MIN_LEVEL {
        return false;
    }
    let mut buf = Vec::with_capacity(line.len() + 1);
    buf.extend_from_slice(line.as_bytes());
    buf.push(b'\n');
    f.write(&buf).is_ok()
}

fn open_path(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    // A FIFO put there must not hold the ADD (O_NONBLOCK: no reader is ENXIO, not a wait); a link put
    // there is not followed.
    let f = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK)
        .open(path)?;
    Ok(f)
}

fn id_of(m: &std::fs::Metadata) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    (m.dev(), m.ino())
}

/// The file at `path` ready for appending, rotated first when it holds [`MAX_SIZE`] or more, and what went
/// wrong (to be logged once). A missing directory is no problem: no file, nothing to say.
pub fn open(path: &Path, now: SystemTime) -> (Option<File>, Option<String>) {
    let f = match open_path(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return (None, None),
        Err(e) => return (None, Some(format!("cannot open: {e}"))),
    };
    let meta = match f.metadata() {
        Ok(m) => m,
        Err(e) => return (None, Some(format!("cannot stat: {e}"))),
    };
    if !meta.is_file() {
        return (None, Some("not a regular file".into()));
    }
    if meta.len() < MAX_SIZE {
        return (Some(f), None);
    }
    rotate(f, meta, path, now)
}

/// Renames the full file `f` (whose metadata is `meta`) at `path` to its backup name and opens a fresh one,
/// unless another process holds the lock (keeps `f`) or already rotated it (opens the path again).
fn rotate(
    f: File,
    meta: std::fs::Metadata,
    path: &Path,
    now: SystemTime,
) -> (Option<File>, Option<String>) {
    use nix::fcntl::{Flock, FlockArg};
    let lock = match Flock::lock(f, FlockArg::LockExclusiveNonblock) {
        Ok(l) => l,
        // Another process is rotating it: this one's lines land in the backup.
        Err((f, _)) => return (Some(f), None),
    };
    let still_ours = std::fs::symlink_metadata(path).is_ok_and(|m| id_of(&m) == id_of(&meta));
    if still_ours {
        if let Err(e) = std::fs::rename(path, backup_name(path, now)) {
            let f = lock.unlock().ok();
            return (f, Some(format!("cannot rotate: {e}")));
        }
    }
    let reopened = match open_path(path) {
        Ok(f) => (Some(f), None),
        Err(e) => (None, Some(format!("cannot open after rotation: {e}"))),
    };
    if still_ours {
        if let Some(dir) = path.parent() {
            prune(dir, path, now);
        }
    }
    drop(lock);
    reopened
}

/// `istio-cni.log` → (`istio-cni-`, `.log`): what a backup name starts and ends with.
fn backup_parts(path: &Path) -> (String, String) {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    match name.rfind('.') {
        Some(i) if i > 0 => (format!("{}-", &name[..i]), name[i..].to_string()),
        _ => (format!("{name}-"), String::new()),
    }
}

/// lumberjack's backup time: UTC `2006-01-02T15-04-05.000`.
fn backup_time(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let date_time = super::line::utc_date_time(d.as_secs()).replace(':', "-");
    format!("{date_time}.{:03}", d.subsec_millis())
}

/// The backup name for a rotation at `now`: `istio-cni-2026-11-29T17-10-05.123.log` beside `path`.
pub fn backup_name(path: &Path, now: SystemTime) -> PathBuf {
    let (head, ext) = backup_parts(path);
    path.with_file_name(format!("{head}{}{ext}", backup_time(now)))
}

/// The time part of a backup's name, when `name` is one (`YYYY-MM-DDTHH-MM-SS.mmm`, fixed width, so the
/// names sort as the times do).
fn backup_stamp<'a>(name: &'a str, head: &str, ext: &str) -> Option<&'a str> {
    let t = name.strip_prefix(head)?.strip_suffix(ext)?;
    let shape = "0000-00-00T00-00-00.000";
    let fits = t.len() == shape.len()
        && t.bytes().zip(shape.bytes()).all(|(c, s)| {
            if s == b'0' {
                c.is_ascii_digit()
            } else {
                c == s
            }
        });
    fits.then_some(t)
}

/// Removes the backups of `path` in `dir` but the newest, and any older than [`MAX_AGE`] at `now`.
pub fn prune(dir: &Path, path: &Path, now: SystemTime) {
    let (head, ext) = backup_parts(path);
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut backups: Vec<(String, PathBuf)> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let stamp = backup_stamp(&name, &head, &ext)?.to_string();
            Some((stamp, e.path()))
        })
        .collect();
    backups.sort_by(|a, b| b.0.cmp(&a.0));
    let cutoff = backup_time(now.checked_sub(MAX_AGE).unwrap_or(UNIX_EPOCH));
    for (i, (stamp, p)) in backups.iter().enumerate() {
        if i >= 1 || *stamp < cutoff {
            let _ = std::fs::remove_file(p);
        }
    }
}

#[cfg(test)]
#[path = "rolling_tests.rs"]
mod tests;
