//! Network-namespace entry, scoped to one dedicated thread.
//!
//! A network namespace belongs to a thread, and a child process inherits the namespace of the thread that
//! spawned it. So we never switch the process's main thread: `run_in` spawns a short-lived thread, `setns`es it
//! into the pod's namespace, runs the closure there (which may exec `iptables-restore` or open netlink
//! sockets) and lets the thread end. No thread is left in the pod namespace afterwards (skel's `CheckNetNS`).

use crate::error::{Error, IoContext, Result};
use nix::sched::{setns, unshare, CloneFlags};
use std::fs::File;

/// Runs `f` on a new thread inside the network namespace at `path` (`/run/netns/x`, `/proc/<pid>/ns/net`).
pub fn run_in<R, F>(path: &str, f: F) -> Result<R>
where
    R: Send + 'static,
    F: FnOnce() -> Result<R> + Send + 'static,
{
    let ns = File::open(path).io_context(|| format!("open network namespace {path}"))?;
    let path_owned = path.to_string();
    spawn(move || {
        setns(&ns, CloneFlags::CLONE_NEWNET).map_err(|e| {
            Error::io(
                format!("enter network namespace {path_owned}"),
                std::io::Error::from(e),
            )
        })?;
        f()
    })
}

/// Runs `f` on a new thread inside a fresh, empty network namespace that disappears with the thread (used
/// to let iptables normalise a document without touching any real namespace).
pub fn run_in_scratch<R, F>(f: F) -> Result<R>
where
    R: Send + 'static,
    F: FnOnce() -> Result<R> + Send + 'static,
{
    spawn(move || {
        unshare(CloneFlags::CLONE_NEWNET).map_err(|e| {
            Error::io(
                "create a scratch network namespace",
                std::io::Error::from(e),
            )
        })?;
        f()
    })
}

fn spawn<R, F>(f: F) -> Result<R>
where
    R: Send + 'static,
    F: FnOnce() -> Result<R> + Send + 'static,
{
    let handle = std::thread::Builder::new()
        .name("netns".into())
        .spawn(f)
        .io_context(|| "spawn a thread for the network namespace".to_string())?;
    match handle.join() {
        Ok(r) => r,
        Err(_) => Err(Error::other("the network-namespace thread panicked")),
    }
}

/// The inode of a namespace file, to tell namespaces apart.
pub fn inode(path: &str) -> Result<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path)
        .map(|m| m.ino())
        .io_context(|| format!("stat {path}"))
}
