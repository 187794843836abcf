//! Prometheus text exposition (format 0.0.4), the one formatter every `/metrics` goes through: the HELP and
//! TYPE header, a sample line with escaped label values, a fixed-bucket histogram whose counts are atomics
//! (observed from any thread, rendered without a lock), and [`Family`]: a metric with fixed label names whose
//! series (label values from fixed sets) are known in advance, one cell (a counter, or a histogram) each. A
//! process's `/metrics` is the list of its parts' renderers ([`Part`]), composed once by its root.

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

/// What a `/metrics` part writes: its families, in order.
pub type Part = fn(&mut String);

/// The exposition of `parts`, in order.
pub fn exposition(parts: &[Part]) -> String {
    let mut out = String::new();
    for part in parts {
        part(&mut out);
    }
    out
}

/// The content type of the text format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// One series' value: a counter, or a histogram.
pub trait Cell: Sync {
    /// No value yet (nothing counted or observed).
    fn is_zero(&self) -> bool;
    /// Its sample lines for `labels`.
    fn write(&self, out: &mut String, name: &str, labels: &[(&str, &str)]);
}

impl Cell for AtomicU64 {
    fn is_zero(&self) -> bool {
        self.load(Ordering::Relaxed) == 0
    }
    fn write(&self, out: &mut String, name: &str, labels: &[(&str, &str)]) {
        sample(out, name, labels, self.load(Ordering::Relaxed) as f64);
    }
}

impl Cell for Histogram {
    fn is_zero(&self) -> bool {
        self.count() == 0
    }
    fn write(&self, out: &mut String, name: &str, labels: &[(&str, &str)]) {
        self.render(out, name, labels);
    }
}

/// A metric with `L` fixed label names and `N` series known in advance, one [`Cell`] each. A series is
/// rendered once it has a value, or from the start when it is marked to ([`Family::show`]); the header
/// only with a series. An empty label value leaves the label out.
pub struct Family<C, const L: usize, const N: usize> {
    name: &'static str,
    kind: &'static str,
    help: &'static str,
    /// Label names, in the order they are written (sorted, as Prometheus' clients write them).
    labels: [&'static str; L],
    /// Each series' label values, in the order the series are written.
    series: [[&'static str; L]; N],
    cells: [C; N],
    /// Series shown at zero (bit `i`: series `i`).
    shown: AtomicU64,
}

/// Counters (`AtomicU64` cells).
pub type Counters<const L: usize, const N: usize> = Family<AtomicU64, L, N>;

impl<C: Cell, const L: usize, const N: usize> Family<C, L, N> {
    /// `shown`: the series rendered at zero from the start (bit `i`: series `i`).
    pub const fn new(
        name: &'static str,
        kind: &'static str,
        help: &'static str,
        labels: [&'static str; L],
        series: [[&'static str; L]; N],
        cells: [C; N],
        shown: u64,
    ) -> Self {
        assert!(N <= 64, "at most 64 series");
        Family {
            name,
            kind,
            help,
            labels,
            series,
            cells,
            shown: AtomicU64::new(shown),
        }
    }

    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The cell of the series with these label values (`None`: not a series of this family).
    pub fn cell(&self, values: [&str; L]) -> Option<&C> {
        let i = self.series.iter().position(|s| *s == values)?;
        Some(&self.cells[i])
    }

    /// Shows the series `pick` selects from now on, at zero until they have a value.
    pub fn show(&self, pick: impl Fn(&[&str; L]) -> bool) {
        for (i, s) in self.series.iter().enumerate() {
            if pick(s) {
                self.shown.fetch_or(1 << i, Ordering::Relaxed);
            }
        }
    }

    /// The header and every series that has a value or is shown ("" for none).
    pub fn render(&self, out: &mut String) {
        let shown = self.shown.load(Ordering::Relaxed);
        let mut first = true;
        for (i, (values, cell)) in self.series.iter().zip(&self.cells).enumerate() {
            if shown & (1 << i) == 0 && cell.is_zero() {
                continue;
            }
            if std::mem::take(&mut first) {
                header(out, self.name, self.kind, self.help);
            }
            let labels: Vec<(&str, &str)> = self
                .labels
                .iter()
                .zip(values)
                .filter(|(_, v)| !v.is_empty())
                .map(|(k, v)| (*k, *v))
                .collect();
            cell.write(out, self.name, &labels);
        }
    }
}

impl<const L: usize, const N: usize> Counters<L, N> {
    /// Counts one for the series with these label values; values of no series are not counted.
    pub fn inc(&self, values: [&str; L]) {
        if let Some(c) = self.cell(values) {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn get(&self, values: [&str; L]) -> u64 {
        self.cell(values).map_or(0, |c| c.load(Ordering::Relaxed))
    }
}

/// Every pair of an `outer` and an `inner` value, `outer` varying slowest; each pair in label order, the
/// `outer` value first when `outer_first` (for [`Family::new`]'s series).
pub const fn grid<const A: usize, const B: usize, const N: usize>(
    outer: [&'static str; A],
    inner: [&'static str; B],
    outer_first: bool,
) -> [[&'static str; 2]; N] {
    assert!(A * B == N);
    let mut out = [["", ""]; N];
    let mut i = 0;
    while i < N {
        let (o, n) = (outer[i / B], inner[i % B]);
        out[i] = if outer_first { [o, n] } else { [n, o] };
        i += 1;
    }
    out
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

    #[test]
    fn a_family_shows_series_with_a_value_or_marked_and_leaves_empty_labels_out() {
        static F: Counters<2, 3> = Family::new(
            "f_total",
            "counter",
            "F.",
            ["reason", "source"],
            [["", "cache"], ["a", "api"], ["b", "api"]],
            [const { AtomicU64::new(0) }; 3],
            0,
        );
        let mut out = String::new();
        F.render(&mut out);
        assert_eq!(out, "");
        F.inc(["b", "api"]);
        F.inc(["x", "api"]);
        F.show(|s| s[1] == "cache");
        F.render(&mut out);
        assert_eq!(
            out,
            "# HELP f_total F.\n# TYPE f_total counter\nf_total{source=\"cache\"} 0\nf_total{reason=\"b\",source=\"api\"} 1\n"
        );
        assert_eq!((F.get(["b", "api"]), F.get(["x", "api"])), (1, 0));
        let g: [[&str; 2]; 4] = grid(["t1", "t2"], ["r1", "r2"], false);
        assert_eq!(g, [["r1", "t1"], ["r2", "t1"], ["r1", "t2"], ["r2", "t2"]]);
    }
}
