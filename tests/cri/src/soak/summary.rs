//! The soak's report: the one-screen summary and the JSON (every event, pod with its timed CRI calls,
//! sample, scan and leak).

use super::report::Report;
use super::samples::Growth;
use super::{lock, Soak};
use crate::churn::{Call, PodEnd};
use serde_json::json;
use std::path::PathBuf;
use std::time::Instant;

fn stats(v: &[f64]) -> String {
    if v.is_empty() {
        return "-".into();
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    format!("{:.1}/{:.1}/{:.1}", s[0], s[s.len() / 2], s[s.len() - 1])
}

fn growth_text(g: &Growth, unit: &str, scale: f64) -> String {
    if g.verdict == "too few samples" {
        return format!("{} samples: too few to judge", g.samples);
    }
    format!(
        "{:.1} -> {:.1} {unit} ({}, {} samples)",
        g.first / scale,
        g.last / scale,
        g.verdict,
        g.samples
    )
}

fn stats_ms(v: &[f64]) -> String {
    if v.is_empty() {
        return "-".into();
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    format!("{:.0}/{:.0}", s[s.len() / 2], s[s.len() - 1])
}

impl Report {
    /// The one-screen summary.
    pub fn print(&self, soak: &Soak, json: &std::path::Path) {
        let o = &soak.opts;
        println!(
            "\n=== soak: layout {}, seed {}, {:.0} s of churn and chaos ===",
            o.layout.name(),
            o.seed,
            self.chaos_secs
        );
        let loads: Vec<f64> = lock(&soak.loads).iter().map(|l| l.1).collect();
        let p = &soak.provenance;
        println!(
            "machine: {} CPUs, 1-min load average min/med/max {}; started {}, commit {}",
            p.cpus,
            stats(&loads),
            p.date,
            p.commit
        );
        println!(
            "pods: {} started: {} redirected at once, {} redirected after their sandbox failed and was \
             retried, {} STARTED UNREDIRECTED, {} unchecked; {} never started",
            self.started,
            self.redirected_first,
            self.redirected_retried,
            self.unredirected,
            self.unchecked,
            self.never_started,
        );
        println!(
            "failed closed: {} sandbox attempts failed; before a retry {} sandboxes containerd kept from a \
             RunPodSandbox it was killed in and {} others were removed (as kubelet does)",
            self.failed_attempts, self.stale_after_kill, self.stale_other
        );
        for (e, n) in self.errors.iter().take(4) {
            println!("  {n:>5} x {}", e.chars().take(110).collect::<String>());
        }
        println!(
            "{:<19}{:>7}{:>8}{:>11}{:>13}{:>10}{:>8}  {:<25}{:<21}{:<5}",
            "chaos kind",
            "events",
            "started",
            "redirected",
            "UNREDIRECTED",
            "unchecked",
            "failed",
            "exposure ms min/med/max",
            "converged ms med/max",
            "stale"
        );
        for (name, r) in &self.rows {
            let conf = !r.exposure.is_empty();
            println!(
                "{:<19}{:>7}{:>8}{:>11}{:>13}{:>10}{:>8}  {:<25}{:<21}{}",
                name,
                if name == "no chaos in flight" {
                    "-".to_string()
                } else {
                    r.events.to_string()
                },
                r.started,
                r.redirected,
                r.unredirected,
                r.unchecked,
                r.failed_attempts,
                stats(&r.exposure),
                if conf {
                    stats_ms(&r.converge)
                } else {
                    "-".into()
                },
                if conf {
                    r.not_converged.to_string()
                } else {
                    "-".to_string()
                }
            );
        }
        // Unredirected pods grouped by the kinds in flight around them.
        let mut groups: std::collections::BTreeMap<String, (usize, String)> = Default::default();
        for (name, s, _, kinds) in &self.open {
            let mut k: Vec<&str> = kinds
                .iter()
                .map(|k| k.split(' ').next().unwrap_or(""))
                .collect();
            k.sort();
            k.dedup();
            let key = if k.is_empty() {
                "no chaos event".to_string()
            } else {
                k.join(" + ")
            };
            let g = groups
                .entry(key)
                .or_insert((0, format!("{name} at {s:.0} ms")));
            g.0 += 1;
        }
        for (kinds, (n, first)) in &groups {
            println!("  {n:>4} UNREDIRECTED during {kinds} (first: {first})");
        }
        let count = |what: &str, class: &str, gc: bool| {
            self.leaks
                .iter()
                .filter(|l| l.2 == what && l.3 == class && (!gc || l.5))
                .count()
        };
        let line = |class: &str, gc: bool| {
            ["sandbox", "ip", "netns", "veth"]
                .iter()
                .map(|w| format!("{} {w}", count(w, class, gc)))
                .collect::<Vec<_>>()
                .join(", ")
        };
        println!(
            "leaks: containerd kept {} sandboxes of RunPodSandbox calls it was killed in (removed by the \
             retry, as kubelet does)",
            self.stale_after_kill
        );
        println!(
            "  left in the scans ({}): containerd's own (a call for it cut off by a kill): {}; UNEXPLAINED: {}",
            self.scans
                .iter()
                .map(|s| s.label.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            line("containerd", false),
            line("unexplained", false),
        );
        println!(
            "  left after kubelet's GC (no sandbox holds them): containerd's {}; unexplained {}",
            line("containerd", true),
            line("unexplained", true)
        );
        for l in self.leaks.iter().filter(|l| l.3 == "unexplained").take(5) {
            println!("  UNEXPLAINED {} (first seen {}): {}", l.0, l.1, l.4);
        }
        println!(
            "agent RSS: {}; fds: {}",
            growth_text(&self.rss, "MiB", 1024.0),
            growth_text(&self.fds, "", 1.0)
        );
        let series = super::samples::series(&lock(&soak.samples), self.chaos_secs * 1e3, 12);
        println!(
            "  series (s: RSS MiB/fds): {}",
            series
                .iter()
                .map(|(t, r, f)| format!("{t:.0}: {:.1}/{f:.0}", r / 1024.0))
                .collect::<Vec<_>>()
                .join(", ")
        );
        if let Some((name, r, f)) = &self.longest {
            println!(
                "  longest-lived agent {name}: RSS {}; fds {}",
                growth_text(r, "MiB", 1024.0),
                growth_text(f, "", 1.0)
            );
        }
        for i in self.incidents.iter().take(5) {
            println!("INCIDENT {i}");
        }
        let f = self.failures();
        println!(
            "verdict: {}",
            if f.is_empty() {
                "PASS".to_string()
            } else {
                format!("FAIL: {}", f.join("; "))
            }
        );
        println!("details: {}", json.display());
    }
}

/// Writes the JSON report; returns its path.
pub fn write_json(soak: &Soak, r: &Report, pods: &[PodEnd]) -> PathBuf {
    let ms = |t: Instant| (soak.ms(t) * 10.0).round() / 10.0;
    let o = &soak.opts;
    // `--out` names the file, or a directory to write the default name into; nothing names one: target/soak.
    let name = format!("soak-{}-{}.json", o.layout.name(), o.seed);
    let path = match o.out.clone() {
        Some(p) if p.is_dir() => p.join(name),
        Some(p) => p,
        None => {
            let repo = crate::util::repo();
            repo.canonicalize()
                .unwrap_or(repo)
                .join("target/soak")
                .join(name)
        }
    };
    let events: Vec<_> = r
        .events
        .iter()
        .map(|e| {
            json!({"kind": e.kind.name(), "start_ms": ms(e.start), "end_ms": ms(e.end), "detail": e.detail,
                   "error": e.error, "exposure_ms": e.exposure_ms, "converge_ms": e.converge_ms,
                   "containerd_killed_ms": e.kill_at.map(ms)})
        })
        .collect();
    let calls = |v: &[Call]| -> Vec<serde_json::Value> {
        v.iter()
            .map(|c| json!({"call": c.what, "sandbox": c.sandbox, "start_ms": ms(c.start), "end_ms": ms(c.end), "error": c.error}))
            .collect()
    };
    let rows: serde_json::Map<String, serde_json::Value> = r
        .rows
        .iter()
        .map(|(n, x)| {
            (n.clone(), json!({"events": x.events, "event_errors": x.errors, "started": x.started,
                "redirected": x.redirected, "unredirected": x.unredirected, "unchecked": x.unchecked,
                "failed_attempts": x.failed_attempts, "exposure_ms": x.exposure, "converge_ms": x.converge,
                "not_converged": x.not_converged}))
        })
        .collect();
    let samples: Vec<_> = lock(&soak.samples)
        .iter()
        .map(|s| json!({"t_ms": s.t_ms.round(), "agent": s.agent, "age_ms": s.age_ms.round(), "rss_kb": s.rss_kb, "fds": s.fds}))
        .collect();
    let g = |g: &Growth| json!({"samples": g.samples, "first_third_median": g.first, "last_third_median": g.last, "verdict": g.verdict});
    let p = &soak.provenance;
    let loads: Vec<_> = lock(&soak.loads)
        .iter()
        .map(|(t, l)| json!({"t_ms": t.round(), "load1": l}))
        .collect();
    let doc = json!({
        "date": p.date, "commit": p.commit, "machine": {"cpus": p.cpus, "loadavg_1m": loads},
        "seed": o.seed, "layout": o.layout.name(), "seconds": o.seconds, "chaos_seconds": r.chaos_secs,
        "kinds": o.kinds.iter().map(|k| k.name()).collect::<Vec<_>>(),
        "agent_env": soak.env, "higher_name": o.higher_name, "in_flight": o.in_flight,
        "verdict": if r.failed() { "FAIL" } else { "PASS" }, "failures": r.failures(),
        "pods": {"total": r.pods, "started": r.started, "redirected_at_once": r.redirected_first,
                 "redirected_after_retry": r.redirected_retried, "unredirected": r.unredirected,
                 "unchecked": r.unchecked, "never_started": r.never_started,
                 "failed_attempts": r.failed_attempts, "stale_sandboxes_after_a_containerd_kill": r.stale_after_kill,
                 "stale_sandboxes_other": r.stale_other,
                 "first_errors": r.errors.iter().map(|(e, n)| json!({"error": e, "count": n})).collect::<Vec<_>>()},
        "per_kind": rows,
        "unredirected_pods": r.open.iter().map(|(n, s, e, k)| json!({"pod": n, "run_start_ms": s, "run_end_ms": e, "during": k})).collect::<Vec<_>>(),
        "events": events,
        "leaks": r.leaks.iter().map(|l| json!({"item": l.0, "first_seen": l.1, "what": l.2, "class": l.3, "why": l.4, "after_gc": l.5})).collect::<Vec<_>>(),
        "scans": r.scans.iter().map(|s| json!({"label": s.label, "t_ms": s.t_ms.round(),
            "items": s.items.iter().map(|i| json!({"item": i.key, "sandbox": i.sandbox, "pod": i.pod, "made_ms": i.at_ms.map(f64::round), "detail": i.detail})).collect::<Vec<_>>()})).collect::<Vec<_>>(),
        "agent": {"rss": g(&r.rss), "fds": g(&r.fds),
                  "longest": r.longest.as_ref().map(|(n, a, b)| json!({"agent": n, "rss": g(a), "fds": g(b)})),
                  "samples": samples},
        "incidents": r.incidents,
        "pod_details": pods.iter().map(|p| json!({"pod": p.name, "failures": p.failures, "redirected": p.redirected,
            "check_error": p.check_error, "first_error": p.first_error,
            "sandbox": p.sandbox.as_ref().map(|(id, ip, netns)| json!({"id": id, "ip": ip, "netns": netns})),
            "runs": calls(&p.runs), "teardown": calls(&p.teardown), "stale": p.stale.iter().map(|(id, i)| json!({"sandbox": id, "after_run": i})).collect::<Vec<_>>(),
            "teardown_error": p.teardown_error})).collect::<Vec<_>>(),
    });
    if let Some(d) = path.parent() {
        let _ = std::fs::create_dir_all(d);
    }
    // A report that cannot be written must not cost the run its summary: say so, and the summary follows.
    if let Err(e) = std::fs::write(&path, serde_json::to_vec_pretty(&doc).expect("JSON")) {
        eprintln!(
            "soak: could not write the JSON report {}: {e}",
            path.display()
        );
    }
    path
}
