//! The chaos lanes. Each lane runs its enabled kinds in rounds, every round a seeded shuffle of them, with a
//! seeded pause before each event, until the soak's deadline; an event runs to its end (the node recovered)
//! before the lane draws the next one. Every draw comes from the lane's own stream and none depends on an
//! outcome, so a seed replays each lane's sequence exactly.

use super::confdir::{self, ConfState};
use super::lifecycle;
use super::options::{Kind, Lane};
use super::rng::Rng;
use super::{Event, Soak};
use kube_double::Fault;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Pauses between a lane's events (ms).
fn gap(lane: Lane) -> (u64, u64) {
    match lane {
        Lane::Lifecycle => (5_000, 15_000),
        Lane::ConfDir => (2_000, 7_000),
        Lane::Api => (4_000, 12_000),
    }
}

fn stream(lane: Lane) -> u64 {
    match lane {
        Lane::Lifecycle => 1,
        Lane::ConfDir => 2,
        Lane::Api => 3,
    }
}

/// One round's actions: the lane's enabled kinds, appear/disappear as one toggle.
fn actions(soak: &Soak, lane: Lane) -> Vec<Kind> {
    soak.opts
        .kinds
        .iter()
        .copied()
        .filter(|k| k.lane() == lane && *k != Kind::PrimaryDisappear)
        .collect()
}

pub async fn lane(soak: Arc<Soak>, lane: Lane) {
    let kinds = actions(&soak, lane);
    if kinds.is_empty() {
        return;
    }
    let mut rng = Rng::new(soak.opts.seed, stream(lane));
    let (lo, hi) = gap(lane);
    let mut conf = ConfState::new();
    let mut reboots = 0;
    'run: loop {
        let mut round = kinds.clone();
        rng.shuffle(&mut round);
        for kind in round {
            let pause = rng.ms(lo, hi);
            let left = soak.deadline.saturating_duration_since(Instant::now());
            tokio::time::sleep(pause.min(left)).await;
            if Instant::now() >= soak.deadline {
                break 'run;
            }
            let start = Instant::now();
            let mut ev = Event {
                kind,
                start,
                end: start,
                detail: String::new(),
                error: None,
                exposure_ms: None,
                converge_ms: None,
                kill_at: None,
            };
            match kind {
                Kind::RollSurge | Kind::RollUnavailable => note(
                    &mut ev,
                    lifecycle::roll(&soak, kind == Kind::RollSurge).await,
                ),
                Kind::AgentKill => {
                    let after = rng.ms(0, 1_000);
                    note(&mut ev, lifecycle::agent_kill(&soak, after).await)
                }
                Kind::ContainerdRestart => match lifecycle::containerd_restart(&soak).await {
                    Ok((at, d)) => {
                        ev.kill_at = Some(at);
                        ev.detail = d;
                    }
                    Err(e) => ev.error = Some(e),
                },
                Kind::Reboot => {
                    reboots += 1;
                    match lifecycle::reboot(&soak, reboots).await {
                        Ok((at, d)) => {
                            ev.kill_at = Some(at);
                            ev.detail = d;
                        }
                        Err(e) => ev.error = Some(e),
                    }
                }
                Kind::ApiFault => ev.detail = api_fault(&soak, &mut rng).await,
                Kind::ApiOutage => ev.detail = api_outage(&soak, &mut rng).await,
                Kind::PrimaryRewrite | Kind::PrimaryAppear | Kind::PrimaryDisappear => {
                    let r = if kind == Kind::PrimaryRewrite {
                        confdir::rewrite(&soak, &mut conf).await
                    } else if conf.higher {
                        ev.kind = Kind::PrimaryDisappear;
                        confdir::disappear(&soak, &mut conf).await
                    } else {
                        confdir::appear(&soak, &mut conf).await
                    };
                    match r {
                        Ok(seen) => {
                            ev.detail = seen.detail;
                            ev.exposure_ms = Some(seen.exposure_ms);
                            ev.converge_ms = seen.converge_ms;
                        }
                        Err(e) => ev.error = Some(e),
                    }
                }
            }
            ev.end = Instant::now();
            soak.record(ev);
        }
    }
    // Nothing of the lane's is left behind: the fault cleared, the higher-priority primary gone (after the
    // churn, so it is no event: the run's last pods are already checked).
    if lane == Lane::Api {
        soak.node.srv.clear_fault();
    }
    if lane == Lane::ConfDir && conf.higher {
        let dir = soak.node.host(&soak.node.conf_dir);
        let _ = std::fs::remove_file(dir.join(&soak.opts.higher_name));
    }
}

fn note(ev: &mut Event, r: Result<String, String>) {
    match r {
        Ok(d) => ev.detail = d,
        Err(e) => ev.error = Some(e),
    }
}

/// A burst of API errors for a few seconds (or fewer requests).
async fn api_fault(soak: &Soak, rng: &mut Rng) -> String {
    let faults = [
        Fault::Status(500),
        Fault::Status(503),
        Fault::Status(429),
        Fault::RetryAfter(1),
        Fault::Drop,
        Fault::Delay(Duration::from_millis(1_500)),
        Fault::WatchGone,
        Fault::WatchClose,
    ];
    let fault = rng.pick(&faults).clone();
    let times = 3 + rng.below(18) as u32;
    let hold = rng.ms(1_000, 5_000);
    let srv = &soak.node.srv;
    srv.set_fault(fault.clone(), Some(times));
    if matches!(fault, Fault::WatchGone | Fault::WatchClose) {
        // The watches open now meet it when they come back.
        srv.end_watches();
    }
    tokio::time::sleep(hold).await;
    srv.clear_fault();
    format!(
        "{fault:?} for the next {times} requests, at most {} ms",
        hold.as_millis()
    )
}

/// The API server unreachable: every request and watch stalls until it is back.
async fn api_outage(soak: &Soak, rng: &mut Rng) -> String {
    let hold = rng.ms(3_000, 10_000);
    let srv = &soak.node.srv;
    srv.set_fault(Fault::Stall, None);
    srv.end_watches();
    tokio::time::sleep(hold).await;
    srv.clear_fault();
    format!("every request stalled for {} ms", hold.as_millis())
}
