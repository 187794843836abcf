//! The agent's resident memory and open descriptors, sampled every 2 s from the host's `/proc` (the agent
//! container shares the host's pid namespace view: containerd reports its host pid), and the verdict on them.
//!
//! Verdict: each agent's first 10 s are left out (start-up: the pod watch's list, the first install), then the
//! median of the series' last third is compared with its first third's; growth beyond 25 % plus a slack
//! (2 MiB, 8 descriptors) is "growing" and fails the soak. The whole run's series spans agent restarts (what
//! survives a restart: files, sockets it re-opens); the longest-lived agent's own series is judged the same
//! way when it has at least 15 samples.

use super::Soak;
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct Sample {
    pub t_ms: f64,
    /// The agent process: pod name / container id (a restart in place is a new one).
    pub agent: String,
    /// Milliseconds since this agent's first sample.
    pub age_ms: f64,
    pub rss_kb: u64,
    pub fds: u64,
}

const EVERY: Duration = Duration::from_secs(2);
const WARM_UP_MS: f64 = 10_000.0;

fn read(pid: u32) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let rss = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())?;
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count() as u64;
    Some((rss, fds))
}

/// What ran where (the report's header: a soak's numbers depend on the machine's load).
#[derive(Debug, Clone)]
pub struct Provenance {
    /// `date -u` at the start.
    pub date: String,
    /// `git describe --always --dirty` of the repository.
    pub commit: String,
    pub cpus: usize,
}

impl Provenance {
    pub fn now() -> Provenance {
        let out = |prog: &str, args: &[&str]| {
            let o = crate::util::run(prog, args);
            String::from_utf8_lossy(&o.stdout).trim().to_string()
        };
        let repo = crate::util::repo().to_string_lossy().into_owned();
        Provenance {
            date: out("date", &["-u", "+%Y-%m-%dT%H:%M:%SZ"]),
            commit: out(
                "git",
                &[
                    "-C",
                    &repo,
                    "describe",
                    "--always",
                    "--dirty",
                    "--abbrev=12",
                ],
            ),
            cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
        }
    }
}

/// The 1-minute load average (`/proc/loadavg`).
pub fn load1() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Samples until aborted.
pub async fn sample(soak: Arc<Soak>) {
    let mut born: std::collections::HashMap<String, f64> = Default::default();
    let mut tick = tokio::time::interval(EVERY);
    loop {
        tick.tick().await;
        if let Some(l) = load1() {
            let t = soak.ms(std::time::Instant::now());
            super::lock(&soak.loads).push((t, l));
        }
        let a = soak.agent();
        let Some(pid) = soak.node.agent_pid(&a).await else {
            continue;
        };
        let Some((rss_kb, fds)) = read(pid) else {
            continue;
        };
        let t_ms = soak.ms(std::time::Instant::now());
        // A container restarted in place is a new process under the same pod name.
        let key = format!("{}/{}", a.name, &a.container[..a.container.len().min(12)]);
        let b = *born.entry(key.clone()).or_insert(t_ms);
        super::lock(&soak.samples).push(Sample {
            t_ms,
            agent: key,
            age_ms: t_ms - b,
            rss_kb,
            fds,
        });
    }
}

/// The verdict on one series.
#[derive(Debug, Clone)]
pub struct Growth {
    pub samples: usize,
    pub first: f64,
    pub last: f64,
    pub verdict: &'static str,
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// First third's median against the last third's: "growing" beyond `rel` plus `slack`.
pub fn growth(series: &[f64], rel: f64, slack: f64, min_samples: usize) -> Growth {
    let n = series.len();
    if n < min_samples.max(3) {
        return Growth {
            samples: n,
            first: 0.0,
            last: 0.0,
            verdict: "too few samples",
        };
    }
    let third = n / 3;
    let first = median(&mut series[..third].to_vec());
    let last = median(&mut series[n - third..].to_vec());
    Growth {
        samples: n,
        first,
        last,
        verdict: if last > first * (1.0 + rel) + slack {
            "growing"
        } else {
            "flat"
        },
    }
}

/// (RSS, descriptors) verdicts over the whole run, and over the longest-lived agent: (name, rss, fds).
pub fn verdicts(samples: &[Sample]) -> (Growth, Growth, Option<(String, Growth, Growth)>) {
    let warm: Vec<&Sample> = samples.iter().filter(|s| s.age_ms >= WARM_UP_MS).collect();
    let rss: Vec<f64> = warm.iter().map(|s| s.rss_kb as f64).collect();
    let fds: Vec<f64> = warm.iter().map(|s| s.fds as f64).collect();
    let whole = (growth(&rss, 0.25, 2048.0, 6), growth(&fds, 0.25, 8.0, 6));
    let mut by_agent: std::collections::BTreeMap<&str, Vec<&Sample>> = Default::default();
    for s in &warm {
        by_agent.entry(s.agent.as_str()).or_default().push(s);
    }
    let longest = by_agent
        .into_iter()
        .max_by_key(|(_, v)| v.len())
        .filter(|(_, v)| v.len() >= 15)
        .map(|(name, v)| {
            let rss: Vec<f64> = v.iter().map(|s| s.rss_kb as f64).collect();
            let fds: Vec<f64> = v.iter().map(|s| s.fds as f64).collect();
            (
                name.to_string(),
                growth(&rss, 0.25, 2048.0, 15),
                growth(&fds, 0.25, 8.0, 15),
            )
        });
    (whole.0, whole.1, longest)
}

/// The run's series in `n` equal time buckets: (bucket start s, median RSS KiB, median descriptors); empty
/// buckets (no agent running) left out.
pub fn series(samples: &[Sample], run_ms: f64, n: usize) -> Vec<(f64, f64, f64)> {
    let width = (run_ms / n.max(1) as f64).max(1.0);
    (0..n)
        .filter_map(|b| {
            let (lo, hi) = (b as f64 * width, (b + 1) as f64 * width);
            let mut rss: Vec<f64> = Vec::new();
            let mut fds: Vec<f64> = Vec::new();
            for s in samples.iter().filter(|s| s.t_ms >= lo && s.t_ms < hi) {
                rss.push(s.rss_kb as f64);
                fds.push(s.fds as f64);
            }
            (!rss.is_empty()).then(|| (lo / 1e3, median(&mut rss), median(&mut fds)))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::growth;

    #[test]
    fn flat_growing_and_too_few() {
        let flat: Vec<f64> = (0..30).map(|i| 5000.0 + (i % 3) as f64 * 100.0).collect();
        assert_eq!(growth(&flat, 0.25, 2048.0, 6).verdict, "flat");
        let growing: Vec<f64> = (0..30).map(|i| 5000.0 + i as f64 * 500.0).collect();
        assert_eq!(growth(&growing, 0.25, 2048.0, 6).verdict, "growing");
        assert_eq!(
            growth(&flat[..4], 0.25, 2048.0, 6).verdict,
            "too few samples"
        );
    }
}
