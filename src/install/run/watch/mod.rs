//! File-system watching with inotify (no polling): the conf dir, the service-account dir (token rotation
//! swaps its `..data` symlink), the bin dirs and the run dir, and the directories on the candidates' link
//! chains ([`crate::install::config::links`]). One watcher for the whole run: we watch directories, which survive the
//! atomic renames of the files in them. A stop descriptor (a signalfd in the installer, a pipe in tests)
//! wakes every wait.
//!
//! A watched directory can go away (an operator's `rm -rf /etc/cni/net.d; mkdir ...`, a rename): its watch
//! ends with `IN_DELETE_SELF`/`IN_MOVE_SELF`/`IN_IGNORED`, and the directory at its path is watched again
//! — or, while it is missing, its nearest existing ancestor, for the name that leads to it (`dirs`).
//! [`Watcher::health`] says when that is impossible: no ancestor can be watched, or the path still shows
//! the deleted directory (a bind mount of a removed host directory), where a recreated one is invisible.
//!
//! A file written in place (`IN_MODIFY`) counts too, without waiting for its close: the runtime's own
//! watch reloads on the write, and a writer holding its descriptor open (our binary truncated, the
//! runtime's file rewritten without our entry) never closes it. In the conf dir only the names the
//! runtime reads (`.conf`, `.conflist`, `.json`) count so, so another file written there in place (a
//! log, a primary's kubeconfig) does not make readiness flap. Our own writes never land in place (temp
//! files, renamed). Acting on a half-written file is avoided by [`Watcher::settle`].

use crate::error::{Error, Result};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};
use std::collections::BTreeSet;
use std::ffi::OsString;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

mod chains;
mod dirs;
mod settle;

/// What a watched directory is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    ConfDir,
    ServiceAccount,
    BinDir,
    RunDir,
}

/// Which roles saw a change.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Changes {
    pub conf: bool,
    pub service_account: bool,
    pub bin: bool,
    pub run: bool,
}

impl Changes {
    pub fn any(&self) -> bool {
        self.conf || self.service_account || self.bin || self.run
    }
    pub fn merge(&mut self, o: Changes) {
        self.conf |= o.conf;
        self.service_account |= o.service_account;
        self.bin |= o.bin;
        self.run |= o.run;
    }
    fn set(&mut self, role: Role) {
        match role {
            Role::ConfDir => self.conf = true,
            Role::ServiceAccount => self.service_account = true,
            Role::BinDir => self.bin = true,
            Role::RunDir => self.run = true,
        }
    }
}

/// The end of a wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    Changed(Changes),
    Stop,
    Timeout,
}

/// Decides whether an event name matters for a role (bin dirs: only our binary names; run dir: only
/// the kubeconfig; temp files never).
pub type Filter = Box<dyn Fn(Role, &str) -> bool + Send>;

/// A directory asked for with [`Watcher::add`].
struct Base {
    role: Role,
    path: PathBuf,
    state: BaseState,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum BaseState {
    /// Watched; the identity (device, inode) of the directory the watch is on.
    Watched(u64, u64),
    /// Missing: a watch on its nearest existing ancestor waits for it.
    Waiting,
    /// Neither it nor an ancestor can be watched.
    Failed(String),
}

/// One use of an inotify watch (several can share a descriptor: one directory, several purposes).
struct Mark {
    wd: WatchDescriptor,
    dir: PathBuf,
    why: Why,
}

enum Why {
    /// The base directory itself (index into `bases`).
    Base(usize),
    /// An ancestor of a missing base directory; the name that leads towards it.
    Ancestor(usize, OsString),
    /// A directory on a link chain, with its identity when watched; only these names matter in it.
    Link(BTreeSet<OsString>, Option<(u64, u64)>),
}

pub struct Watcher {
    inotify: Inotify,
    bases: Vec<Base>,
    marks: Vec<Mark>,
    filter: Filter,
    /// The link chains last followed ([`Watcher::follow_links`]).
    chains: Vec<crate::install::config::links::Chain>,
    /// Link-chain directories that could not be watched (each is logged once).
    unwatched: BTreeSet<PathBuf>,
    /// Link-chain directories left out beyond [`crate::install::config::links::MAX_DIRS`] (logged when it changes).
    left_out: usize,
    /// Since when a watched directory has shown its deleted self ([`Watcher::deleted_for`]).
    deleted_at: Option<Instant>,
    /// The last relevant in-place write (`IN_MODIFY`) not yet followed by a close ([`Watcher::settle`]).
    modified_at: Option<Instant>,
}

const MASK: AddWatchFlags = AddWatchFlags::IN_CREATE
    .union(AddWatchFlags::IN_CLOSE_WRITE)
    .union(AddWatchFlags::IN_MODIFY)
    .union(AddWatchFlags::IN_MOVED_TO)
    .union(AddWatchFlags::IN_MOVED_FROM)
    .union(AddWatchFlags::IN_DELETE)
    .union(AddWatchFlags::IN_ATTRIB)
    .union(AddWatchFlags::IN_DELETE_SELF)
    .union(AddWatchFlags::IN_MOVE_SELF)
    .union(AddWatchFlags::IN_ONLYDIR);

const SELF_EVENTS: AddWatchFlags = AddWatchFlags::IN_DELETE_SELF
    .union(AddWatchFlags::IN_MOVE_SELF)
    .union(AddWatchFlags::IN_IGNORED);

impl Watcher {
    pub fn new(filter: Filter) -> Result<Watcher> {
        let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)
            .map_err(|e| Error::io("inotify_init", e.into()))?;
        Ok(Watcher {
            inotify,
            bases: Vec::new(),
            marks: Vec::new(),
            filter,
            chains: Vec::new(),
            unwatched: BTreeSet::new(),
            left_out: 0,
            deleted_at: None,
            modified_at: None,
        })
    }

