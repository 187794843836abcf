//! The audit's effects: its rounds started ([`start`]), one pod verified ([`verify`]: its namespace from
//! the host's `/proc` as repair in place finds it, held open while CHECK reads it), a round over the
//! node's pods spread over the interval ([`Auditor::round`]), and what follows a verdict: the log line and the Event on a change, the repair
//! agent's mode ([`super::verdict::action_for`] through the repair actions), the metrics.

use super::verdict::{action_for, Seen, Verdict};
use super::{lock, metrics, pace, AuditSink, Pod, Shared};
use crate::cni::NetConf;
use crate::kube::ApiErrorExt;
use crate::redirect::plan::PodPlan;
use crate::repair::action::Actor;
use crate::repair::detect::Action;
use crate::repair::procfs;
use std::net::IpAddr;
use std::path::Path;
use std::time::{Duration, Instant};

/// Verifies one pod: CHECK's read through the node's backend in the namespace holding its IP whose
/// processes are in its cgroup, found and confirmed as repair in place does ([`procfs::in_pod_netns`]).
/// `scan`: the round's one pass over the host's `/proc`, its choice confirmed on the pod's own process
/// before and after the read; whatever it does not settle (a pod started since, a process gone) is looked
/// up afresh. `None`: the pod needs no redirection.
pub fn verify(
    pod: &Pod,
    host_proc: &Path,
    conf: &NetConf,
    scan: Option<&procfs::Scan>,
) -> Option<Verdict> {
    let f = &pod.facts;
    let Ok(ip) = f.pod_ip.parse::<IpAddr>() else {
        return Some(Verdict::Unverifiable(
            "status.podIP is not an address".into(),
        ));
    };
    let env = |k: &str| std::env::var(k).ok();
    let read = |ns: &procfs::PodNetns| match &pod.plan {
        Ok(PodPlan::Redirect(r)) => crate::pod_rules::inspect(r, &ns.path(), conf, &env).map(Some),
        Ok(PodPlan::Skip(_)) => Ok(None),
        Err(e) => Err(crate::Error::other(e.as_str())),
    };
    // No host /proc: the lookup's error names the directory it could not read.
    match procfs::in_pod_netns(host_proc, ip, &f.cgroup_uid, scan, "read", read) {
        Ok((found, _)) => found.map(|found| Verdict::of(&found)),
        Err(e) => Some(Verdict::Unverifiable(e.to_string())),
    }
}

/// Starts the audit's rounds on a thread of their own, one every `interval`, and returns the sink the
/// node's pod watch feeds it through; the pods kept in the run dir before a restart are read first, and
/// a thread keeps them there ([`super::persist`]). `actor` says what it does about a pod (the repair agent's options:
/// nothing when it is disabled or has no mode), from which host `/proc`, with which plugin configuration.
pub fn start(actor: Actor, interval: Duration) -> crate::Result<AuditSink> {
    let det = crate::repair::detect::Detector::new(actor.opts.clone())?;
    let conf = actor.netconf.clone();
    // The pods as first seen before a restart, and the thread keeping them for the next one.
    let path = conf.run_dir().audit_decisions();
    super::persist::sweep(&path);
    let store = super::Store::restored(super::persist::load(&path));
    super::lock(&store).keep = Some(path.clone());
    super::persist::spawn(store.clone(), path)?;
    let auditor = Auditor::new(store.clone(), interval, actor);
    std::thread::Builder::new()
        .name("audit".into())
        .spawn(move || auditor.run())
        .map_err(|e| crate::Error::io("audit: spawn its thread", e))?;
    Ok(AuditSink { det, conf, store })
}

/// The audit's state across rounds.
pub struct Auditor {
    pub store: Shared,
    pub interval: Duration,
    /// The repair actions (its options' modes all off when the repair agent is disabled), the host
    /// `/proc` and the plugin configuration the pods are verified with.
    pub actor: Actor,
    /// An Event was refused for lack of permission (logged once).
    events_refused: bool,
    /// The current round's number (from 1): the pods' back-off counts in rounds.
    rounds: u64,
}

