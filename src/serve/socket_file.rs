//! A unix socket file this process bound in the run dir (the pod cache's, the log relay's), looked at
//! every [`RECHECK`]: bound again when it has been missing at two looks in a row (someone removed it: an
//! older agent's cleanup, by hand), left alone while another live process has it (a newer agent), and
//! bound again when nobody listens on it any more (that agent is gone: SIGKILLed, crashed, or stopped
//! leaving its files for the next one). Two looks before binding a missing file again, because this
//! process's own cleanup removes it just before exiting.

use crate::error::{IoContext, Result};
use crate::rundir::{self, FileId};
use nix::sys::socket::{self as s, AddressFamily, SockFlag, SockType, UnixAddr};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How often the file is looked at (and, for the pod cache, its heartbeat touched).
pub const RECHECK: Duration = Duration::from_secs(2);

/// Binds `path` (a stream socket listening and non-blocking, a datagram socket blocking): under a
/// temporary name, restricted to 0600, then renamed over `path`, so it never exists with a wider mode and
/// a stale socket is replaced in one step. The file is claimed as this process's ([`rundir::claim_id`]).
pub fn bind(path: &Path, kind: SockType) -> Result<(OwnedFd, FileId)> {
    let tmp = crate::fsutil::temp_path_for(path);
    let _ = std::fs::remove_file(&tmp);
    let stream = kind == SockType::Stream;
    let nonblock = if stream {
        SockFlag::SOCK_NONBLOCK
    } else {
        SockFlag::empty()
    };
    let fd = s::socket(
        AddressFamily::Unix,
        kind,
        SockFlag::SOCK_CLOEXEC | nonblock,
        None,
    )
    .and_then(|fd| {
        s::bind(fd.as_raw_fd(), &UnixAddr::new(&tmp)?)?;
        if stream {
            super::listen(&fd)?;
        }
        Ok(fd)
    })
    .map_err(io::Error::from)
    .io_context(|| format!("bind {}", tmp.display()))?;
    let placed =
        std::fs::set_permissions(&tmp, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .and_then(|()| rundir::identity(&tmp).ok_or_else(|| io::ErrorKind::NotFound.into()))
            .and_then(|id| std::fs::rename(&tmp, path).map(|()| id));
    match placed {
        Ok(id) => {
            rundir::claim_id(path, id);
            Ok((fd, id))
        }
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(crate::Error::io(format!("install {}", path.display()), e))
        }
    }
}

/// Whether a process listens on the socket at `path`: only a refused connection says no (not, say,
/// running out of descriptors). Non-blocking, so a listener whose backlog is full cannot stall the caller.
fn listened(path: &Path, kind: SockType) -> bool {
    let flags = SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK;
    let tried = s::socket(AddressFamily::Unix, kind, flags, None)
        .and_then(|fd| s::connect(fd.as_raw_fd(), &UnixAddr::new(path)?));
    tried != Err(nix::errno::Errno::ECONNREFUSED)
}

/// What a look at the socket file asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Look {
    /// Nothing to do.
    Keep,
    /// Bind it again.
    Bind,
    /// Another process bound it (said once).
    Replaced,
}

/// The socket file, as this process bound it.
pub struct SocketFile {
    path: PathBuf,
    /// For the log: `pod cache`, `log relay`.
    what: &'static str,
    kind: SockType,
    ours: FileId,
    missing: bool,
    replaced: bool,
}

impl SocketFile {
    pub fn new(path: PathBuf, what: &'static str, kind: SockType, ours: FileId) -> SocketFile {
        SocketFile {
            path,
            what,
            kind,
            ours,
            missing: false,
            replaced: false,
        }
    }

    /// Pure: what to do, given what is at the path now and (asked only for another's) whether a process
    /// listens on it.
    fn look(&mut self, now: Option<FileId>, listened: impl FnOnce() -> bool) -> Look {
        match now {
            None if !self.missing => {
                self.missing = true;
                Look::Keep
            }
            None => Look::Bind,
            Some(id) => {
                self.missing = false;
                if id != self.ours && !listened() {
                    return Look::Bind;
                }
                if id != self.ours && !self.replaced {
                    self.replaced = true;
                    return Look::Replaced;
                }
                Look::Keep
            }
        }
    }

    /// One look (every [`RECHECK`]): the new socket when the file had to be bound again. `heartbeat`:
    /// sets the file's times to now while it is this process's (the pod cache's sign of life, read by the
    /// plugin; another agent's file carries that agent's).
    pub fn tend(&mut self, heartbeat: bool) -> Option<OwnedFd> {
        let (path, kind) = (self.path.clone(), self.kind);
        let now = rundir::identity(&path);
        match self.look(now, || listened(&path, kind)) {
            Look::Keep if heartbeat && now == Some(self.ours) => touch(&path),
            Look::Keep => {}
            Look::Replaced => log::warn!(
                "{}: {} now belongs to another process (a newer agent); left to it",
                self.what,
                path.display()
            ),
            Look::Bind => match bind(&path, kind) {
                Ok((fd, id)) => {
                    let why = match now {
                        None => "was removed",
                        Some(_) => "was left by an agent that is gone",
                    };
                    log::warn!("{}: {} {why}; bound it again", self.what, path.display());
                    *self = SocketFile::new(path, self.what, kind, id);
                    return Some(fd);
                }
                Err(e) => log::warn!("{}: {e}", self.what),
            },
        }
        None
    }
}

fn touch(path: &Path) {
    use nix::sys::stat::{utimensat, UtimensatFlags};
    use nix::sys::time::TimeSpec;
    let now = TimeSpec::UTIME_NOW;
    if let Err(e) = utimensat(None, path, &now, &now, UtimensatFlags::NoFollowSymlink) {
        log::debug!("heartbeat on {}: {e}", path.display());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bound_again_after_two_looks_at_a_missing_file_and_over_another_only_when_nobody_listens() {
        let ours = (1, 10);
        let asked = || -> bool { panic!("our own socket: nobody to ask") };
        let path = PathBuf::from("/run/x/log.sock");
        let mut f = SocketFile::new(path.clone(), "log relay", SockType::Datagram, ours);
        assert_eq!(f.look(Some(ours), asked), Look::Keep);
        assert_eq!(
            f.look(None, asked),
            Look::Keep,
            "our own cleanup, about to exit"
        );
        assert_eq!(
            f.look(Some(ours), asked),
            Look::Keep,
            "back: the count starts over"
        );
        assert_eq!(f.look(None, asked), Look::Keep);
        assert_eq!(f.look(None, asked), Look::Bind);
        let mut f = SocketFile::new(path, "log relay", SockType::Datagram, ours);
        assert_eq!(f.look(Some((1, 11)), || true), Look::Replaced);
        assert_eq!(f.look(Some((1, 11)), || true), Look::Keep, "said once");
        // That agent is gone (its file is left, nobody listens): bound again.
        assert_eq!(f.look(Some((1, 11)), || false), Look::Bind);
    }
}