    /// Watches `dir` for `role` from now on, also across its removal and re-creation. A directory that
    /// cannot be watched now is an error (the caller decides whether it matters) and is not kept.
    pub fn add(&mut self, dir: &Path, role: Role) -> Result<()> {
        let wd = self
            .inotify
            .add_watch(dir, MASK)
            .map_err(|e| Error::io(format!("watch {}", dir.display()), e.into()))?;
        let (dev, ino) = dirs::identity(dir).unwrap_or((0, 0));
        self.bases.push(Base {
            role,
            path: dir.to_path_buf(),
            state: BaseState::Watched(dev, ino),
        });
        self.marks.push(Mark {
            wd,
            dir: dir.to_path_buf(),
            why: Why::Base(self.bases.len() - 1),
        });
        Ok(())
    }

    /// Drops the marks `drop` selects, removing their inotify watches unless another mark still uses
    /// the same descriptor.
    fn drop_marks(&mut self, drop: impl Fn(&Mark) -> bool) {
        let (gone, kept): (Vec<Mark>, Vec<Mark>) = std::mem::take(&mut self.marks)
            .into_iter()
            .partition(|m| drop(m));
        self.marks = kept;
        for m in gone {
            if !self.marks.iter().any(|k| k.wd == m.wd) {
                // EINVAL when the kernel already dropped it (the directory is gone): nothing to do.
                let _ = self.inotify.rm_watch(m.wd);
            }
        }
    }

    /// Reads what is pending, without blocking; re-places the watches of directories that went away.
    pub fn drain(&mut self) -> Result<Changes> {
        let mut ch = Changes::default();
        let mut redo: BTreeSet<usize> = BTreeSet::new();
        loop {
            let events = match self.inotify.read_events() {
                Ok(ev) => ev,
                Err(nix::errno::Errno::EAGAIN) => break,
                Err(e) => return Err(Error::io("read inotify events", e.into())),
            };
            if events.is_empty() {
                break;
            }
            for ev in events {
                if ev.mask.contains(AddWatchFlags::IN_Q_OVERFLOW) {
                    // Events were lost: everything may have changed.
                    for b in &self.bases {
                        ch.set(b.role);
                    }
                    redo.extend(0..self.bases.len());
                    continue;
                }
                let self_event = ev.mask.intersects(SELF_EVENTS);
                let in_place = ev.mask.contains(AddWatchFlags::IN_MODIFY);
                let name = ev.name.unwrap_or_default();
                let shown = name.to_string_lossy();
                let mut relevant = false;
                for m in self.marks.iter().filter(|m| m.wd == ev.wd) {
                    match &m.why {
                        Why::Base(i) => {
                            let role = self.bases[*i].role;
                            if self_event {
                                ch.set(role);
                                redo.insert(*i);
                            } else if (self.filter)(role, &shown)
                                && !(in_place
                                    && role == Role::ConfDir
                                    && !crate::install::config::select::is_candidate_name(&name))
                            {
                                ch.set(role);
                                relevant = true;
                            }
                        }
                        Why::Ancestor(i, next) => {
                            if self_event || *next == name {
                                redo.insert(*i);
                            }
                        }
                        Why::Link(names, _) => {
                            if self_event || names.contains(&name) {
                                ch.conf = true;
                                relevant = true;
                            }
                        }
                    }
                }
                if relevant && in_place {
                    self.modified_at = Some(Instant::now());
                } else if relevant && ev.mask.contains(AddWatchFlags::IN_CLOSE_WRITE) {
                    self.modified_at = None;
                }
                if ev.mask.contains(AddWatchFlags::IN_IGNORED) {
                    // The kernel dropped this watch: forget every use of it.
                    self.marks.retain(|m| m.wd != ev.wd);
                }
            }
        }
        for i in redo {
            if self.replace(i) {
                ch.set(self.bases[i].role);
            }
        }
        Ok(ch)
    }

