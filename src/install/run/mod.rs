//! The watch-and-reinstall loop (upstream master `Installer.Run`): install everything, then rounds of
//! [`mod@round`] (validate, mark ready, block on inotify until something relevant changes, mark not-ready),
//! reinstalling after each. What to do next is decided by the table [`mod@next`]; here are only the effects.
//! A primary that keeps reverting us is throttled by a token bucket (burst [`next::BURST`],
//! [`next::REFILL_PER_S`] per second): while it is empty we report not-ready and log the conflict once per
//! [`next::CONFLICT_LOG_INTERVAL`] instead of spinning.

pub mod next;
pub mod round;
pub mod watch;

use crate::error::{Context, Result};
use crate::install::handover::supersede::yield_to_newer;
use crate::install::node::server::{InstallResult, State};
use crate::install::steps::{ConfigWrite, Installer};
use next::{next, Event, Failure, Pass, Say, Step};
use round::{round, wait_change, RoundEnd};
use std::os::fd::BorrowedFd;
use std::time::{Duration, Instant};
use watch::{Wake, Watcher};

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
    let mut pass = Pass::new(once.is_some(), Instant::now());
    let mut step = Step::Top;
    loop {
        let event = match step {
            Step::Top => top(inst, watcher, state, stop)?,
            Step::Binaries => match inst.install_binaries() {
                Ok(()) => Event::Binaries,
                Err(e) => failed(state, Failure::Binaries, e),
            },
            Step::Kubeconfig { rotation } => {
                match inst.write_kubeconfig().context("write kubeconfig") {
                    Ok(rewritten) => {
                        if rewritten && rotation {
                            log::info!("kubeconfig rewritten (service account change)");
                        }
                        Event::Kubeconfig
                    }
                    Err(e) => failed(state, Failure::Kubeconfig, e),
                }
            }
            Step::Round => {
                let end = round(inst, watcher, state, stop, once.is_none(), &mut pass.warned)?;
                round_event(inst, end)
            }
            Step::Write(reason) => write(inst, state, &reason),
            Step::Wait { limit, say } => {
                say_before_wait(inst, say);
                wait(inst, watcher, state, stop, limit, deadline)?
            }
            Step::Fail(e) => return Err(e),
            Step::End(end) => return Ok(end),
        };
        step = next(&mut pass, event);
    }
}

/// The top of a pass: the stop, then a newer agent owning the node (waited for here).
fn top(
    inst: &mut Installer,
    watcher: &mut Watcher,
    state: &State,
    stop: Option<BorrowedFd<'_>>,
) -> Result<Event> {
    if watch::stop_pending(stop) {
        return Ok(Event::Signal);
    }
    let Some(lease) = inst.lease_mut() else {
        return Ok(Event::Owner);
    };
    Ok(match yield_to_newer(lease, watcher, state, stop)? {
        Some(true) => {
            inst.take_back();
            Event::TookBack
        }
        Some(false) => Event::Signal,
        None => Event::Owner,
    })
}

/// A failed step: counted, not ready.
fn failed(state: &State, f: Failure, e: crate::Error) -> Event {
    state.count(match f {
        Failure::Binaries => InstallResult::CopyBinariesFailure,
        Failure::Kubeconfig => InstallResult::CreateKubeconfigFailure,
        Failure::Config => InstallResult::CreateCniConfigFailure,
    });
    state.set_ready(false);
    Event::Failed(f, e)
}

/// Writes our configuration unless a newer agent owns the node.
fn write(inst: &mut Installer, state: &State, reason: &str) -> Event {
    if inst.superseded() {
        return Event::Newer;
    }
    log::info!("installing the CNI configuration: {reason}");
    match inst.write_config() {
        Ok(ConfigWrite::Waiting(why)) => Event::Waiting(why),
        Ok(ConfigWrite::Installed { name, changed }) => {
            if changed {
                log::info!(
                    "wrote the istio-cni configuration to {}/{}",
                    inst.conf_dir().display(),
                    crate::install::config::select::shown(&name)
                );
            }
            Event::Written
        }
        Err(e) => failed(state, Failure::Config, e),
    }
}

/// How a round ended, as the table's event.
fn round_event(inst: &Installer, end: RoundEnd) -> Event {
    let at = Instant::now();
    match end {
        RoundEnd::Invalid(reason) => Event::Invalid {
            reason,
            installed: inst.installed().is_some(),
            at,
        },
        RoundEnd::Changed(c) => Event::Changed(c),
        RoundEnd::Preempted(reason) => Event::Preempted { reason, at },
        RoundEnd::Binary(reason) => Event::Binary(reason),
        RoundEnd::Ready => Event::Ready,
        RoundEnd::Stopped => Event::Signal,
    }
}

/// Waits for a change, the stop, `limit` or the `--once` `deadline`, whichever comes first.
fn wait(
    inst: &Installer,
    watcher: &mut Watcher,
    state: &State,
    stop: Option<BorrowedFd<'_>>,
    limit: Option<Duration>,
    deadline: Option<Instant>,
) -> Result<Event> {
    let remaining = deadline.map(|d| d.saturating_duration_since(Instant::now()));
    let limit = match (limit, remaining) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    Ok(match wait_change(inst, watcher, state, stop, limit)? {
        Wake::Stop => Event::Signal,
        Wake::Changed(c) => Event::Changed(c),
        Wake::Timeout => Event::Timer {
            deadline: deadline.is_some_and(|d| Instant::now() >= d),
        },
    })
}

fn say_before_wait(inst: &Installer, say: Say) {
    match say {
        Say::Nothing => {}
        Say::Retry(e, delay) => log::error!("{e}; retrying in {delay:?}"),
        Say::Preempted(reason) => log::warn!("not ready: {reason}"),
        Say::Binary(reason) => log::warn!(
            "not ready: {reason}, still after installing the binaries again \
             (UPDATE_CNI_BINARIES=false keeps an existing file); waiting for a change in the bin dir"
        ),
        Say::Conflict(reason, conflicts) => log::warn!(
            "configuration conflict: our CNI config keeps being invalidated ({reason}); \
             {conflicts} throttled reinstalls so far; backing off (is another agent rewriting \
             {}? with Cilium set cni.exclusive=false)",
            inst.conf_dir().display()
        ),
        Say::Waiting(why) => log::info!(
            "Waiting for CNI network config file to be written in {}... ({why})",
            inst.conf_dir().display()
        ),
    }
}
