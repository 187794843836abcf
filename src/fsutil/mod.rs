//! Crash-safe file operations: atomic write (temp file in the same dir, fsync, rename, fsync of the dir),
//! mode kept or set explicitly (the umask never applies), remove-ignoring-ENOENT. Every error names the path.
//!
//! Temp files are named `<name>.tmp.<pid>.<n>`: never a `.conf`/`.conflist` suffix (kubelet ignores them), and
//! [`is_temp_of`] recognises them (and Go's `<name>.tmp.<digits>`) so a restart can sweep what a crash left.

use crate::error::{IoContext, Result};
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

mod guarded;
pub use guarded::{
    read_config, replace_if_unchanged, stamp, write_target, Stamp, MAX_CONFIG_BYTES,
};

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// Whether a file or peer of `uid` is trusted by a process running as `euid` (pure): root's or its own.
/// What we read or ask as root (the run dir, its sockets, the node's binaries) must be theirs alone.
pub fn trusted_owner(uid: u32, euid: u32) -> bool {
    uid == 0 || uid == euid
}

/// [`trusted_owner`] for this process.
pub fn root_or_us(uid: u32) -> bool {
    trusted_owner(uid, nix::unistd::geteuid().as_raw())
}

/// Whether `mode` lets nobody but the owner write (no group or other write bit).
pub fn owner_writes_only(mode: u32) -> bool {
    mode & 0o022 == 0
}

/// Reads `path` (`what` names it in errors) only if root or this process's user owns it and nobody else
/// may write it ([`root_or_us`], [`owner_writes_only`]), checked on the descriptor the content is read from.
/// For what a root process acts on: another user able to write it could make it say anything.
pub fn read_trusted(path: &Path, what: &str) -> Result<String> {
    use std::io::Read;
    use std::os::unix::fs::MetadataExt;
    let mut f = File::open(path).io_context(|| format!("read {what} {}", path.display()))?;
    let m = f
        .metadata()
        .io_context(|| format!("stat {what} {}", path.display()))?;
    let (uid, mode) = (m.uid(), m.mode() & 0o7777);
    if !root_or_us(uid) || !owner_writes_only(mode) {
        return Err(crate::Error::config(format!(
            "{what} {}: owned by uid {uid} with mode {mode:o}: refusing it, another user could change what \
             it says (it must be root's, or this process's user's, and writable by its owner only)",
            path.display()
        )));
    }
    let mut text = String::new();
    f.read_to_string(&mut text)
        .io_context(|| format!("read {what} {}", path.display()))?;
    Ok(text)
}

/// Whether `name` is a plain file name: not empty, `.` or `..`, without `/` or NUL, so that joined onto a
/// directory it names a file in it.
pub fn is_plain_name(name: &[u8]) -> bool {
    !(name.is_empty() || name == b"." || name == b".." || name.contains(&b'/') || name.contains(&0))
}

/// The directory holding `path` (`.` for a bare name).
fn parent_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// A fresh temp path next to `path`.
pub fn temp_path_for(path: &Path) -> PathBuf {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    parent_of(path).join(format!(
        "{}.tmp.{}.{}",
        file_name(path),
        std::process::id(),
        n
    ))
}

/// True when `candidate` is a temp file of `name`: `<name>.tmp.<digits and dots>`.
pub fn is_temp_of(candidate: &str, name: &str) -> bool {
    match candidate
        .strip_prefix(name)
        .and_then(|r| r.strip_prefix(".tmp."))
    {
        Some(rest) => !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_digit() || b == b'.'),
        None => false,
    }
}

/// The name a temp file belongs to, when `candidate` looks like one of ours (`<name>.tmp.<digits.>`).
pub fn temp_owner(candidate: &str) -> Option<&str> {
    let idx = candidate.rfind(".tmp.")?;
    let (name, _) = candidate.split_at(idx);
    if !name.is_empty() && is_temp_of(candidate, name) {
        Some(name)
    } else {
        None
    }
}

/// fsyncs a directory so a rename or unlink in it is durable.
pub fn fsync_dir(dir: &Path) -> Result<()> {
    let d = File::open(dir).io_context(|| format!("open directory {}", dir.display()))?;
    d.sync_all()
        .io_context(|| format!("fsync directory {}", dir.display()))
}

