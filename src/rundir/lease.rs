//! Which `install-cni` agent owns the node's installation when several run at once: a lease in the run
//! dir, [`super::RunDir::LEASE`].
//!
//! Two agents share a node for a while in a `maxSurge` roll (the new pod starts before the old one
//! stops). The newest live agent owns the installation (our conf entry, the plugin binary, the
//! kubeconfig): it alone writes them. An older agent is *superseded*: it writes nothing (no fight over a
//! kubeconfig with another token or an entry with other settings), reports not ready, and keeps everything
//! at SIGTERM; when the newer agent is gone (stopped, crashed, SIGKILLed) it takes the node back.
//!
//! **Why locks.** Each agent holds a write lock (an open file description lock, `F_OFD_SETLK`) on its own
//! slot of the file: slot `g` is bytes `[g * SLOT, (g + 1) * SLOT)`, `g` the agent's generation. The
//! kernel drops the lock when the process ends, however it ends (exit, crash, SIGKILL, OOM kill), so a
//! held lock is a live agent and no record can go stale:
//! - no pid: agents run in their pods' pid namespaces (each may well be pid 1) and pids are reused; a lock
//!   lives on the file's inode on the host, whoever and wherever the holder is;
//! - no clock, start time or heartbeat to compare or refresh;
//! - cheap: "is a newer agent alive?" is one `fcntl(F_OFD_GETLK)` over the slots above ours, asked
//!   before every write.
//!
//! A joining agent takes the slot above the highest live one (joiners racing for a slot: the lock decides,
//! the loser looks again), so generations order the live agents by start. A container restarted in place
//! (same pod, the kubelet restarting it) finds its predecessor's lock gone and is the newest: it takes
//! over and never defers to a dead agent. The slot also holds the agent's name, for the others' log lines.
//! (Sockets were the other candidate: the newest binds one, `connect` tells a live one from a dead file.
//! But only the socket at the path can be asked, so an owner could not tell whether an older agent still
//! runs, which the stop needs.)
//!
//! **At stop** ([`Lease::at_stop`]) the last agent out decides by the SIGTERM rules (`install::handover`);
//! any other keeps everything: a newer agent owns the node, or an older one takes it back, or one
//! stopping at the same time decides. A stopping agent releases its slot, then tries a write lock on the
//! whole file. Of agents stopping together exactly one gets it (each tries after releasing its own slot,
//! so whichever tries last finds no other slot), and it holds it until it exits: an agent starting
//! meanwhile waits for that agent's cleanup to finish instead of installing under it.
//!
//! **Waiting for the newer agent to go** ([`Lease::wait_until_newest`]) looks again every [`LOOK_EVERY`]:
//! a few system calls while superseded, which lasts until the DaemonSet controller deletes the old pod
//! (seconds). Meanwhile the node keeps what the newer agent left (a SIGKILL removes nothing), so the only
//! thing that waits up to [`LOOK_EVERY`] is our answer to a primary rewritten in exactly that moment. A
//! helper thread blocked on the newer agent's lock would notice at once, for 4 KiB more binary, a thread,
//! a pipe and a second open file description; not worth it here.

use super::{identity, FileId, RunDir};
use crate::error::{IoContext, Result};
use nix::fcntl::{fcntl, FcntlArg};
use nix::libc;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use std::fs::File;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Bytes per slot: an agent's lock, and its name.
pub const SLOT: i64 = 128;
/// How often a superseded agent looks whether the newer agent is still there.
pub const LOOK_EVERY: Duration = Duration::from_millis(200);
/// Free slots a joiner tries (other joiners taking each first) before it gives up.
const ATTEMPTS: usize = 64;

/// Another live agent on the node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    /// Started after us: it owns the node's installation while it lives.
    pub newer: bool,
    /// Its name and generation, for the log.
    pub who: String,
    gen: i64,
}

/// This agent's place among the node's agents.
pub struct Lease {
    path: PathBuf,
    file: File,
    id: FileId,
    gen: i64,
    name: String,
    /// Holds the whole file: the last agent out, deciding ([`Lease::at_stop`]).
    whole: bool,
}

/// What holds a lock that conflicts with the one asked about.
#[derive(Debug, PartialEq, Eq)]
enum Holder {
    Slot(i64),
    /// A stopping agent deciding for the node (its lock starts in slot 0, which no agent takes).
    Whole,
}

fn slot(gen: i64) -> i64 {
    gen.saturating_mul(SLOT)
}

fn flock(kind: i32, start: i64, len: i64) -> libc::flock {
    libc::flock {
        l_type: kind as libc::c_short,
        l_whence: libc::SEEK_SET as libc::c_short,
        l_start: start,
        l_len: len,
        l_pid: 0,
    }
}

