//! The watch-and-reinstall loop (upstream master `Installer.Run` + `sleepWatchInstall`, event-driven):
//! install everything, validate, mark ready, block on inotify until something relevant changes, mark
//! not-ready, repeat. A primary that keeps reverting us is throttled by a token bucket (burst
//! [`BURST`], [`REFILL_PER_S`] per second): while it is empty we report not-ready and log the conflict once
//! per [`CONFLICT_LOG_INTERVAL`] instead of spinning.
//!
//! Before every check the candidates' link chains are resolved and every directory on them watched
//! ([`super::config::links`]); while waiting, they are re-resolved every [`RESOLVE_PERIOD`] (a few `lstat`s, no
//! reads) and lost watches re-placed, a backstop for a change no watch could see.

use super::config::check::Outcome;
use super::installer::{ConfigWrite, Installer};
use super::node::server::{InstallResult, State};
use super::watch::{Changes, Wake, Watcher};
use crate::error::Result;
use std::os::fd::BorrowedFd;
use std::time::{Duration, Instant};

/// How often the link chains are re-resolved and lost watches re-placed while waiting.
pub const RESOLVE_PERIOD: Duration = Duration::from_secs(5);

pub const BURST: f64 = 20.0;
pub const REFILL_PER_S: f64 = 5.0;
pub const CONFLICT_LOG_INTERVAL: Duration = Duration::from_secs(30);
const MAX_ERROR_BACKOFF: Duration = Duration::from_secs(30);

/// How the loop ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// The stop descriptor fired (SIGTERM/SIGINT).
    Stopped,
    /// `--once`: installed and valid.
    Installed,
    /// `--once`: no primary configuration within the wait timeout.
    TimedOut,
}

/// A token bucket limiting reinstalls.
#[derive(Debug)]
pub struct Bucket {
    tokens: f64,
    last: Instant,
}

impl Bucket {
    pub fn new() -> Bucket {
        Bucket {
            tokens: BURST,
            last: Instant::now(),
        }
    }
    /// Takes a token, or says how long until one is available.
    pub fn take(&mut self) -> std::result::Result<(), Duration> {
        let now = Instant::now();
        self.tokens =
            (self.tokens + now.duration_since(self.last).as_secs_f64() * REFILL_PER_S).min(BURST);
        self.last = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - self.tokens) / REFILL_PER_S))
        }
    }
}

impl Default for Bucket {
    fn default() -> Self {
        Self::new()
    }
}

fn all_dirty() -> Changes {
    Changes {
        conf: true,
        service_account: true,
        bin: true,
        run: true,
    }
}