/// Writes `data` to `path` atomically with exactly `mode`: temp file in the same directory, chmod, write,
/// fsync, rename over `path`, fsync the directory. Readers see the old or the new content, never a mix.
pub fn write_atomic(path: &Path, data: &[u8], mode: u32) -> Result<()> {
    replace_with(path, mode, |f, tmp| {
        f.write_all(data)
            .io_context(|| format!("write temp file {}", tmp.display()))
    })
}

/// Copies the file at `src` to `dst` atomically (same scheme as [`write_atomic`]) with `mode`.
/// Streams the content, so large binaries are never held in memory.
pub fn copy_atomic(src: &Path, dst: &Path, mode: u32) -> Result<()> {
    let mut input = File::open(src).io_context(|| format!("open {}", src.display()))?;
    replace_with(dst, mode, |f, tmp| {
        std::io::copy(&mut input, f)
            .map(|_| ())
            .io_context(|| format!("copy {} to {}", src.display(), tmp.display()))
    })
}

/// The shared scheme: a new temp file next to `path` with `mode`, filled by `fill`, fsynced, renamed over
/// `path`, then the directory fsynced; the temp file is removed on any failure. [`write_atomic`] for a
/// content written piece by piece, never whole in memory.
pub fn replace_with(
    path: &Path,
    mode: u32,
    fill: impl FnOnce(&mut File, &Path) -> Result<()>,
) -> Result<()> {
    replace_inner(path, mode, fill, |tmp| {
        fs::rename(tmp, path)
            .io_context(|| format!("rename {} to {}", tmp.display(), path.display()))?;
        Ok(true)
    })
    .map(|_| ())
}

/// [`write_atomic`] through a symlink: when `path` is a link, the link is kept and its target is replaced
/// atomically next to itself (a primary CNI config that links elsewhere stays a link).
pub fn write_atomic_through(path: &Path, data: &[u8], mode: u32) -> Result<()> {
    write_atomic(&write_target(path)?, data, mode)
}

/// The shared scheme with the final step given: `commit(tmp)` moves the filled, fsynced temp file into
/// place (or decides not to) and says whether it did; whatever is left at the temp path is removed.
pub(crate) fn replace_inner(
    path: &Path,
    mode: u32,
    fill: impl FnOnce(&mut File, &Path) -> Result<()>,
    commit: impl FnOnce(&Path) -> Result<bool>,
) -> Result<bool> {
    let tmp = temp_path_for(path);
    let res = (|| -> Result<bool> {
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)
            .io_context(|| format!("create temp file {}", tmp.display()))?;
        // The umask applied at create time; set the mode explicitly.
        f.set_permissions(fs::Permissions::from_mode(mode))
            .io_context(|| format!("chmod {:o} {}", mode, tmp.display()))?;
        fill(&mut f, &tmp)?;
        f.sync_all()
            .io_context(|| format!("fsync temp file {}", tmp.display()))?;
        drop(f);
        commit(&tmp)
    })();
    let _ = fs::remove_file(&tmp);
    let done = res?;
    fsync_dir(&parent_of(path))?;
    Ok(done)
}

/// The result of a file operation, `None` when the file (or directory) is not there; any other failure is
/// an error naming `what`.
pub fn existing<T>(r: std::io::Result<T>, what: impl FnOnce() -> String) -> Result<Option<T>> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(crate::Error::io(what(), e)),
    }
}

/// The permission bits of `path`, or `None` when it does not exist.
pub fn mode_of(path: &Path) -> Result<Option<u32>> {
    let m = existing(fs::metadata(path), || format!("stat {}", path.display()))?;
    Ok(m.map(|m| m.permissions().mode() & 0o7777))
}

/// Reads a file; `None` when it does not exist.
pub fn read_opt(path: &Path) -> Result<Option<Vec<u8>>> {
    existing(fs::read(path), || format!("read {}", path.display()))
}

/// Removes a file; a missing file is not an error. Returns whether something was removed.
pub fn remove_if_exists(path: &Path) -> Result<bool> {
    let removed = existing(fs::remove_file(path), || {
        format!("remove {}", path.display())
    })?;
    if removed.is_some() {
        let _ = fsync_dir(&parent_of(path));
    }
    Ok(removed.is_some())
}

