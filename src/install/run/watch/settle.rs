//! Waiting out an in-place write ([`Watcher::settle`]): a file written in place counts at its first
//! write (the runtime reloads on it), but is read only once its writer is done.

use super::{Changes, Wake, Watcher};
use crate::error::Result;
use std::os::fd::BorrowedFd;
use std::time::{Duration, Instant};

impl Watcher {
    /// After an in-place write not yet closed: waits until its writer has been quiet for `quiet` (or
    /// closed the file), at most `cap` in all, so the caller does not act on a half-written file (the
    /// runtime skips an invalid file; deriving the owned file from the next one would move the node's
    /// network for the rest of the write). The caller is not ready meanwhile. Returns the changes seen
    /// while waiting (`Wake::Timeout` when none), or `Wake::Stop`.
    pub fn settle(
        &mut self,
        stop: Option<BorrowedFd<'_>>,
        quiet: Duration,
        cap: Duration,
    ) -> Result<Wake> {
        let until = Instant::now() + cap;
        let mut acc = Changes::default();
        while let Some(at) = self.modified_at {
            let now = Instant::now();
            let calm = at + quiet;
            if now >= calm || now >= until {
                break;
            }
            match self.wait(stop, Some(calm.min(until) - now))? {
                Wake::Stop => return Ok(Wake::Stop),
                Wake::Changed(c) => acc.merge(c),
                Wake::Timeout => {}
            }
        }
        self.modified_at = None;
        Ok(if acc.any() {
            Wake::Changed(acc)
        } else {
            Wake::Timeout
        })
    }
}
