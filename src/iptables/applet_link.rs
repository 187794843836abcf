//! Naming a node tool for a loader without `--argv0` (glibc before 2.33, musl). Such a loader gives the
//! program the path it was handed as `argv[0]`, and xtables-*-multi picks its applet from that path's last
//! component, so the path must end in the tool's name: a symlink to the node's binary, in a directory that
//! no other user can reach or change, from its creation to the loader's open:
//! - made by `mkdtemp` (a fresh unpredictable name, created exclusively, mode 0700) in the temp dir, as
//!   `istio-cni-host-tools-<pid namespace>-<pid>-XXXXXX`;
//! - opened once with `O_DIRECTORY | O_NOFOLLOW` and kept open; through that descriptor it must be a
//!   directory owned by our effective uid with mode 0700, or it is not used;
//! - every later path goes through `/proc/self/fd/<n>/`, which is the opened directory itself: renaming or
//!   replacing its name in the temp dir changes nothing, and nobody else can write inside it. The child
//!   keeps the descriptor across exec (its close-on-exec flag is cleared in the child only), so the
//!   loader, resolving `/proc/self/fd/<n>` in the child, opens the same directory.
//!
//! Each (tool name, target) pair gets its own numbered subdirectory, made once and never changed, so no
//! thread rewrites a link another thread is about to hand a loader. [`release`] removes the directory
//! when the applet ends; directories left by killed processes of the same pid namespace are removed when
//! the next one is made (only directories owned by us that nobody else can write, through a descriptor).

use crate::error::{Error, Result};
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

const PREFIX: &str = "istio-cni-host-tools-";

struct LinkDir {
    /// The name it was made under (for [`release`]).
    path: PathBuf,
    dir: Arc<File>,
    /// The (tool name, target) of each numbered subdirectory.
    links: Vec<(String, PathBuf)>,
}

static DIR: Mutex<Option<LinkDir>> = Mutex::new(None);

/// `/proc/self/fd/<n>`: the opened directory itself, whatever its name is by now.
fn pinned(dir: &File) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd()))
}

/// Whether a directory with this owner and mode is ours alone: owned by `euid`, mode exactly 0700 (pure).
pub fn is_private(is_dir: bool, uid: u32, mode: u32, euid: u32) -> bool {
    is_dir && uid == euid && mode & 0o7777 == 0o700
}

/// Whether nobody but `euid` can change a directory with this owner and mode (pure): what a sweep may
/// empty (earlier versions made theirs 0755).
pub fn is_ours(is_dir: bool, uid: u32, mode: u32, euid: u32) -> bool {
    is_dir && uid == euid && mode & 0o022 == 0
}

/// Opens `path` as a directory, never through a final symlink, and keeps it when `accept` holds for what
/// the descriptor (not the name) shows.
fn open_dir(path: &Path, accept: fn(bool, u32, u32, u32) -> bool) -> io::Result<File> {
    use nix::fcntl::OFlag;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags((OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW).bits())
        .open(path)?;
    let m = f.metadata()?;
    let euid = nix::unistd::geteuid().as_raw();
    if accept(m.is_dir(), m.uid(), m.mode(), euid) {
        Ok(f)
    } else {
        Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{} is not a private directory of uid {euid} (owner {}, mode {:o})",
                path.display(),
                m.uid(),
                m.mode() & 0o7777
            ),
        ))
    }
}

/// Our pid namespace's inode (0 when `/proc/self/ns/pid` cannot be read).
fn pid_namespace() -> u64 {
    std::fs::read_link("/proc/self/ns/pid")
        .ok()
        .and_then(|l| {
            let s = l.to_string_lossy().into_owned();
            s.strip_prefix("pid:[")?.strip_suffix(']')?.parse().ok()
        })
        .unwrap_or(0)
}

/// The pid of a link directory's name when it belongs to pid namespace `ns` (pure): ours are
/// `<prefix><ns>-<pid>-<random>`; an earlier version's `<prefix><pid>` has no namespace and counts as ours.
pub fn owner_pid(name: &str, ns: u64) -> Option<u32> {
    let parts: Vec<&str> = name.strip_prefix(PREFIX)?.split('-').collect();
    match parts.as_slice() {
        [pid] => pid.parse().ok(),
        [n, pid, _] if n.parse() == Ok(ns) => pid.parse().ok(),
        _ => None,
    }
}

fn alive(pid: u32) -> bool {
    let Ok(raw) = i32::try_from(pid) else {
        return true;
    };
    !matches!(
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(raw), None),
        Err(nix::errno::Errno::ESRCH)
    )
}

