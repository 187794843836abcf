//! The soak's numbers: pods by outcome, per chaos kind (a pod counts for every event in flight around its
//! RunPodSandbox: from the event's start to 1 s after the node recovered, containerd reloading its
//! configuration meanwhile), leaks by owner, the agent's memory and descriptors ([`super::summary`] prints
//! them and writes the JSON).
//!
//! The soak fails (exit 1) on: a pod started unredirected; a started pod whose rules could not be read; a
//! leak no containerd kill explains; the agent's RSS or descriptors growing; an event the node did not
//! recover from (the agent never ready again, ...); fewer pods than a run of that length must start.

use super::leaks::{self, Scan};
use super::options::Kind;
use super::samples::{self, Growth};
use super::{lock, Event, Soak};
use crate::churn::{brief, Call, PodEnd};
use std::time::Instant;

/// After an event's end, pods still count for it this long (containerd reloads its CNI configuration
/// asynchronously; an agent's last write settles).
const SETTLE_MS: f64 = 1_000.0;

#[derive(Debug, Default, Clone)]
pub struct Row {
    pub events: usize,
    pub errors: usize,
    pub started: usize,
    pub redirected: usize,
    pub unredirected: usize,
    pub unchecked: usize,
    pub failed_attempts: usize,
    pub exposure: Vec<f64>,
    pub converge: Vec<f64>,
    pub not_converged: usize,
}

pub struct Report {
    pub events: Vec<Event>,
    pub pods: usize,
    pub started: usize,
    pub redirected_first: usize,
    pub redirected_retried: usize,
    pub unredirected: usize,
    pub unchecked: usize,
    pub never_started: usize,
    pub failed_attempts: usize,
    /// Sandboxes containerd still held for a RunPodSandbox it was killed in (removed before the retry, as
    /// kubelet does), and other leftovers removed before a retry.
    pub stale_after_kill: usize,
    pub stale_other: usize,
    /// Per kind, then "no chaos in flight".
    pub rows: Vec<(String, Row)>,
    /// (pod, run start ms, run end ms, kinds in flight)
    pub open: Vec<(String, f64, f64, Vec<String>)>,
    pub scans: Vec<Scan>,
    /// Distinct leaked items: (key, first seen in scan, what, class, why, still there after GC)
    pub leaks: Vec<(String, String, &'static str, &'static str, String, bool)>,
    pub rss: Growth,
    pub fds: Growth,
    pub longest: Option<(String, Growth, Growth)>,
    pub incidents: Vec<String>,
    pub errors: Vec<(String, usize)>,
    pub chaos_secs: f64,
    pub min_started: usize,
}

/// An error with pod names and ids generalised, so that errors of one cause count together.
fn normalize(e: &str) -> String {
    let words: Vec<String> = e
        .split(' ')
        .map(|w| {
            if let Some(i) = w.find("soak-") {
                let rest = &w[i + 5..];
                let n = rest.chars().take_while(char::is_ascii_digit).count();
                format!("{}soak-N{}", &w[..i], &rest[n..])
            } else if w.trim_matches('"').len() == 64
                && w.trim_matches('"').chars().all(|c| c.is_ascii_hexdigit())
            {
                "<id>".to_string()
            } else {
                w.to_string()
            }
        })
        .collect();
    words.join(" ")
}

fn overlaps(c: &Call, ms: &dyn Fn(Instant) -> f64, e: &Event) -> bool {
    ms(c.start) <= ms(e.end) + SETTLE_MS && ms(c.end) >= ms(e.start)
}

