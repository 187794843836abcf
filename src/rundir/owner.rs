//! The run dir is trusted by what reads it: the plugin takes its kubeconfig, its backend records and its
//! pod cache socket from there, as root. The installer therefore makes sure, before writing anything, that
//! only root (or the user it runs as) can change what is in it: a directory others own is refused, one
//! that a group or other users may write is made `go-w` (a hostPath made by hand with `chmod 777`).

use crate::error::{Error, Result};
use std::path::Path;

/// What to do with the run dir as found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Fine,
    /// Drop group and other write: the mode to set.
    Tighten(u32),
    /// Owned by another user: refuse, with why.
    Refuse(String),
}

/// The verdict on a directory owned by `uid` with permission bits `mode`, for a process running as
/// `euid` (pure).
pub fn judge(uid: u32, mode: u32, euid: u32) -> Verdict {
    if !crate::fsutil::trusted_owner(uid, euid) {
        return Verdict::Refuse(format!(
            "it is owned by uid {uid}, not root: that user could replace the kubeconfig and the sockets \
             the plugin trusts there"
        ));
    }
    let mode = mode & 0o7777;
    if !crate::fsutil::owner_writes_only(mode) {
        return Verdict::Tighten(mode & !0o022);
    }
    Verdict::Fine
}

/// Applies [`judge`] to the run dir at `dir`.
pub fn make_private(dir: &Path) -> Result<()> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let m = std::fs::metadata(dir).map_err(|e| Error::io(format!("stat {}", dir.display()), e))?;
    match judge(m.uid(), m.mode(), nix::unistd::geteuid().as_raw()) {
        Verdict::Fine => Ok(()),
        Verdict::Tighten(mode) => {
            log::warn!(
                "run dir {}: mode {:o} lets others write into it; setting {mode:o}",
                dir.display(),
                m.mode() & 0o7777
            );
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode))
                .map_err(|e| Error::io(format!("chmod {:o} {}", mode, dir.display()), e))
        }
        Verdict::Refuse(why) => Err(Error::config(format!(
            "run dir {}: {why}; refusing to install (make it root's, mode 0755)",
            dir.display()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn others_may_neither_own_nor_write_the_run_dir() {
        assert_eq!(judge(0, 0o40755, 0), Verdict::Fine);
        assert_eq!(judge(1000, 0o700, 1000), Verdict::Fine);
        assert_eq!(judge(0, 0o40777, 0), Verdict::Tighten(0o755));
        assert_eq!(judge(0, 0o1775, 0), Verdict::Tighten(0o1755));
        assert_eq!(judge(0, 0o757, 1000), Verdict::Tighten(0o755));
        assert!(matches!(judge(65534, 0o755, 0), Verdict::Refuse(w) if w.contains("uid 65534")));
    }

    #[test]
    fn a_writable_run_dir_is_tightened_in_place() {
        use std::os::unix::fs::PermissionsExt;
        let dir = crate::fsutil::test_dir("rundir-owner");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        make_private(&dir).unwrap();
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o755);
        make_private(&dir).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }
}
