//! The watch-and-reinstall loop (upstream master `Installer.Run`): install everything, then rounds of
//! [`round`] (validate, mark ready, block on inotify until something relevant changes, mark
//! not-ready), reinstalling after each. A primary that keeps reverting us is throttled by a token bucket
//! (burst [`BURST`], [`REFILL_PER_S`] per second): while it is empty we report not-ready and log the
//! conflict once per [`CONFLICT_LOG_INTERVAL`] instead of spinning.

pub mod next;
pub mod round;
pub mod watch;

use crate::error::{Context, Result};
use crate::install::node::server::{InstallResult, State};
use crate::install::steps::{ConfigWrite, Installer};
use crate::kube::Backoff;
use round::{round, wait_change, RoundEnd};
use std::os::fd::BorrowedFd;
use std::time::{Duration, Instant};
use watch::{Changes, Wake, Watcher};

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
struct Bucket {
    tokens: f64,
    last: Instant,
}

impl Bucket {
    fn new() -> Bucket {
        Bucket {
            tokens: BURST,
            last: Instant::now(),
        }
    }
    /// Takes a token, or says how long until one is available.
    fn take(&mut self) -> std::result::Result<(), Duration> {
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
    let mut backoff = Backoff::new(Duration::from_millis(200), MAX_ERROR_BACKOFF);
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
    // What changed while waiting (see `wait`), or the loop ends.
    macro_rules! wait_for {
        ($limit:expr) => {
            match wait(inst, watcher, $limit)? {
                Ok(c) => c,
                Err(end) => return Ok(end),
            }
        };
    }

    loop {
        if watch::stop_pending(stop) {
            return Ok(End::Stopped);
        }
        match crate::install::handover::supersede::yield_to_newer(inst, watcher, state, stop)? {
            Some(true) => dirty = all_dirty(),
            Some(false) => return Ok(End::Stopped),
            None => {}
        }
        // A failed step: not ready; it ends the first pass and `--once`, else it is retried with backoff.
        let mut failed = None;
        if dirty.bin || first {
            if let Err(e) = inst.install_binaries() {
                let redo = Changes {
                    bin: true,
                    ..Changes::default()
                };
                failed = Some((e, InstallResult::CopyBinariesFailure, redo));
            }
        }
        if failed.is_none() && (dirty.service_account || dirty.run || first) {
            match inst.write_kubeconfig().context("write kubeconfig") {
                Ok(true) if !first => log::info!("kubeconfig rewritten (service account change)"),
                Ok(_) => {}
                Err(e) => {
                    let redo = Changes {
                        service_account: true,
                        ..Changes::default()
                    };
                    failed = Some((e, InstallResult::CreateKubeconfigFailure, redo));
                }
            }
        }
        if let Some((e, result, redo)) = failed {
            state.count(result);
            state.set_ready(false);
            if first || once.is_some() {
                return Err(e);
            }
            let delay = backoff.next_delay();
            log::error!("{e}; retrying in {delay:?}");
            dirty = wait_for!(Some(delay));
            dirty.merge(redo);
            continue;
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
                dirty = wait_for!(Some(next_log));
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
                dirty = wait_for!(Some(delay));
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
                dirty = wait_for!(None);
                continue;
            }
            Ok(ConfigWrite::Installed { name, changed }) => {
                waiting_logged = false;
                backoff.reset();
                if changed {
                    log::info!(
                        "wrote the istio-cni configuration to {}/{}",
                        inst.conf_dir().display(),
                        crate::install::config::select::shown(&name)
                    );
                }
            }
            Err(e) => {
                state.count(InstallResult::CreateCniConfigFailure);
                if once.is_some() {
                    return Err(e);
                }
                let delay = backoff.next_delay();
                log::error!("{e}; retrying in {delay:?}");
                dirty = wait_for!(Some(delay));
                continue;
            }
        }
        // Validate what we wrote before reporting ready.
    }
}