/// Empties a directory of ours through its descriptor: symlinks, and (`depth` levels of) subdirectories
/// of ours holding symlinks. Anything else is left, and the directory with it.
fn clear(dir: &File, depth: u8) -> io::Result<()> {
    let p = pinned(dir);
    for e in std::fs::read_dir(&p)? {
        let e = e?;
        let child = p.join(e.file_name());
        let ft = e.file_type()?;
        if ft.is_symlink() {
            std::fs::remove_file(&child)?;
        } else if ft.is_dir() && depth > 0 {
            clear(&open_dir(&child, is_ours)?, depth - 1)?;
            std::fs::remove_dir(&child)?;
        } else {
            return Err(io::Error::other(format!("unexpected {}", child.display())));
        }
    }
    Ok(())
}

/// Empties `dir` and removes `path`, the name it was opened under, if that name still is `dir` (someone
/// who can write the temp dir may have renamed it: then the empty directory stays where they put it).
fn remove_emptied(path: &Path, dir: &File) {
    if clear(dir, 1).is_err() {
        return;
    }
    let same = match (std::fs::symlink_metadata(path), dir.metadata()) {
        (Ok(a), Ok(b)) => (a.dev(), a.ino()) == (b.dev(), b.ino()),
        _ => false,
    };
    if same {
        let _ = std::fs::remove_dir(path);
    }
}

/// Removes the link directories in `base` of processes of our pid namespace that no longer exist.
fn sweep(base: &Path) {
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    let ns = pid_namespace();
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name.to_str().and_then(|n| owner_pid(n, ns)) else {
            continue;
        };
        if pid == std::process::id() || alive(pid) {
            continue;
        }
        let path = base.join(&name);
        if let Ok(dir) = open_dir(&path, is_ours) {
            remove_emptied(&path, &dir);
        }
    }
}

fn make() -> io::Result<LinkDir> {
    let base = std::env::temp_dir();
    sweep(&base);
    let template = base.join(format!(
        "{PREFIX}{}-{}-XXXXXX",
        pid_namespace(),
        std::process::id()
    ));
    let path = nix::unistd::mkdtemp(&template)?;
    let dir = open_dir(&path, is_private)?;
    Ok(LinkDir {
        path,
        dir: Arc::new(dir),
        links: Vec::new(),
    })
}

/// The path to hand the loader for the node tool `name` at `file`, and the directory the child must keep
/// open across exec (see the module comment).
pub fn link(name: &str, file: &Path) -> Result<(PathBuf, Arc<File>)> {
    let fail = |e: io::Error| {
        Error::io(
            format!(
                "name {name} for the node's loader (it has no --argv0) in a private directory under {}",
                std::env::temp_dir().display()
            ),
            e,
        )
    };
    if name.is_empty() || name.contains('/') {
        return Err(fail(io::Error::other("not a file name")));
    }
    let mut guard = DIR.lock().unwrap_or_else(|p| p.into_inner());
    // A directory removed under us (by a process of another pid namespace sharing the temp dir) has no
    // links left: make a new one.
    let gone = |d: &LinkDir| d.dir.metadata().map_or(true, |m| m.nlink() == 0);
    if guard.as_ref().map_or(true, gone) {
        *guard = Some(make().map_err(fail)?);
    }
    let Some(d) = guard.as_mut() else {
        return Err(fail(io::Error::other("no directory")));
    };
    let i = match d.links.iter().position(|(n, f)| n == name && f == file) {
        Some(i) => i,
        None => {
            d.links.push((name.to_string(), file.to_path_buf()));
            d.links.len() - 1
        }
    };
    let sub = pinned(&d.dir).join(i.to_string());
    let path = sub.join(name);
    if std::fs::read_link(&path).ok().as_deref() != Some(file) {
        // Made now, or removed since (a temp-dir cleaner such as systemd-tmpfiles): made again.
        match std::fs::DirBuilder::new().mode(0o700).create(&sub) {
            Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(fail(e)),
            _ => {}
        }
        let _ = std::fs::remove_file(&path);
        std::os::unix::fs::symlink(file, &path).map_err(fail)?;
    }
    Ok((path, Arc::clone(&d.dir)))
}

/// Removes this process's link directory (called when the applet ends).
pub fn release() {
    let taken = DIR.lock().unwrap_or_else(|p| p.into_inner()).take();
    if let Some(d) = taken {
        remove_emptied(&d.path, &d.dir);
    }
}

#[cfg(test)]
#[path = "applet_link_tests.rs"]
pub(crate) mod tests;
