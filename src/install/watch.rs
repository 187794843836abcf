//! File-system watching with inotify (no polling): the conf dir, the service-account dir (token rotation
//! swaps its `..data` symlink), the bin dirs and the run dir. One watcher for the whole run: we watch
//! directories, which survive the atomic renames of the files in them. A stop descriptor (a signalfd in
//! the installer, a pipe in tests) wakes every wait.

use crate::error::{Error, Result};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};
use std::os::fd::{AsFd, BorrowedFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

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
    fn merge(&mut self, o: Changes) {
        self.conf |= o.conf;
        self.service_account |= o.service_account;
        self.bin |= o.bin;
        self.run |= o.run;
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

pub struct Watcher {
    inotify: Inotify,
    dirs: Vec<(WatchDescriptor, Role, PathBuf)>,
    filter: Filter,
}

const MASK: AddWatchFlags = AddWatchFlags::IN_CREATE
    .union(AddWatchFlags::IN_CLOSE_WRITE)
    .union(AddWatchFlags::IN_MOVED_TO)
    .union(AddWatchFlags::IN_MOVED_FROM)
    .union(AddWatchFlags::IN_DELETE)
    .union(AddWatchFlags::IN_ATTRIB)
    .union(AddWatchFlags::IN_DELETE_SELF)
    .union(AddWatchFlags::IN_MOVE_SELF);

impl Watcher {
    pub fn new(filter: Filter) -> Result<Watcher> {
        let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)
            .map_err(|e| Error::io("inotify_init", e.into()))?;
        Ok(Watcher {
            inotify,
            dirs: Vec::new(),
            filter,
        })
    }

    /// Watches `dir` for `role`. A missing directory is an error (the caller decides whether it matters).
    pub fn add(&mut self, dir: &Path, role: Role) -> Result<()> {
        let wd = self
            .inotify
            .add_watch(dir, MASK)
            .map_err(|e| Error::io(format!("watch {}", dir.display()), e.into()))?;
        self.dirs.push((wd, role, dir.to_path_buf()));
        Ok(())
    }

    /// Watches `dir` for `role` unless it is watched already (the directory of a symlinked primary's
    /// target, which can change at run time).
    pub fn ensure(&mut self, dir: &Path, role: Role) -> Result<()> {
        if self.dirs.iter().any(|(_, r, d)| *r == role && d == dir) {
            return Ok(());
        }
        self.add(dir, role)
    }

    /// Reads what is pending, without blocking.
    pub fn drain(&mut self) -> Result<Changes> {
        let mut ch = Changes::default();
        loop {
            let events = match self.inotify.read_events() {
                Ok(ev) => ev,
                Err(nix::errno::Errno::EAGAIN) => return Ok(ch),
                Err(e) => return Err(Error::io("read inotify events", e.into())),
            };
            if events.is_empty() {
                return Ok(ch);
            }
            for ev in events {
                let Some((_, role, _)) = self.dirs.iter().find(|(wd, _, _)| *wd == ev.wd) else {
                    continue;
                };
                let name = ev
                    .name
                    .as_ref()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                let self_event = ev.mask.intersects(
                    AddWatchFlags::IN_DELETE_SELF
                        | AddWatchFlags::IN_MOVE_SELF
                        | AddWatchFlags::IN_IGNORED,
                );
                if !self_event && !(self.filter)(*role, &name) {
                    continue;
                }
                match role {
                    Role::ConfDir => ch.conf = true,
                    Role::ServiceAccount => ch.service_account = true,
                    Role::BinDir => ch.bin = true,
                    Role::RunDir => ch.run = true,
                }
            }
        }
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
mod tests {
    use super::*;

    #[test]
    fn sees_renames_and_ignores_filtered_names() {
        let d = std::env::temp_dir().join(format!("watch-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let mut w = Watcher::new(Box::new(|_, n: &str| !n.contains(".tmp."))).unwrap();
        w.add(&d, Role::ConfDir).unwrap();
        assert_eq!(
            w.wait(None, Some(Duration::from_millis(20))).unwrap(),
            Wake::Timeout
        );
        std::fs::write(d.join("x.tmp.1"), b"x").unwrap();
        assert_eq!(
            w.wait(None, Some(Duration::from_millis(20))).unwrap(),
            Wake::Timeout
        );
        std::fs::rename(d.join("x.tmp.1"), d.join("x.conflist")).unwrap();
        match w.wait(None, Some(Duration::from_secs(5))).unwrap() {
            Wake::Changed(c) => assert!(c.conf),
            other => panic!("{other:?}"),
        }
        let (r, wfd) = nix::unistd::pipe().unwrap();
        nix::unistd::write(&wfd, b"x").unwrap();
        assert_eq!(w.wait(Some(r.as_fd()), None).unwrap(), Wake::Stop);
        std::fs::remove_dir_all(&d).unwrap();
    }
}