/// True for a temp name this module makes: `<name>.tmp.<pid>.<n>` (two digit runs). Go's
/// `<name>.tmp.<digits>` has one.
pub fn is_own_temp_name(candidate: &str) -> bool {
    match temp_owner(candidate) {
        Some(owner) => {
            let rest = &candidate[owner.len() + ".tmp.".len()..];
            matches!(rest.split_once('.'), Some((a, b)) if !a.is_empty() && !b.is_empty() && !b.contains('.'))
        }
        None => false,
    }
}

/// Removes the temp files (`<name>.tmp.<digits.>`) that `keep(name)` accepts from `dir`; returns their
/// paths. A missing directory has none.
pub fn remove_stale_temps(dir: &Path, keep: impl Fn(&str) -> bool) -> Result<Vec<PathBuf>> {
    remove_stale_temps_where(dir, |owner, _, _| keep(owner))
}

/// Like [`remove_stale_temps`], deciding per file with `(owner name, file name, metadata)`.
pub fn remove_stale_temps_where(
    dir: &Path,
    keep: impl Fn(&str, &str, &fs::Metadata) -> bool,
) -> Result<Vec<PathBuf>> {
    let Some(rd) = existing(fs::read_dir(dir), || format!("list {}", dir.display()))? else {
        return Ok(Vec::new());
    };
    let mut removed = Vec::new();
    for ent in rd {
        let ent = ent.io_context(|| format!("list {}", dir.display()))?;
        let name = ent.file_name().to_string_lossy().into_owned();
        if let Some(owner) = temp_owner(&name) {
            let Ok(meta) = ent.metadata() else { continue };
            if meta.is_file() && keep(owner, &name, &meta) {
                let p = ent.path();
                if remove_if_exists(&p)? {
                    removed.push(p);
                }
            }
        }
    }
    Ok(removed)
}

/// A fresh empty directory for a unit test, unique in this process.
#[cfg(test)]
pub(crate) fn test_dir(tag: &str) -> PathBuf {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let d = std::env::temp_dir().join(format!("{tag}-{}-{n}", std::process::id()));
    let _ = fs::remove_dir_all(&d);
    fs::create_dir_all(&d).unwrap();
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_write_sets_mode_and_leaves_no_temp() {
        let d = test_dir("fsutil-w");
        let p = d.join("a.conflist");
        write_atomic(&p, b"one", 0o600).unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"one");
        assert_eq!(mode_of(&p).unwrap(), Some(0o600));
        write_atomic(&p, b"two", 0o644).unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"two");
        assert_eq!(mode_of(&p).unwrap(), Some(0o644));
        let names: Vec<_> = fs::read_dir(&d)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 1);
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn errors_name_the_path() {
        let e = write_atomic(Path::new("/nonexistent-dir-xyz/f.conf"), b"x", 0o600).unwrap_err();
        assert!(e.to_string().contains("/nonexistent-dir-xyz/f.conf"), "{e}");
        assert!(!remove_if_exists(Path::new("/nonexistent-dir-xyz/f")).unwrap());
    }

    #[test]
    fn temp_names() {
        assert!(is_temp_of("istio-cni.tmp.3816169537", "istio-cni"));
        assert!(is_temp_of("a.conflist.tmp.12.3", "a.conflist"));
        assert!(!is_temp_of("a.conflist.tmp.", "a.conflist"));
        assert!(!is_temp_of("a.conflist.tmp.x1", "a.conflist"));
        assert_eq!(temp_owner("a.conf.tmp.1.2"), Some("a.conf"));
        assert_eq!(temp_owner("a.conf"), None);
        assert!(is_own_temp_name("a.conf.tmp.1.2"));
        assert!(!is_own_temp_name("a.conf.tmp.12"));
        assert!(!is_own_temp_name("a.conf.tmp.1.2.3"));
        let t = temp_path_for(Path::new("/x/10-calico.conflist"));
        assert_eq!(
            temp_owner(&t.file_name().unwrap().to_string_lossy()),
            Some("10-calico.conflist")
        );
    }

    #[test]
    fn sweeps_only_selected_temps() {
        let d = test_dir("fsutil-s");
        fs::write(d.join("x.tmp.123"), b"").unwrap();
        fs::write(d.join("y.tmp.9.9"), b"").unwrap();
        fs::write(d.join("x"), b"").unwrap();
        let removed = remove_stale_temps(&d, |n| n == "x").unwrap();
        assert_eq!(removed.len(), 1);
        assert!(d.join("y.tmp.9.9").exists() && d.join("x").exists());
        fs::remove_dir_all(&d).unwrap();
    }
}
