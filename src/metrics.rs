//! Prometheus text exposition (format 0.0.4), the few pieces the servers' `/metrics` share: the HELP and
//! TYPE header, a sample line with escaped label values, and a fixed-bucket histogram whose counts are
//! atomics (observed from any thread, rendered without a lock).

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

/// `# HELP name help` and `# TYPE name kind`.
pub fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let help = help.replace('\\', "\\\\").replace('\n', "\\n");
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// A label value as the text format wants it: `\`, `"` and newlines escaped.
pub fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// `name{k="v",...} value` (no braces without labels).
pub fn sample(out: &mut String, name: &str, labels: &[(&str, &str)], value: f64) {
    out.push_str(name);
    if !labels.is_empty() {
        out.push('{');
        for (i, (k, v)) in labels.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let _ = write!(out, "{k}=\"{}\"", escape(v));
        }
        out.push('}');
    }
    let _ = writeln!(out, " {}", number(value));
}

/// A sample value: integers without a fraction, `+Inf`/`-Inf`/`NaN` spelled as the format wants.
pub fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

/// Bucket bounds (seconds) for durations from 0.1 ms to 10 s.
pub const DURATION_BUCKETS: [f64; 16] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
];

/// A histogram over [`DURATION_BUCKETS`]: per-bucket counts (not cumulative), the count and the sum in
/// nanoseconds.
pub struct Histogram {
    buckets: [AtomicU64; DURATION_BUCKETS.len()],
    count: AtomicU64,
    sum_ns: AtomicU64,
}

impl Histogram {
    pub const fn new() -> Histogram {
        Histogram {
            buckets: [const { AtomicU64::new(0) }; DURATION_BUCKETS.len()],
            count: AtomicU64::new(0),
            sum_ns: AtomicU64::new(0),
        }
    }

    pub fn observe(&self, seconds: f64) {
        let s = if seconds.is_finite() {
            seconds.max(0.0)
        } else {
            0.0
        };
        if let Some(i) = DURATION_BUCKETS.iter().position(|b| s <= *b) {
            self.buckets[i].fetch_add(1, Ordering::Relaxed);
        }
        self.sum_ns.fetch_add(
            (s * 1e9).min(u64::MAX as f64 / 2.0) as u64,
            Ordering::Relaxed,
        );
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// The `_bucket` (cumulative, `le` last), `_sum` and `_count` lines for `labels`.
    pub fn render(&self, out: &mut String, name: &str, labels: &[(&str, &str)]) {
        let count = self.count();
        let mut cum = 0;
        let bucket = format!("{name}_bucket");
        for (i, b) in DURATION_BUCKETS.iter().enumerate() {
            cum += self.buckets[i].load(Ordering::Relaxed);
            let le = number(*b);
            let mut l = labels.to_vec();
            l.push(("le", &le));
            sample(out, &bucket, &l, cum as f64);
        }
        let mut l = labels.to_vec();
        l.push(("le", "+Inf"));
        sample(out, &bucket, &l, count as f64);
        let sum = self.sum_ns.load(Ordering::Relaxed) as f64 / 1e9;
        sample(out, &format!("{name}_sum"), labels, sum);
        sample(out, &format!("{name}_count"), labels, count as f64);
    }
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_and_escaping() {
        let mut s = String::new();
        header(&mut s, "x_total", "counter", "Things.\nMore");
        sample(&mut s, "x_total", &[("a", "q\"\\\n")], 3.0);
        sample(&mut s, "y", &[], 0.25);
        assert_eq!(
            s,
            "# HELP x_total Things.\\nMore\n# TYPE x_total counter\nx_total{a=\"q\\\"\\\\\\n\"} 3\ny 0.25\n"
        );
        assert_eq!(number(f64::INFINITY), "+Inf");
        assert_eq!(number(f64::NAN), "NaN");
    }

    #[test]
    fn histogram_buckets_are_cumulative() {
        let h = Histogram::new();
        for s in [0.00005, 0.003, 0.003, 20.0, f64::NAN] {
            h.observe(s);
        }
        let mut out = String::new();
        h.render(&mut out, "d_seconds", &[("k", "v")]);
        assert!(
            out.contains("d_seconds_bucket{k=\"v\",le=\"0.0001\"} 2\n"),
            "{out}"
        );
        assert!(
            out.contains("d_seconds_bucket{k=\"v\",le=\"0.005\"} 4\n"),
            "{out}"
        );
        assert!(
            out.contains("d_seconds_bucket{k=\"v\",le=\"10\"} 4\n"),
            "{out}"
        );
        assert!(
            out.contains("d_seconds_bucket{k=\"v\",le=\"+Inf\"} 5\n"),
            "{out}"
        );
        assert!(out.contains("d_seconds_count{k=\"v\"} 5\n"), "{out}");
        assert!(out.contains("d_seconds_sum{k=\"v\"} 20.00605\n"), "{out}");
    }
}