impl Auditor {
    pub fn new(store: Shared, interval: Duration, actor: Actor) -> Auditor {
        Auditor {
            store,
            interval,
            actor,
            events_refused: false,
            rounds: 0,
        }
    }

    /// Rounds forever, the first once the watch's first list is complete.
    pub fn run(mut self) {
        metrics::enable();
        while !lock(&self.store).listed {
            std::thread::sleep(Duration::from_millis(200));
        }
        loop {
            let start = Instant::now();
            self.round(start);
            std::thread::sleep(pace::wait(Instant::now(), start + self.interval));
        }
    }

    /// One round: every pod of the store at its start, each at its due time, one at a time.
    pub fn round(&mut self, start: Instant) {
        self.rounds += 1;
        let keys: Vec<String> = lock(&self.store).pods.keys().cloned().collect();
        let n = keys.len();
        let mut counts = [0u64; 4];
        let mut busy = Duration::ZERO;
        // One pass over the host's /proc for the whole round (a failure: each pod looks it up afresh and
        // says why it could not).
        let t = Instant::now();
        let scan = procfs::Scan::read(&self.actor.host_proc).ok();
        busy += t.elapsed();
        for (i, key) in keys.iter().enumerate() {
            std::thread::sleep(pace::wait(
                Instant::now(),
                pace::due(start, self.interval, n, i),
            ));
            // The pod as it is now (gone or changed since the round began: skipped or verified as it is).
            let Some(pod) = lock(&self.store).pods.get(key).cloned() else {
                continue;
            };
            let t = Instant::now();
            if let Some(v) = verify(
                &pod,
                &self.actor.host_proc,
                &self.actor.netconf,
                scan.as_ref(),
            ) {
                counts[v.index()] += 1;
                self.after(key, &pod, v);
            }
            busy += t.elapsed();
        }
        metrics::round(counts, busy.as_secs_f64());
    }

    /// What follows a verdict: the log line and the Event on a change, the mode's action.
    fn after(&mut self, key: &str, pod: &Pod, v: Verdict) {
        let f = &pod.facts;
        let step = Seen::next(pod.seen.as_ref(), &f.uid, &v, self.rounds);
        if step.log {
            let level = match v {
                Verdict::Redirected => log::Level::Info,
                _ => log::Level::Warn,
            };
            log::log!(level, "audit: pod {key} is {}", v.describe());
        }
        if step.event {
            self.event(pod, &v);
        }
        let mut backoff = step.backoff;
        if step.act {
            let a = action_for(&v, f, &self.actor.opts);
            if a != Action::None {
                // Done or failed (the actor logs and counts which), the next comes after the back-off
                // if the pod is still unredirected then; a pod deleted meanwhile leaves the store.
                backoff = backoff.acted(self.rounds);
                // The actor logs, counts and records a failure.
                let _ = self.actor.act(a, f, Some(&pod.plan));
            }
        }
        // Remembered with the pod (gone with it), unless it was replaced meanwhile.
        if let Some(e) = lock(&self.store).pods.get_mut(key) {
            if e.facts.uid == f.uid {
                e.seen = Some(Seen {
                    uid: f.uid.clone(),
                    verdict: v,
                    backoff,
                });
            }
        }
    }

    /// The pod's Event for an unredirected verdict; a refusal for lack of permission is logged once.
    fn event(&mut self, pod: &Pod, v: &Verdict) {
        let Some(reason) = v.event_reason() else {
            return;
        };
        let f = &pod.facts;
        match self.actor.record(f, reason, &v.describe()) {
            Ok(()) => {}
            Err(e) if e.api_status() == Some(403) => {
                if !std::mem::replace(&mut self.events_refused, true) {
                    log::warn!("audit: events refused (needs events: create; logged once): {e}");
                }
            }
            Err(e) => log::warn!(
                "audit: could not record event {reason} on pod {}: {e}",
                f.key()
            ),
        }
    }
}

#[cfg(test)]
#[path = "round_tests.rs"]
mod tests;
