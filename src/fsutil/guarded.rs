//! Guarded file access for configurations other programs own: bounded reads that refuse FIFOs, devices
//! and huge files, and a replace that never loses a concurrent writer's update (issue 11 item 7).

use super::{existing, replace_inner};
use crate::error::{IoContext, Result};
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Largest configuration file we read (the JSON layer's input bound).
pub const MAX_CONFIG_BYTES: u64 = crate::json::MAX_INPUT as u64;

/// Reads a configuration file safely: only a regular file (after following links), its size checked
/// before reading and at most `limit + 1` bytes read, opened non-blocking (a FIFO swapped in after the
/// check cannot hang us). `None` when it does not exist. A FIFO, a device (a link to `/dev/zero`), a
/// directory or an oversized (e.g. sparse 1 GB) file is an error naming the path and what it is.
pub fn read_config(path: &Path, limit: u64) -> Result<Option<Vec<u8>>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let not_regular = |m: &fs::Metadata| {
        use std::os::unix::fs::FileTypeExt;
        let ft = m.file_type();
        let what = if ft.is_fifo() {
            "a FIFO"
        } else if ft.is_char_device() || ft.is_block_device() {
            "a device"
        } else if ft.is_dir() {
            "a directory"
        } else if ft.is_socket() {
            "a socket"
        } else {
            "not a regular file"
        };
        crate::Error::config(format!(
            "{}: is {what}, not a regular file; ignored",
            path.display()
        ))
    };
    let too_large = |n: u64| {
        crate::Error::config(format!(
            "{}: {n} bytes, larger than the {limit}-byte limit for a CNI configuration; ignored",
            path.display()
        ))
    };
    let Some(meta) = existing(fs::metadata(path), || format!("stat {}", path.display()))? else {
        return Ok(None);
    };
    if !meta.is_file() {
        return Err(not_regular(&meta));
    }
    if meta.len() > limit {
        return Err(too_large(meta.len()));
    }
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits())
        .open(path);
    let Some(f) = existing(f, || format!("open {}", path.display()))? else {
        return Ok(None);
    };
    let meta = f
        .metadata()
        .io_context(|| format!("stat {}", path.display()))?;
    if !meta.is_file() {
        return Err(not_regular(&meta));
    }
    let mut buf = Vec::with_capacity(meta.len().min(limit) as usize);
    f.take(limit + 1)
        .read_to_end(&mut buf)
        .io_context(|| format!("read {}", path.display()))?;
    if buf.len() as u64 > limit {
        return Err(too_large(buf.len() as u64));
    }
    Ok(Some(buf))
}

/// What identifies one version of a file: device, inode, size, mtime and ctime (nanoseconds). An atomic
/// rename by another writer changes the inode; an in-place write changes mtime/ctime.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    pub(crate) dev: u64,
    pub(crate) ino: u64,
    pub(crate) size: u64,
    pub(crate) mtime: (i64, i64),
    pub(crate) ctime: (i64, i64),
}

impl Stamp {
    /// The stamp of the file these metadata describe.
    pub fn of(m: &fs::Metadata) -> Stamp {
        use std::os::unix::fs::MetadataExt;
        Stamp {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
        }
    }
}

/// The [`Stamp`] of `path` (links followed); `None` when it does not exist.
pub fn stamp(path: &Path) -> Result<Option<Stamp>> {
    let m = existing(fs::metadata(path), || format!("stat {}", path.display()))?;
    Ok(m.as_ref().map(Stamp::of))
}

/// Where a write to `path` must go: `path` itself, or, when it is a symlink, the file it points to (so
/// the link is kept and the target replaced atomically next to itself).
pub fn write_target(path: &Path) -> Result<PathBuf> {
    match fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => {
            fs::canonicalize(path).io_context(|| format!("resolve symlink {}", path.display()))
        }
        _ => Ok(path.to_path_buf()),
    }
}

impl Stamp {
    /// The same version of the content: same inode, size and mtime (a rename changes the ctime of the
    /// inodes it moves, so ctime is not compared here).
    fn same_version(&self, o: &Stamp) -> bool {
        (self.dev, self.ino, self.size, self.mtime) == (o.dev, o.ino, o.size, o.mtime)
    }
}

