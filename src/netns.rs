//! Network-namespace entry.
//!
//! A network namespace belongs to a thread, and a child process inherits the namespace of the thread that
//! spawned it. A process with other threads (the repair agent, tests) never switches a thread it does not
//! own: `run_in` spawns a short-lived thread, `setns`es it into the pod's namespace, runs the closure there
//! (which may exec `iptables-restore` or open netlink sockets) and lets the thread end. The CNI plugin is
//! one thread that exits right after: it declares so ([`sole_thread`]) and `run_in` then enters on the
//! calling thread and returns it to its own namespace afterwards, which saves the thread (its stack
//! mapping, clone, join and exit) on every ADD. Either way no thread is left in the pod namespace
//! afterwards (skel's `CheckNetNS`).

use crate::error::{Error, IoContext, Result};
use nix::sched::{setns, CloneFlags};
use std::fs::File;
use std::sync::atomic::{AtomicBool, Ordering};

/// Set once by a process that has no other thread and runs no other code while `run_in` runs.
static SOLE_THREAD: AtomicBool = AtomicBool::new(false);

/// Declares that this process is single-threaded and short-lived (the CNI plugin): [`run_in`] then runs
/// its closure on the calling thread. Only the plugin's entry point calls this.
pub fn sole_thread() {
    SOLE_THREAD.store(true, Ordering::Relaxed);
}

/// Runs `f` inside the network namespace at `path` (`/run/netns/x`, `/proc/<pid>/ns/net`): on a new thread,
/// or on this one in a [`sole_thread`] process.
pub fn run_in<R, F>(path: &str, f: F) -> Result<R>
where
    R: Send + 'static,
    F: FnOnce() -> Result<R> + Send + 'static,
{
    let ns = File::open(path).io_context(|| format!("open network namespace {path}"))?;
    let own = File::open("/proc/thread-self/ns/net").ok();
    refuse_host_namespace(path, &ns, own.as_ref())?;
    if let (true, Some(own)) = (SOLE_THREAD.load(Ordering::Relaxed), own) {
        enter(&ns, "enter", path)?;
        let r = f();
        // Back before anything else runs; failing that, ADD fails (closed) whatever `f` did.
        enter(&own, "return from", path)?;
        return r;
    }
    let path = path.to_string();
    spawn(move || {
        enter(&ns, "enter", &path)?;
        f()
    })
}

fn enter(ns: &File, what: &str, path: &str) -> Result<()> {
    setns(ns, CloneFlags::CLONE_NEWNET).map_err(|e| {
        Error::io(
            format!("{what} network namespace {path}"),
            std::io::Error::from(e),
        )
    })
}

/// A namespace's identity: `(st_dev, st_ino)` of its nsfs file.
pub type NsId = (u64, u64);

fn id_of(m: &std::fs::Metadata) -> NsId {
    use std::os::unix::fs::MetadataExt;
    (m.dev(), m.ino())
}

/// Which host namespace `target` is, if any: the plugin's own or PID 1's (pure).
pub fn host_namespace(target: NsId, own: Option<NsId>, init: Option<NsId>) -> Option<&'static str> {
    if own == Some(target) {
        Some("the plugin's own")
    } else if init == Some(target) {
        Some("PID 1's (the host's)")
    } else {
        None
    }
}

/// Refuses to enter the namespace we already run in or the host's (PID 1's): programming it would rewrite
/// the node's own nat table. A PID 1 namespace we cannot stat (no host PID namespace) is not compared.
/// `own` is the calling thread's namespace, when it could be opened.
fn refuse_host_namespace(path: &str, ns: &File, own: Option<&File>) -> Result<()> {
    let target = id_of(
        &ns.metadata()
            .io_context(|| format!("stat network namespace {path}"))?,
    );
    let own = match own {
        Some(f) => f.metadata().ok(),
        None => std::fs::metadata("/proc/self/ns/net").ok(),
    }
    .map(|m| id_of(&m));
    let init = std::fs::metadata("/proc/1/ns/net").ok().map(|m| id_of(&m));
    match host_namespace(target, own, init) {
        None => Ok(()),
        Some(which) => Err(Error::env(
            "CNI_NETNS",
            format!(
                "{path} is {which} network namespace, not a pod's; refusing to program the host's rules"
            ),
        )),
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_namespaces_are_recognised_by_device_and_inode() {
        let own = Some((4, 100));
        let init = Some((4, 200));
        assert_eq!(host_namespace((4, 300), own, init), None);
        assert!(host_namespace((4, 100), own, init).is_some());
        assert!(host_namespace((4, 200), own, init).is_some());
        // Same inode on another device is another namespace.
        assert_eq!(host_namespace((5, 100), own, init), None);
        assert_eq!(host_namespace((4, 200), own, None), None);
    }
}
