//! The older agent's side when two run on a node at once ([`crate::rundir::lease`]): the loop ([`crate::install::run`])
//! asks before its writes whether a newer agent owns the node, and then waits here.

use super::super::node::server::State;
use super::super::run::watch::Watcher;
use crate::error::Result;
use crate::rundir::lease::Lease;
use std::os::fd::BorrowedFd;

/// While a newer agent on this node owns the installation ([`crate::rundir::lease`]): write nothing (two
/// agents would rewrite each other's kubeconfig and entry), say not ready (the newer agent answers for
/// the node; the DaemonSet controller deletes this pod once that one is available), and wait until it is
/// gone or the stop. `None`: this agent owns the node; `Some(true)`: it took the node back (the caller does
/// everything again, as after a restart: [`crate::install::steps::Installer::take_back`]); `Some(false)`:
/// stopped.
pub fn yield_to_newer(
    lease: &mut Lease,
    watcher: &mut Watcher,
    state: &State,
    stop: Option<BorrowedFd<'_>>,
) -> Result<Option<bool>> {
    let Some(newer) = lease.newer() else {
        return Ok(None);
    };
    state.set_ready(false);
    log::info!(
        "superseded: a newer agent ({}) owns this node's installation; writing nothing and not ready \
         while it runs",
        newer.who
    );
    if !lease.wait_until_newest(stop)? {
        return Ok(Some(false));
    }
    log::warn!(
        "the newer agent ({}) is gone: taking this node's installation back",
        newer.who
    );
    watcher.drain()?;
    Ok(Some(true))
}