/// `renameat2(from, to, RENAME_EXCHANGE)`: swaps the two names atomically. `Ok(false)` when the kernel
/// or the file system does not support it (EINVAL, ENOSYS, EOPNOTSUPP) or a seccomp profile refuses the
/// syscall (EPERM: container runtime profiles older than `renameat2` answer so); the caller then falls
/// back to a plain rename, which reports a real permission problem itself.
fn exchange(from: &Path, to: &Path) -> Result<bool> {
    use std::os::unix::ffi::OsStrExt;
    const RENAME_EXCHANGE: nix::libc::c_uint = 1 << 1;
    let cstr = |p: &Path| {
        std::ffi::CString::new(p.as_os_str().as_bytes())
            .map_err(|_| crate::Error::config(format!("{}: NUL byte in path", p.display())))
    };
    let (a, b) = (cstr(from)?, cstr(to)?);
    // SAFETY: both pointers come from live CStrings (NUL-terminated, valid for the call); the syscall
    // reads them and touches no other memory of ours.
    let rc = unsafe {
        nix::libc::syscall(
            nix::libc::SYS_renameat2,
            nix::libc::AT_FDCWD,
            a.as_ptr(),
            nix::libc::AT_FDCWD,
            b.as_ptr(),
            RENAME_EXCHANGE,
        )
    };
    if rc == 0 {
        return Ok(true);
    }
    let err = std::io::Error::last_os_error();
    match err.raw_os_error() {
        Some(nix::libc::EINVAL)
        | Some(nix::libc::ENOSYS)
        | Some(nix::libc::EOPNOTSUPP)
        | Some(nix::libc::EPERM) => {
            log::debug!(
                "RENAME_EXCHANGE unavailable for {} ({err}): plain rename after the re-check",
                to.display()
            );
            Ok(false)
        }
        _ => Err(crate::Error::io(
            format!("exchange {} with {}", from.display(), to.display()),
            err,
        )),
    }
}

