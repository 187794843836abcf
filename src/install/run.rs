//! The watch-and-reinstall loop (upstream master `Installer.Run` + `sleepWatchInstall`, event-driven):
//! install everything, validate, mark ready, block on inotify until something relevant changes, mark
//! not-ready, repeat. A primary that keeps reverting us is throttled by a token bucket (burst
//! [`BURST`], [`REFILL_PER_S`] per second): while it is empty we report not-ready and log the conflict once
//! per [`CONFLICT_LOG_INTERVAL`] instead of spinning.

use super::check::Outcome;
use super::installer::{ConfigWrite, Installer};
use super::server::{InstallResult, State};
use super::watch::{Changes, Wake, Watcher};
use crate::error::Result;
use std::os::fd::BorrowedFd;
use std::time::{Duration, Instant};

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
    let wait = |watcher: &mut Watcher,
                limit: Option<Duration>|
     -> Result<std::result::Result<Changes, End>> {
        let remaining = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        let t = match (limit, remaining) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        match watcher.wait(stop, t)? {
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
        if dirty.bin || first {
            if let Err(e) = inst.install_binaries() {
                state.count(InstallResult::CopyBinariesFailure);
                state.set_ready(false);
                if first || once.is_some() {
                    return Err(e);
                }
                log::error!("{e}; retrying in {err_backoff:?}");
                match wait(watcher, Some(err_backoff))? {
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
                    match wait(watcher, Some(err_backoff))? {
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
                match wait(watcher, Some(next_log))? {
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
                match wait(watcher, Some(delay))? {
                    Ok(c) => dirty = c,
                    Err(end) => return Ok(end),
                }
                continue;
            }
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
                match wait(watcher, None)? {
                    Ok(c) => dirty = c,
                    Err(end) => return Ok(end),
                }
                continue;
            }
            Ok(ConfigWrite::Installed { name, changed }) => {
                waiting_logged = false;
                watch_link_target(inst, watcher);
                err_backoff = Duration::from_millis(200);
                if changed {
                    log::info!(
                        "wrote the istio-cni configuration to {}/{}",
                        inst.conf_dir().display(),
                        super::select::shown(&name)
                    );
                }
            }
            Err(e) => {
                state.count(InstallResult::CreateCniConfigFailure);
                if once.is_some() {
                    return Err(e);
                }
                log::error!("{e}; retrying in {err_backoff:?}");
                match wait(watcher, Some(err_backoff))? {
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

/// A symlinked configuration is rewritten where its target lives: watch the target's directory too, for
/// every candidate link in the conf dir whose target is a regular file (the primary we wrote to, and the
/// file the runtime uses when CNI_CONF_NAME pins another). Called before every check, so a link
/// re-pointed at a target that already holds our entry (no reinstall follows) is watched as well.
/// Links to anything else (a device, a FIFO) are skipped: they are never valid candidates.
fn watch_link_target(inst: &Installer, watcher: &mut Watcher) {
    let dir = inst.conf_dir();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return; // a missing conf dir is reported by the check
    };
    for ent in entries.flatten() {
        let name = ent.file_name();
        if !super::select::is_candidate_name(&name)
            || !ent.file_type().is_ok_and(|t| t.is_symlink())
        {
            continue;
        }
        let link = ent.path();
        let Ok(target) = std::fs::canonicalize(&link) else {
            continue; // dangling: not a candidate
        };
        let Some(parent) = target.parent().filter(|_| target.is_file()) else {
            continue;
        };
        if let Err(e) = watcher.ensure(parent, super::watch::Role::ConfDir) {
            log::warn!(
                "changes to {} (the target of {}) will not be noticed: {e}",
                parent.display(),
                link.display()
            );
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
    let before = watcher.drain()?;
    if before.service_account || before.bin || before.run {
        state.set_ready(false);
        return Ok(RoundEnd::Changed(before));
    }
    watch_link_target(inst, watcher);
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
    let end = match watcher.wait(stop, None)? {
        Wake::Stop => RoundEnd::Stopped,
        Wake::Changed(c) => RoundEnd::Changed(c),
        Wake::Timeout => RoundEnd::Changed(Changes::default()),
    };
    state.set_ready(false);
    Ok(end)
}