    /// Re-checks every base directory (the periodic backstop): a missing one that appeared, one whose
    /// path now names another directory, one that could not be watched. Returns the roles whose
    /// directory is watched anew.
    pub fn resync(&mut self) -> Changes {
        let mut ch = Changes::default();
        for i in 0..self.bases.len() {
            let b = &self.bases[i];
            let redo = match b.state {
                BaseState::Watched(dev, ino) => dirs::identity(&b.path) != Some((dev, ino)),
                BaseState::Waiting => b.path.is_dir(),
                BaseState::Failed(_) => true,
            };
            if redo && self.replace(i) {
                ch.set(self.bases[i].role);
            }
        }
        ch
    }

    /// Why a watched directory cannot be followed any more (for `/healthz`); `None` when all can.
    pub fn health(&self) -> Option<String> {
        self.bases.iter().find_map(|b| match &b.state {
            BaseState::Failed(e) => Some(format!(
                "{} cannot be watched ({e}): its changes would go unnoticed",
                b.path.display()
            )),
            BaseState::Watched(..) if dirs::is_deleted(&b.path) => Some(format!(
                "{} was deleted, but this path still shows the deleted directory (a bind mount of a \
                 directory removed on the host?): a directory recreated there is invisible to this \
                 container, and the container runtime reads that one",
                b.path.display()
            )),
            _ => None,
        })
    }

    /// How long a watched directory has shown its deleted self (see [`Watcher::health`]); `None` while
    /// none does. A deleted directory never comes back: only a fresh mount (a restart) shows the new one.
    pub fn deleted_for(&mut self) -> Option<Duration> {
        let deleted = self
            .bases
            .iter()
            .any(|b| matches!(b.state, BaseState::Watched(..)) && dirs::is_deleted(&b.path));
        if !deleted {
            self.deleted_at = None;
            return None;
        }
        Some(self.deleted_at.get_or_insert_with(Instant::now).elapsed())
    }

    /// Waits until a relevant change, the stop descriptor, or `timeout` (`None`: no timeout).
    pub fn wait(
        &mut self,
        stop: Option<BorrowedFd<'_>>,
        timeout: Option<Duration>,
    ) -> Result<Wake> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut acc = Changes::default();
        loop {
            let ch = self.drain()?;
            acc.merge(ch);
            if acc.any() {
                return Ok(Wake::Changed(acc));
            }
            let remaining = match deadline {
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        return Ok(Wake::Timeout);
                    }
                    Some(d - now)
                }
                None => None,
            };
            let pt = match remaining {
                // Round up so a sub-millisecond remainder does not spin.
                Some(r) => {
                    PollTimeout::try_from(r.as_millis().saturating_add(1).min(60_000) as u32)
                        .unwrap_or(PollTimeout::MAX)
                }
                None => PollTimeout::NONE,
            };
            let mut fds = vec![PollFd::new(self.inotify.as_fd(), PollFlags::POLLIN)];
            if let Some(s) = stop {
                fds.push(PollFd::new(s, PollFlags::POLLIN));
            }
            match poll(&mut fds, pt) {
                Ok(_) => {}
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => return Err(Error::io("poll", e.into())),
            }
            if fds
                .get(1)
                .and_then(|f| f.revents())
                .is_some_and(|r| r.intersects(PollFlags::POLLIN | PollFlags::POLLHUP))
            {
                return Ok(Wake::Stop);
            }
        }
    }
}

/// True when the stop descriptor is readable now.
pub fn stop_pending(stop: Option<BorrowedFd<'_>>) -> bool {
    let Some(s) = stop else { return false };
    let mut fds = [PollFd::new(s, PollFlags::POLLIN)];
    matches!(poll(&mut fds, PollTimeout::ZERO), Ok(n) if n > 0)
}

#[cfg(test)]
mod tests;