/// Replaces the file at `path` (following a symlink, see [`write_target`]) with `data`, atomically, but
/// only if it is still the version `expected` (its [`Stamp`] and its bytes `expected_bytes`); returns
/// `false` (nothing changed, no temp file left) when another writer changed it meanwhile, so the caller
/// can redo its merge on the new content.
///
/// No window is left between the last check and the rename: the new file is swapped in with
/// `RENAME_EXCHANGE`, and the file that came out is checked. When it is not the expected version (a write
/// landed in between), it is swapped back, so the other writer's newer content is never lost. Without
/// `RENAME_EXCHANGE` support, a plain rename follows the check (a microseconds-wide window).
pub fn replace_if_unchanged(
    path: &Path,
    data: &[u8],
    mode: u32,
    expected: Stamp,
    expected_bytes: &[u8],
) -> Result<bool> {
    let target = write_target(path)?;
    let unchanged = || -> Result<bool> {
        Ok(stamp(&target)? == Some(expected)
            && read_config(&target, MAX_CONFIG_BYTES)?.as_deref() == Some(expected_bytes)
            && stamp(&target)? == Some(expected))
    };
    replace_inner(
        &target,
        mode,
        |f, tmp| {
            f.write_all(data)
                .io_context(|| format!("write temp file {}", tmp.display()))
        },
        |tmp| {
            if !unchanged()? {
                return Ok(false);
            }
            let ours = stamp(tmp)?;
            if !exchange(tmp, &target)? {
                fs::rename(tmp, &target)
                    .io_context(|| format!("rename {} to {}", tmp.display(), target.display()))?;
                return Ok(true);
            }
            // `tmp` now names what was at `target` just before the swap.
            let out = stamp(tmp)?;
            if out.is_some_and(|o| o.same_version(&expected)) {
                let _ = fs::remove_file(tmp);
                return Ok(true);
            }
            // A write landed between the check and the swap: put it back.
            if !exchange(tmp, &target)? {
                fs::rename(tmp, &target)
                    .io_context(|| format!("rename {} to {}", tmp.display(), target.display()))?;
                return Ok(false);
            }
            let back = stamp(tmp)?;
            if back.is_some_and(|b| ours.is_some_and(|o| o.same_version(&b))) {
                // Ours came back out: the target holds the other writer's content again.
                return Ok(false);
            }
            // Yet another, newer write had replaced ours meanwhile: it is the newest, keep it.
            fs::rename(tmp, &target)
                .io_context(|| format!("rename {} to {}", tmp.display(), target.display()))?;
            Ok(false)
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_config_refuses_what_is_not_a_small_regular_file() {
        let d = crate::fsutil::test_dir("guarded-read");
        let p = d.join("a.conflist");
        fs::write(&p, b"12345").unwrap();
        assert_eq!(read_config(&p, 5).unwrap().unwrap(), b"12345");
        let e = read_config(&p, 4).unwrap_err().to_string();
        assert!(e.contains("larger than the 4-byte limit"), "{e}");
        assert_eq!(read_config(&d.join("missing"), 5).unwrap(), None);
        let fifo = d.join("f.conflist");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let e = read_config(&fifo, 5).unwrap_err().to_string();
        assert!(e.contains("is a FIFO"), "{e}");
        let zero = d.join("z.conflist");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        let e = read_config(&zero, 5).unwrap_err().to_string();
        assert!(e.contains("is a device"), "{e}");
        fs::remove_dir_all(&d).unwrap();
    }

    /// Runs `f` on a thread of its own on which the kernel refuses `renameat2` with `errno` (a seccomp
    /// filter on that thread only): what a kernel or file system without `RENAME_EXCHANGE` (EINVAL, ENOSYS)
    /// or a container runtime's seccomp profile that predates `renameat2` (EPERM) does.
    fn without_renameat2<T: Send + 'static>(
        errno: i32,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> T {
        use nix::libc::{self, sock_filter, sock_fprog};
        std::thread::spawn(move || {
            let op = |code: u32, k: u32, jt: u8, jf: u8| sock_filter {
                code: code as u16,
                jt,
                jf,
                k,
            };
            // Load the syscall number (offset 0 of seccomp_data); renameat2 → errno, anything else allowed.
            let filter = [
                op(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, 0, 0, 0),
                op(
                    libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K,
                    libc::SYS_renameat2 as u32,
                    0,
                    1,
                ),
                op(
                    libc::BPF_RET | libc::BPF_K,
                    libc::SECCOMP_RET_ERRNO | errno as u32,
                    0,
                    0,
                ),
                op(libc::BPF_RET | libc::BPF_K, libc::SECCOMP_RET_ALLOW, 0, 0),
            ];
            let prog = sock_fprog {
                len: filter.len() as u16,
                filter: filter.as_ptr() as *mut sock_filter,
            };
            // SAFETY: prctl reads `prog` and the 4 instructions it points to, both alive for the call;
            // the filter applies to this thread only (no TSYNC) and ends with it.
            unsafe {
                assert_eq!(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0);
                assert_eq!(
                    libc::prctl(
                        libc::PR_SET_SECCOMP,
                        libc::SECCOMP_MODE_FILTER,
                        &prog as *const sock_fprog
                    ),
                    0,
                    "install the seccomp filter: {}",
                    std::io::Error::last_os_error()
                );
            }
            f()
        })
        .join()
        .unwrap()
    }

    #[test]
    fn replace_falls_back_to_rename_without_rename_exchange() {
        for errno in [nix::libc::EINVAL, nix::libc::ENOSYS, nix::libc::EPERM] {
            let d = crate::fsutil::test_dir(&format!("guarded-noexchange-{errno}"));
            let out = without_renameat2(errno, move || {
                let p = d.join("a.conflist");
                fs::write(&p, b"old").unwrap();
                let other = d.join("b");
                fs::write(&other, b"b").unwrap();
                // The filter is in force: the swap itself is refused by the kernel.
                assert!(!exchange(&p, &other).unwrap(), "errno {errno}");
                let st = stamp(&p).unwrap().unwrap();
                let replaced = replace_if_unchanged(&p, b"merged", 0o644, st, b"old");
                // A newer write is still never overwritten: the pre-rename check refuses it.
                let st = stamp(&p).unwrap().unwrap();
                fs::write(&other, b"newer").unwrap();
                fs::rename(&other, &p).unwrap();
                let stale = replace_if_unchanged(&p, b"merged2", 0o644, st, b"merged");
                let left = fs::read(&p).unwrap();
                let files = fs::read_dir(&d).unwrap().count();
                fs::remove_dir_all(&d).unwrap();
                (
                    replaced.map_err(|e| e.to_string()),
                    stale.map_err(|e| e.to_string()),
                    left,
                    files,
                )
            });
            assert_eq!(out.0, Ok(true), "errno {errno}: replaced by a plain rename");
            assert_eq!(out.1, Ok(false), "errno {errno}: a newer version is kept");
            assert_eq!(out.2, b"newer", "errno {errno}");
            assert_eq!(out.3, 1, "errno {errno}: no temp file left");
        }
    }

    #[test]
    fn replace_if_unchanged_leaves_a_newer_write_alone() {
        let d = crate::fsutil::test_dir("guarded-replace");
        let p = d.join("a.conflist");
        fs::write(&p, b"old").unwrap();
        let st = stamp(&p).unwrap().unwrap();
        // Unchanged: replaced.
        assert!(replace_if_unchanged(&p, b"merged", 0o644, st, b"old").unwrap());
        assert_eq!(fs::read(&p).unwrap(), b"merged");
        // Changed by another writer after our read: not replaced.
        let st = stamp(&p).unwrap().unwrap();
        let other = d.join("other");
        fs::write(&other, b"newer").unwrap();
        fs::rename(&other, &p).unwrap();
        assert!(!replace_if_unchanged(&p, b"merged2", 0o644, st, b"merged").unwrap());
        assert_eq!(fs::read(&p).unwrap(), b"newer");
        assert_eq!(fs::read_dir(&d).unwrap().count(), 1, "no temp file left");
        // Through a symlink: the link stays, the target is replaced.
        let target = d.join("target.conflist");
        fs::write(&target, b"t").unwrap();
        let link = d.join("link.conflist");
        std::os::unix::fs::symlink("target.conflist", &link).unwrap();
        let st = stamp(&link).unwrap().unwrap();
        assert!(replace_if_unchanged(&link, b"t2", 0o644, st, b"t").unwrap());
        assert!(fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(fs::read(&target).unwrap(), b"t2");
        fs::remove_dir_all(&d).unwrap();
    }
}
