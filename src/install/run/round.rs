//! One round of upstream master's `sleepWatchInstall`, event-driven: validate, mark ready, block on
//! inotify until something relevant changes, mark not-ready. The loop around it is [`super`].
//!
//! Before every check the candidates' link chains are resolved and every directory on them watched
//! ([`crate::install::config::links`]); while waiting, they are re-resolved every [`RESOLVE_PERIOD`] (a few `lstat`s, no
//! reads) and lost watches re-placed, a backstop for a change no watch could see.

use super::watch::{Changes, Wake, Watcher};
use crate::error::Result;
use crate::install::config::check::Outcome;
use crate::install::node::server::{InstallResult, State};
use crate::install::steps::Installer;
use std::os::fd::BorrowedFd;
use std::time::{Duration, Instant};

/// How often the link chains are re-resolved and lost watches re-placed while waiting.
pub const RESOLVE_PERIOD: Duration = Duration::from_secs(5);

/// An in-place write is acted on once its writer has been quiet this long (or closed the file) ...
pub const SETTLE_QUIET: Duration = Duration::from_millis(100);
/// ... or after this long at most, for a writer that keeps writing.
pub const SETTLE_CAP: Duration = Duration::from_secs(2);

/// How long a watched directory may show its deleted self before the installer exits, so the kubelet
/// restarts the container with the directory mounted afresh (upstream's chart has no liveness probe).
pub const DELETED_DIR_EXIT: Duration = Duration::from_secs(10);

/// Re-resolves the candidates' link chains (watching every directory on them, dropping the watches of
/// directories no longer on any), re-places lost watches, and reports liveness. Returns what changed
/// since the last look; an error once a watched directory has been deleted for [`DELETED_DIR_EXIT`].
fn refresh(inst: &Installer, watcher: &mut Watcher, state: &State) -> Result<Changes> {
    let mut ch = watcher.resync();
    if watcher.follow_links(crate::install::config::links::chains_of(inst.conf_dir())) {
        ch.conf = true;
    }
    let health = watcher.health();
    let was = state.set_healthy(health.is_none());
    match &health {
        Some(why) if was => {
            log::error!("{why}; /healthz now answers 503 (and the installer exits if it lasts)")
        }
        None if !was => {
            log::info!("all watched directories are followed again; /healthz answers 200")
        }
        _ => {}
    }
    match watcher.deleted_for() {
        Some(d) if d >= DELETED_DIR_EXIT => {
            // A restart, not an uninstall: the exit keeps everything in place (install::cli).
            state.request_restart();
            Err(crate::Error::other(format!(
                "{} (for {} s): exiting, so the container is restarted and sees the directory anew",
                health
                    .as_deref()
                    .unwrap_or("a watched directory was deleted"),
                d.as_secs()
            )))
        }
        _ => Ok(ch),
    }
}

/// Waits for a change, the stop descriptor or `limit` (`None`: none), refreshing ([`refresh`]) every
/// [`RESOLVE_PERIOD`]: a change only the refresh sees ends the wait too.
pub(super) fn wait_change(
    inst: &Installer,
    watcher: &mut Watcher,
    state: &State,
    stop: Option<BorrowedFd<'_>>,
    limit: Option<Duration>,
) -> Result<Wake> {
    let deadline = limit.map(|l| Instant::now() + l);
    loop {
        let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        let t = left.map_or(RESOLVE_PERIOD, |l| l.min(RESOLVE_PERIOD));
        match watcher.wait(stop, Some(t))? {
            Wake::Timeout if deadline.is_some_and(|d| Instant::now() >= d) => {
                return Ok(Wake::Timeout)
            }
            Wake::Timeout => {
                let ch = refresh(inst, watcher, state)?;
                if ch.any() {
                    return Ok(Wake::Changed(ch));
                }
            }
            other => return Ok(other),
        }
    }
}

/// How one validation round ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RoundEnd {
    /// The installed configuration is invalid or missing: reinstall (readiness stays false).
    Invalid(String),
    /// CNI_CONF_NAME is pinned and the runtime uses another file without our entry: not ready, nothing
    /// to rewrite; wait for a change.
    Preempted(String),
    /// Our plugin binary cannot be run (missing, not a regular file, not executable): not ready;
    /// install the binaries again.
    Binary(String),
    /// Something changed (before or after readiness); readiness is false again.
    Changed(Changes),
    /// Valid and ready, and the caller asked not to wait (`--once`).
    Ready,
    /// The stop descriptor fired.
    Stopped,
}

/// One round of upstream's `sleepWatchInstall`: validate; when valid and no event arrived during the
/// check, mark ready
/// (counting a successful install) and, with `wait`, block until a relevant change; every exit with a
/// change marks not-ready.
pub fn round(
    inst: &mut Installer,
    watcher: &mut Watcher,
    state: &State,
    stop: Option<BorrowedFd<'_>>,
    wait: bool,
    last_warning: &mut Option<String>,
) -> Result<RoundEnd> {
    // Conf-dir events from before the check are reflected by the check itself; other changes are
    // handed back so the loop refreshes binaries or the kubeconfig first.
    let mut before = watcher.drain()?;
    // Not ready here (a round starts after a change, or first): a file written in place is read once
    // its writer is done.
    match watcher.settle(stop, SETTLE_QUIET, SETTLE_CAP)? {
        Wake::Stop => return Ok(RoundEnd::Stopped),
        Wake::Changed(c) => before.merge(c),
        Wake::Timeout => {}
    }
    before.merge(refresh(inst, watcher, state)?);
    if before.service_account || before.bin || before.run {
        state.set_ready(false);
        return Ok(RoundEnd::Changed(before));
    }
    match inst.check() {
        Outcome::Invalid { reason } => {
            state.set_ready(false);
            return Ok(RoundEnd::Invalid(reason));
        }
        Outcome::Preempted { reason, .. } => {
            state.set_ready(false);
            return Ok(RoundEnd::Preempted(reason));
        }
        Outcome::Binary { reason } => {
            log::warn!("not ready: {reason}");
            state.set_ready(false);
            return Ok(RoundEnd::Binary(reason));
        }
        Outcome::Valid { warning: Some(w) } => {
            if last_warning.as_deref() != Some(w.as_str()) {
                log::warn!("{w}");
                *last_warning = Some(w);
            }
        }
        Outcome::Valid { warning: None } => {}
    }
    let pending = watcher.drain()?;
    if pending.any() {
        state.set_ready(false);
        return Ok(RoundEnd::Changed(pending));
    }
    state.set_ready(true);
    state.count(InstallResult::Success);
    if !wait {
        return Ok(RoundEnd::Ready);
    }
    let end = match wait_change(inst, watcher, state, stop, None)? {
        Wake::Stop => RoundEnd::Stopped,
        Wake::Changed(c) => RoundEnd::Changed(c),
        Wake::Timeout => RoundEnd::Changed(Changes::default()),
    };
    state.set_ready(false);
    Ok(end)
}