/// Places (`wait`: waiting for) or releases a lock; false when another open file description holds a
/// conflicting one.
fn set(f: &File, wait: bool, kind: i32, start: i64, len: i64) -> std::io::Result<bool> {
    let l = flock(kind, start, len);
    loop {
        let arg = if wait {
            FcntlArg::F_OFD_SETLKW(&l)
        } else {
            FcntlArg::F_OFD_SETLK(&l)
        };
        match fcntl(f.as_raw_fd(), arg) {
            Ok(_) => return Ok(true),
            Err(nix::errno::Errno::EINTR) => continue,
            Err(nix::errno::Errno::EAGAIN | nix::errno::Errno::EACCES) => return Ok(false),
            Err(e) => return Err(e.into()),
        }
    }
}

/// Who holds a lock overlapping `[start, start + len)` (`len` 0: to the end), other than `f`'s own.
fn holder(f: &File, start: i64, len: i64) -> std::io::Result<Option<Holder>> {
    let mut l = flock(libc::F_WRLCK, start, len);
    fcntl(f.as_raw_fd(), FcntlArg::F_OFD_GETLK(&mut l))?;
    Ok(match i32::from(l.l_type) {
        libc::F_UNLCK => None,
        _ if l.l_start < SLOT => Some(Holder::Whole),
        _ => Some(Holder::Slot(l.l_start / SLOT)),
    })
}

/// The highest live generation at or above `from` (0: none); `None` while a stopping agent holds the
/// whole file.
fn highest(f: &File, from: i64) -> std::io::Result<Option<i64>> {
    let (mut top, mut at) = (0, slot(from));
    // Each step moves past the slot it found; a node has a handful of agents.
    for _ in 0..ATTEMPTS {
        match holder(f, at, 0)? {
            None => return Ok(Some(top)),
            Some(Holder::Whole) => return Ok(None),
            Some(Holder::Slot(g)) => {
                top = top.max(g);
                at = slot(g.saturating_add(1)).max(at.saturating_add(SLOT));
            }
        }
    }
    Ok(Some(top))
}

/// Opens (or creates) the file, which must be this user's alone: any lock anyone holds in it counts as a
/// live agent, so a process that could open it could make every agent defer to it.
fn open(path: &Path) -> Result<File> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        // Never truncated: the live agents' names are in it.
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .io_context(|| format!("open {}", path.display()))?;
    let m = f
        .metadata()
        .io_context(|| format!("stat {}", path.display()))?;
    if m.uid() != nix::unistd::geteuid().as_raw() || m.mode() & 0o077 != 0 {
        return Err(crate::Error::config(format!(
            "{} is not this user's alone (owner uid {}, mode {:o})",
            path.display(),
            m.uid(),
            m.mode() & 0o7777
        )));
    }
    Ok(f)
}

fn id_of(f: &File) -> Option<FileId> {
    f.metadata().ok().map(|m| (m.dev(), m.ino()))
}

impl Lease {
    /// Joins the node's agents as the newest, named `name` in the others' logs. Waits while a stopping
    /// agent holds the whole file (it is cleaning up), saying so once.
    pub fn join(run_dir: &Path, name: &str) -> Result<Lease> {
        let path = RunDir::new(run_dir).lease();
        let mut said = false;
        for _ in 0..ATTEMPTS {
            let file = open(&path)?;
            let what = || format!("lock {}", path.display());
            let Some(top) = highest(&file, 1).io_context(what)? else {
                if !said {
                    log::info!("waiting for the agent stopping on this node to finish its cleanup");
                    said = true;
                }
                // Granted when that agent's process ends; the file may be gone then: open it again.
                set(&file, true, libc::F_RDLCK, 0, 1).io_context(what)?;
                continue;
            };
            let gen = top + 1;
            if !set(&file, false, libc::F_WRLCK, slot(gen), SLOT).io_context(what)? {
                continue;
            }
            // The last agent out removes the file while holding it whole: a file no longer at the path
            // is one no later agent will look at.
            let Some(id) = id_of(&file).filter(|id| identity(&path) == Some(*id)) else {
                continue;
            };
            let mut text = name.as_bytes().to_vec();
            text.resize(SLOT as usize, 0);
            if let Err(e) = file.write_at(&text, slot(gen) as u64) {
                log::warn!("{}: cannot record our name: {e}", path.display());
            }
            return Ok(Lease {
                path,
                file,
                id,
                gen,
                name: name.to_string(),
                whole: false,
            });
        }
        Err(crate::Error::other(format!(
            "{}: no free slot after {ATTEMPTS} attempts",
            path.display()
        )))
    }

    pub fn generation(&self) -> i64 {
        self.gen
    }

