//! Keeping a base directory watched across its removal, rename and re-creation: watch it at its path, or,
//! while it is missing, its nearest existing ancestor for the name that leads to it (so its re-creation
//! is an event), step by step down as the missing directories appear.

use super::{BaseState, Mark, Watcher, Why, MASK};
use nix::errno::Errno;
use std::ffi::OsString;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The (device, inode) of the directory at `path` (links followed), when there is one.
pub fn identity(path: &Path) -> Option<(u64, u64)> {
    std::fs::metadata(path)
        .ok()
        .filter(|m| m.is_dir())
        .map(|m| (m.dev(), m.ino()))
}

/// True when `path` still leads to a directory that was deleted (no links to it left): reachable only
/// through a mount of it (or a process's cwd), never again through its parent.
pub fn is_deleted(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_dir() && m.nlink() == 0)
}

/// How many times a watch is re-placed when the directory keeps appearing and vanishing under us.
const ATTEMPTS: usize = 8;

impl Watcher {
    /// Watches base `i` at its path again, or its nearest existing ancestor while it is missing.
    /// Returns true when the directory itself is watched now (a new directory: its content is new).
    pub(super) fn replace(&mut self, i: usize) -> bool {
        self.drop_marks(|m| matches!(&m.why, Why::Base(j) | Why::Ancestor(j, _) if *j == i));
        let path = self.bases[i].path.clone();
        for _ in 0..ATTEMPTS {
            let (wd, dir, toward) = match self.watch_nearest(&path) {
                Ok(found) => found,
                Err(e) => {
                    let e = format!("{e}");
                    if self.bases[i].state != BaseState::Failed(e.clone()) {
                        log::error!(
                            "cannot watch {} (nor, while it is missing, a directory above it): {e}",
                            path.display()
                        );
                    }
                    self.bases[i].state = BaseState::Failed(e);
                    return false;
                }
            };
            let Some(next) = toward else {
                let (dev, ino) = identity(&path).unwrap_or((0, 0));
                self.marks.push(Mark {
                    wd,
                    dir: path.clone(),
                    why: Why::Base(i),
                });
                if !matches!(self.bases[i].state, BaseState::Watched(..)) {
                    log::info!("watching {} again", path.display());
                }
                self.bases[i].state = BaseState::Watched(dev, ino);
                return true;
            };
            let appeared = dir.join(&next).is_dir();
            if self.bases[i].state != BaseState::Waiting {
                log::warn!(
                    "{} is gone; watching {} for it to come back",
                    path.display(),
                    dir.display()
                );
            }
            self.marks.push(Mark {
                wd,
                dir,
                why: Why::Ancestor(i, next),
            });
            self.bases[i].state = BaseState::Waiting;
            if !appeared {
                return false;
            }
            // It appeared between the failed watch and the ancestor's: go down again.
            self.drop_marks(|m| matches!(&m.why, Why::Ancestor(j, _) if *j == i));
        }
        false
    }

    /// Watches `path`, or its nearest existing ancestor: the descriptor, the directory watched, and the
    /// name under it that leads towards `path` (`None` when `path` itself is watched).
    fn watch_nearest(&mut self, path: &Path) -> nix::Result<Nearest> {
        let mut at = path.to_path_buf();
        let mut toward: Option<OsString> = None;
        loop {
            match self.inotify.add_watch(&at, MASK) {
                Ok(wd) => return Ok((wd, at, toward)),
                Err(Errno::ENOENT | Errno::ENOTDIR) => {
                    toward = Some(at.file_name().map(|n| n.to_os_string()).unwrap_or_default());
                    if at.as_os_str() == "." || !at.pop() {
                        return Err(Errno::ENOENT);
                    }
                    if at.as_os_str().is_empty() {
                        // A relative path's last ancestor is the working directory.
                        at = PathBuf::from(".");
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// What [`Watcher::watch_nearest`] found: the descriptor, the directory, the name towards the target.
type Nearest = (
    nix::sys::inotify::WatchDescriptor,
    PathBuf,
    Option<OsString>,
);