/// Runs until stopped (or, with `once = Some(timeout)`, until installed or timed out).
/// Errors on the first pass (binaries, kubeconfig) and in `--once` mode end the loop; later ones are
/// retried with backoff while reporting not-ready.
pub fn run_loop(
    inst: &mut Installer,
    watcher: &mut Watcher,
    state: &State,
    stop: Option<BorrowedFd<'_>>,
    once: Option<Duration>,
) -> Result<End> {
    let deadline = once.map(|t| Instant::now() + t);
    let mut first = true;
    let mut dirty = all_dirty();
    let mut bucket = Bucket::new();
    let mut conflicts = 0u64;
    let mut last_conflict_log: Option<Instant> = None;
    let mut last_preempt_log: Option<Instant> = None;
    let mut waiting_logged = false;
    let mut err_backoff = Duration::from_millis(200);
    let mut last_warning: Option<String> = None;

    // Waits for a change; `Err(end)` when the loop must end.
    let wait = |inst: &Installer,
                watcher: &mut Watcher,
                limit: Option<Duration>|
     -> Result<std::result::Result<Changes, End>> {
        let remaining = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        let t = match (limit, remaining) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        match wait_change(inst, watcher, state, stop, t)? {
            Wake::Stop => Ok(Err(End::Stopped)),
            Wake::Changed(c) => Ok(Ok(c)),
            Wake::Timeout => {
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    Ok(Err(End::TimedOut))
                } else {
                    Ok(Ok(Changes::default()))
                }
            }
        }
    };

    loop {
        if super::watch::stop_pending(stop) {
            return Ok(End::Stopped);
        }
        match super::handover::supersede::yield_to_newer(inst, watcher, state, stop)? {
            Some(true) => dirty = all_dirty(),
            Some(false) => return Ok(End::Stopped),
            None => {}
        }
        if dirty.bin || first {
            if let Err(e) = inst.install_binaries() {
                state.count(InstallResult::CopyBinariesFailure);
                state.set_ready(false);
                if first || once.is_some() {
                    return Err(e);
                }
                log::error!("{e}; retrying in {err_backoff:?}");
                match wait(inst, watcher, Some(err_backoff))? {
                    Ok(mut c) => {
                        c.bin = true;
                        dirty = c;
                    }
                    Err(end) => return Ok(end),
                }
                err_backoff = (err_backoff * 2).min(MAX_ERROR_BACKOFF);
                continue;
            }
        }
        if dirty.service_account || dirty.run || first {
            match inst.write_kubeconfig() {
                Ok(true) if !first => log::info!("kubeconfig rewritten (service account change)"),
                Ok(_) => {}
                Err(e) => {
                    state.count(InstallResult::CreateKubeconfigFailure);
                    state.set_ready(false);
                    let e = crate::error::Context::context(Err::<(), _>(e), "write kubeconfig")
                        .unwrap_err();
                    if first || once.is_some() {
                        return Err(e);
                    }
                    log::error!("{e}; retrying in {err_backoff:?}");
                    match wait(inst, watcher, Some(err_backoff))? {
                        Ok(mut c) => {
                            c.service_account = true;
                            dirty = c;
                        }
                        Err(end) => return Ok(end),
                    }
                    err_backoff = (err_backoff * 2).min(MAX_ERROR_BACKOFF);
                    continue;
                }
            }
        }
        first = false;
        dirty = Changes::default();

        let reason = match round(
            inst,
            watcher,
            state,
            stop,
            once.is_none(),
            &mut last_warning,
        )? {
            RoundEnd::Invalid(reason) => reason,
            RoundEnd::Changed(c) => {
                dirty = c;
                continue;
            }
            RoundEnd::Preempted(reason) => {
                state.set_ready(false);
                let due = last_preempt_log.map_or(true, |t| t.elapsed() >= CONFLICT_LOG_INTERVAL);
                if due {
                    log::warn!("not ready: {reason}");
                    last_preempt_log = Some(Instant::now());
                }
                let next_log = last_preempt_log
                    .map(|t| CONFLICT_LOG_INTERVAL.saturating_sub(t.elapsed()))
                    .unwrap_or(CONFLICT_LOG_INTERVAL);
                match wait(inst, watcher, Some(next_log))? {
                    Ok(c) => dirty = c,
                    Err(end) => return Ok(end),
                }
                continue;
            }
            RoundEnd::Ready => return Ok(End::Installed),
            RoundEnd::Stopped => return Ok(End::Stopped),
        };
        state.set_ready(false);
        if inst.installed.is_some() {
            if let Err(delay) = bucket.take() {
                conflicts += 1;
                let due = last_conflict_log.map_or(true, |t| t.elapsed() >= CONFLICT_LOG_INTERVAL);
                if due {
                    log::warn!(
                        "configuration conflict: our CNI config keeps being invalidated ({reason}); \
                         {conflicts} throttled reinstalls so far; backing off (is another agent rewriting \
                         {}? with Cilium set cni.exclusive=false)",
                        inst.conf_dir().display()
                    );
                    last_conflict_log = Some(Instant::now());
                }
                match wait(inst, watcher, Some(delay))? {
                    Ok(c) => dirty = c,
                    Err(end) => return Ok(end),
                }
                continue;
            }
        }
        if inst.lease.as_mut().is_some_and(|l| l.newer().is_some()) {
            continue;
        }
        log::info!("installing the CNI configuration: {reason}");
        match inst.write_config() {
            Ok(ConfigWrite::Waiting(why)) => {
                if !waiting_logged {
                    log::info!(
                        "Waiting for CNI network config file to be written in {}... ({why})",
                        inst.conf_dir().display()
                    );
                    waiting_logged = true;
                }
                match wait(inst, watcher, None)? {
                    Ok(c) => dirty = c,
                    Err(end) => return Ok(end),
                }
                continue;
            }
            Ok(ConfigWrite::Installed { name, changed }) => {
                waiting_logged = false;
                err_backoff = Duration::from_millis(200);
                if changed {
                    log::info!(
                        "wrote the istio-cni configuration to {}/{}",
                        inst.conf_dir().display(),
                        super::config::select::shown(&name)
                    );
                }
            }
            Err(e) => {
                state.count(InstallResult::CreateCniConfigFailure);
                if once.is_some() {
                    return Err(e);
                }
                log::error!("{e}; retrying in {err_backoff:?}");
                match wait(inst, watcher, Some(err_backoff))? {
                    Ok(c) => dirty = c,
                    Err(end) => return Ok(end),
                }
                err_backoff = (err_backoff * 2).min(MAX_ERROR_BACKOFF);
                continue;
            }
        }
        // Validate what we wrote before reporting ready.
    }
}

/// How long a watched directory may show its deleted self before the installer exits, so the kubelet
/// restarts the container with the directory mounted afresh (upstream's chart has no liveness probe).
pub const DELETED_DIR_EXIT: Duration = Duration::from_secs(10);

/// Re-resolves the candidates' link chains (watching every directory on them, dropping the watches of
/// directories no longer on any), re-places lost watches, and reports liveness. Returns what changed
/// since the last look; an error once a watched directory has been deleted for [`DELETED_DIR_EXIT`].
fn refresh(inst: &Installer, watcher: &mut Watcher, state: &State) -> Result<Changes> {
    let mut ch = watcher.resync();
    if watcher.follow_links(super::config::links::chains_of(inst.conf_dir())) {
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
fn wait_change(
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