    fn peer(&self, gen: i64, newer: bool) -> Peer {
        let mut b = [0u8; SLOT as usize];
        let n = self.file.read_at(&mut b, slot(gen) as u64).unwrap_or(0);
        let name = String::from_utf8_lossy(&b[..n]);
        let name = name.trim_end_matches('\0').trim();
        Peer {
            newer,
            who: format!("{name}, generation {gen}")
                .trim_start_matches(", ")
                .to_string(),
            gen,
        }
    }

    /// The file at the path is still the one we hold a slot in; otherwise (removed or replaced by hand)
    /// joins the one there now, so agents starting later find us.
    fn follow(&mut self) {
        if identity(&self.path) == Some(self.id) {
            return;
        }
        let dir = self.path.parent().unwrap_or(Path::new("/")).to_path_buf();
        match Lease::join(&dir, &self.name) {
            Ok(l) => {
                log::warn!(
                    "{} was removed or replaced: joined it again as generation {}",
                    self.path.display(),
                    l.gen
                );
                *self = l;
            }
            Err(e) => log::warn!("{e}"),
        }
    }

    /// The newest live agent started after this one, if any: it owns the node's installation.
    pub fn newer(&mut self) -> Option<Peer> {
        self.follow();
        match highest(&self.file, self.gen + 1) {
            Ok(Some(g)) if g > self.gen => Some(self.peer(g, true)),
            _ => None,
        }
    }

    /// Waits until no newer agent is alive (true: this agent owns the node now) or `stop` is readable
    /// (false).
    pub fn wait_until_newest(&mut self, stop: Option<BorrowedFd<'_>>) -> Result<bool> {
        let every =
            PollTimeout::try_from(LOOK_EVERY.as_millis() as u32).unwrap_or(PollTimeout::MAX);
        while self.newer().is_some() {
            let mut fds: Vec<PollFd> = stop
                .into_iter()
                .map(|f| PollFd::new(f, PollFlags::POLLIN))
                .collect();
            match poll(&mut fds, every) {
                Ok(n) if n > 0 => return Ok(false),
                Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                Err(e) => return Err(crate::Error::io("poll", e.into())),
            }
        }
        Ok(true)
    }

    /// At stop: another live agent that keeps the node (this one then keeps everything), or `None`: this
    /// agent is the last one out and now holds the whole file until it exits (module docs).
    pub fn at_stop(&mut self) -> Option<Peer> {
        let newer = self.newer();
        let whole = set(&self.file, false, libc::F_UNLCK, slot(self.gen), SLOT)
            .and_then(|_| set(&self.file, false, libc::F_WRLCK, 0, 0));
        match whole {
            Ok(true) => {
                self.whole = true;
                None
            }
            Ok(false) => {
                Some(newer.unwrap_or_else(|| {
                    match holder(&self.file, 0, 0) {
                Ok(Some(Holder::Slot(g))) => self.peer(g, g > self.gen),
                _ => Peer {
                    newer: false,
                    who: "another agent stopping at the same time, which decides for the node"
                        .into(),
                    gen: 0,
                },
            }
                }))
            }
            Err(e) => {
                log::warn!(
                    "{}: {e}: cannot tell whether another agent runs on this node",
                    self.path.display()
                );
                None
            }
        }
    }

    /// True once [`Lease::at_stop`] found no other agent: this is the last one out.
    pub fn alone(&self) -> bool {
        self.whole
    }

    /// Cleanup by the last agent out: removes the file (still holding it whole, so an agent starting now
    /// joins a new one). A log note.
    pub fn remove(&self) -> Result<String> {
        let r = if self.whole && identity(&self.path) == Some(self.id) {
            crate::fsutil::remove_if_exists(&self.path)?
        } else {
            false
        };
        Ok(format!(
            "{}: {}",
            self.path.display(),
            if r { "removed" } else { "left in place" }
        ))
    }
}

/// `--uninstall`: removes the file unless an agent holds a slot in it. A log note.
pub fn remove_unheld(run_dir: &Path) -> Result<String> {
    let path = RunDir::new(run_dir).lease();
    let Ok(f) = File::options().read(true).write(true).open(&path) else {
        return Ok(format!("{}: absent", path.display()));
    };
    let free =
        set(&f, false, libc::F_WRLCK, 0, 0).io_context(|| format!("lock {}", path.display()))?;
    let note = if !free {
        "left in place: an agent runs"
    } else if id_of(&f) == identity(&path) && crate::fsutil::remove_if_exists(&path)? {
        "removed"
    } else {
        "absent"
    };
    Ok(format!("{}: {note}", path.display()))
}

#[cfg(test)]
#[path = "lease_tests.rs"]
mod tests;