impl Report {
    pub fn build(
        soak: &Soak,
        pods: &[PodEnd],
        end_scans: Vec<Scan>,
        mut incidents: Vec<String>,
        chaos_secs: f64,
    ) -> Report {
        let ms = |t: Instant| soak.ms(t);
        let events = lock(&soak.events).clone();
        let mut rows: Vec<(String, Row)> = Kind::ALL
            .iter()
            .filter(|k| soak.opts.kinds.contains(k))
            .map(|k| (k.name().to_string(), Row::default()))
            .collect();
        rows.push(("no chaos in flight".into(), Row::default()));
        let names: Vec<String> = rows.iter().map(|(n, _)| n.clone()).collect();
        let idx = |k: Kind| names.iter().position(|n| n == k.name()).unwrap_or(0);
        for e in &events {
            let i = idx(e.kind);
            let r = &mut rows[i].1;
            r.events += 1;
            r.errors += usize::from(e.error.is_some());
            if let Some(x) = e.exposure_ms {
                r.exposure.push(x);
            }
            match (e.exposure_ms.is_some(), e.converge_ms) {
                (_, Some(c)) => r.converge.push(c),
                (true, None) => r.not_converged += 1,
                _ => {}
            }
            if let Some(err) = &e.error {
                incidents.push(format!("{} at {:.0} ms: {err}", e.kind.name(), ms(e.start)));
            }
        }
        let none = rows.len() - 1;
        let mut open = Vec::new();
        let mut errors: std::collections::BTreeMap<String, usize> = Default::default();
        for p in pods {
            for c in p.runs.iter().filter(|c| c.error.is_some()) {
                *errors
                    .entry(normalize(&brief(c.error.as_deref().unwrap_or(""))))
                    .or_default() += 1;
                let mut any = false;
                for e in events.iter().filter(|e| overlaps(c, &ms, e)) {
                    rows[idx(e.kind)].1.failed_attempts += 1;
                    any = true;
                }
                if !any {
                    rows[none].1.failed_attempts += 1;
                }
            }
            let Some(run) = p.runs.last().filter(|_| p.sandbox.is_some()) else {
                continue;
            };
            let during: Vec<&Event> = events.iter().filter(|e| overlaps(run, &ms, e)).collect();
            let mut targets: Vec<usize> = during.iter().map(|e| idx(e.kind)).collect();
            targets.sort();
            targets.dedup();
            if targets.is_empty() {
                targets.push(none);
            }
            for i in targets {
                let r = &mut rows[i].1;
                r.started += 1;
                match (p.redirected, &p.check_error) {
                    (Some(true), _) => r.redirected += 1,
                    (Some(false), _) => r.unredirected += 1,
                    _ => r.unchecked += 1,
                }
            }
            if p.redirected == Some(false) {
                let mut kinds: Vec<String> = during
                    .iter()
                    .map(|e| format!("{} ({:.0}-{:.0} ms)", e.kind.name(), ms(e.start), ms(e.end)))
                    .collect();
                kinds.dedup();
                open.push((p.name.clone(), ms(run.start), ms(run.end), kinds));
            }
        }
        let started = pods.iter().filter(|p| p.sandbox.is_some()).count();
        let kills: Vec<f64> = events.iter().filter_map(|e| e.kill_at).map(ms).collect();
        let cut = |c: &Call| kills.iter().any(|k| *k >= ms(c.start) && *k <= ms(c.end));
        let stale: Vec<bool> = pods
            .iter()
            .flat_map(|p| {
                p.stale
                    .iter()
                    .map(move |(_, i)| p.runs.get(*i).is_some_and(cut))
            })
            .collect();
        let distinct = leaks::distinct(&end_scans);
        let after_gc: std::collections::HashSet<&str> = end_scans
            .last()
            .map(|s| s.items.iter().map(|i| i.key.as_str()).collect())
            .unwrap_or_default();
        let leaks = distinct
            .iter()
            .map(|(key, (seen, item))| {
                let (class, why) = leaks::classify(item, pods, &kills, &ms);
                (
                    key.clone(),
                    seen.clone(),
                    item.what,
                    class,
                    why,
                    after_gc.contains(key.as_str()),
                )
            })
            .collect();
        let (rss, fds, longest) = samples::verdicts(&lock(&soak.samples));
        Report {
            pods: pods.len(),
            started,
            redirected_first: pods
                .iter()
                .filter(|p| p.redirected == Some(true) && p.failures == 0)
                .count(),
            redirected_retried: pods
                .iter()
                .filter(|p| p.redirected == Some(true) && p.failures > 0)
                .count(),
            unredirected: pods.iter().filter(|p| p.redirected == Some(false)).count(),
            unchecked: pods.iter().filter(|p| p.check_error.is_some()).count(),
            never_started: pods.iter().filter(|p| p.sandbox.is_none()).count(),
            failed_attempts: pods.iter().map(|p| p.failures as usize).sum(),
            stale_after_kill: stale.iter().filter(|k| **k).count(),
            stale_other: stale.iter().filter(|k| !**k).count(),
            rows,
            open,
            scans: end_scans,
            leaks,
            rss,
            fds,
            longest,
            incidents,
            errors: errors.into_iter().collect(),
            chaos_secs,
            min_started: ((chaos_secs / 10.0) as usize).max(10),
            events,
        }
    }

    pub fn unexplained(&self) -> usize {
        self.leaks.iter().filter(|l| l.3 == "unexplained").count()
    }

    pub fn growing(&self) -> bool {
        self.rss.verdict == "growing"
            || self.fds.verdict == "growing"
            || self
                .longest
                .as_ref()
                .is_some_and(|(_, r, f)| r.verdict == "growing" || f.verdict == "growing")
    }

    /// Why the soak fails ("" when it passes).
    pub fn failures(&self) -> Vec<String> {
        let mut f = Vec::new();
        if self.unredirected > 0 {
            f.push(format!("{} pods started UNREDIRECTED", self.unredirected));
        }
        if self.unchecked > 0 {
            f.push(format!(
                "{} started pods could not be checked",
                self.unchecked
            ));
        }
        if self.unexplained() > 0 {
            f.push(format!(
                "{} leaks no containerd kill explains",
                self.unexplained()
            ));
        }
        if self.growing() {
            f.push("the agent's RSS or descriptors grow".into());
        }
        if !self.incidents.is_empty() {
            f.push(format!("{} incidents", self.incidents.len()));
        }
        if self.started < self.min_started {
            f.push(format!(
                "only {} pods started (at least {} expected)",
                self.started, self.min_started
            ));
        }
        f
    }

    pub fn failed(&self) -> bool {
        !self.failures().is_empty()
    }
}
