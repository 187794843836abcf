//! The cache the node's pod watch fills (it is the watch's [`PodSink`]) and the socket server reads: the
//! [`Store`] behind a lock, and a wake-up (a socket pair) so the server's poll loop answers lookups waiting
//! for a pod as soon as it lands.

use super::metrics;
use super::proto::Request;
use super::store::{Lookup, Store};
use crate::error::{IoContext, Result};
use crate::json::Object;
use crate::kube::podwatch::PodSink;
use crate::redirect::reduce;
use std::io::Write;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex, MutexGuard};

struct Inner {
    store: Mutex<Store>,
    wake_tx: UnixStream,
    wake_rx: UnixStream,
}

/// The cache the watch fills and the server reads. Cloning shares it.
#[derive(Clone)]
pub struct Cache {
    inner: Arc<Inner>,
}

impl Cache {
    pub fn new() -> Result<Cache> {
        let (wake_tx, wake_rx) =
            UnixStream::pair().io_context(|| "pod cache: socketpair".into())?;
        for s in [&wake_tx, &wake_rx] {
            s.set_nonblocking(true)
                .io_context(|| "pod cache: non-blocking wake-up".into())?;
        }
        Ok(Cache {
            inner: Arc::new(Inner {
                store: Mutex::new(Store::default()),
                wake_tx,
                wake_rx,
            }),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Store> {
        self.inner.store.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Changes the store and wakes the server, so lookups waiting for a pod are answered at once.
    pub fn update<R>(&self, f: impl FnOnce(&mut Store) -> R) -> R {
        let mut s = self.lock();
        let r = f(&mut s);
        metrics::set_pods(s.len());
        drop(s);
        // Non-blocking: a full socket buffer already holds a wake-up.
        let _ = (&self.inner.wake_tx).write(&[1]);
        r
    }

    pub fn lookup(&self, req: &Request, may_wait: bool) -> Lookup {
        self.lock().lookup(req, may_wait)
    }

    /// What the server polls (and reads empty) to learn that the store changed.
    pub(super) fn wake_fd(&self) -> BorrowedFd<'_> {
        self.inner.wake_rx.as_fd()
    }
}

/// The node's pod watch fills the cache: each pod reduced outside the lock (the server never waits for
/// the reduction).
impl PodSink for Cache {
    fn pod(&mut self, pod: &Object) {
        let r = reduce::reduce(pod);
        self.update(|s| s.apply(r));
    }

    fn gone(&mut self, key: &str, uid: &str) {
        self.update(|s| s.delete(key, uid));
    }

    fn list_done(&mut self) {
        let (first, n) = self.update(|s| {
            let first = !s.listed();
            s.list_done();
            (first, s.len())
        });
        if first {
            log::info!("pod cache: synced, {n} pods of this node");
        }
    }

    fn watch_up(&mut self, restart: bool) {
        self.update(|s| s.watch_open());
        if restart {
            metrics::watch_restarted();
        }
    }

    fn watch_down(&mut self) {
        self.update(|s| s.watch_closed());
    }
}
