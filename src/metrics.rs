//! Prometheus text exposition (format 0.0.4), the one formatter every `/metrics` goes through: the HELP and
//! TYPE header, a sample line with escaped label values, a fixed-bucket histogram whose counts are atomics
//! (observed from any thread, rendered without a lock), and [`Family`]: a metric with fixed label names whose
//! series (label values from fixed sets) are known in advance, one cell (a counter, or a histogram) each in
//! [`Cells`]. A process's `/metrics` is its parts' renderers, called in order by its root.

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

/// What `render` writes (a process's `/metrics` is its root's list of renderers, called in order).
pub fn text(render: impl FnOnce(&mut String)) -> String {
    let mut out = String::new();
    render(&mut out);
    out
}

/// The content type of the text format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A metric whose series are known in advance: fixed label names, each series' label values from fixed
/// sets. Its values live in [`Cells`], apart, so that they start in zeroed memory.
pub struct Family {
    pub name: &'static str,
    pub help: &'static str,
    /// Label names (at most 4), in the order they are written (sorted, as Prometheus' clients write them).
    pub labels: &'static [&'static str],
    /// Series `i`'s value of label `l` (an empty one leaves the label out), for every series of its
    /// [`Cells`], in the order the series are written.
    pub value: fn(i: usize, l: usize) -> &'static str,
}

impl Family {
    /// Writes series `i` of `cell`, its labels those with a value.
    fn write(&self, i: usize, cell: &impl Cell, out: &mut String) {
        let mut labels = [("", ""); 4];
        let mut n = 0;
        for (l, k) in self.labels.iter().enumerate().take(labels.len()) {
            labels[n] = (k, (self.value)(i, l));
            n += usize::from(!labels[n].1.is_empty());
        }
        cell.write(out, self.name, &labels[..n]);
    }

    /// Which of the first `n` series has these label values (in `labels`' order).
    fn find(&self, n: usize, values: &[&str]) -> Option<usize> {
        (0..n).find(|&i| (values.iter().enumerate()).all(|(l, v)| (self.value)(i, l) == *v))
    }
}

/// One series' value: a counter, or a histogram.
pub trait Cell: Sync {
    /// The TYPE of a family of these.
    const KIND: &'static str;
    /// No value yet (nothing counted or observed).
    fn is_zero(&self) -> bool;
    /// Its sample lines for `labels`.
    fn write(&self, out: &mut String, name: &str, labels: &[(&str, &str)]);
}

impl Cell for AtomicU64 {
    const KIND: &'static str = "counter";
    fn is_zero(&self) -> bool {
        self.load(Ordering::Relaxed) == 0
    }
    fn write(&self, out: &mut String, name: &str, labels: &[(&str, &str)]) {
        sample(out, name, labels, self.load(Ordering::Relaxed) as f64);
    }
}

impl Cell for Histogram {
    const KIND: &'static str = "histogram";
    fn is_zero(&self) -> bool {
        self.count() == 0
    }
    fn write(&self, out: &mut String, name: &str, labels: &[(&str, &str)]) {
        self.render(out, name, labels);
    }
}

/// The values of a [`Family`]'s `N` series, one [`Cell`] each, and which series are shown before they
/// have a value. A series with a value is always shown; the header only with a series.
pub struct Cells<C, const N: usize> {
    cells: [C; N],
    /// Series shown at zero (bit `i`: series `i`).
    shown: AtomicU64,
}

/// The counter vector: one atomic per series.
pub type Counters<const N: usize> = Cells<AtomicU64, N>;

impl<C: Cell, const N: usize> Cells<C, N> {
    /// `shown`: the series shown from the start (bit `i`: series `i`).
    pub const fn new(cells: [C; N], shown: u64) -> Self {
        assert!(N <= 64, "at most 64 series");
        Cells {
            cells,
            shown: AtomicU64::new(shown),
        }
    }

    /// The cell of `f`'s series with these label values (`None`: no series of `f`).
    pub fn cell(&self, f: &Family, values: &[&str]) -> Option<&C> {
        Some(&self.cells[f.find(N, values)?])
    }

    /// Shows the series `series` selects (bit `i`: series `i`) from now on, at zero until counted.
    pub fn show(&self, series: u64) {
        self.shown.fetch_or(series, Ordering::Relaxed);
    }

    /// `f`'s header and every series that has a value or is shown (nothing for none).
    pub fn render(&self, f: &Family, out: &mut String) {
        render(f, &self.cells, self.shown.load(Ordering::Relaxed), out);
    }
}

fn render<C: Cell>(f: &Family, cells: &[C], shown: u64, out: &mut String) {
    let mut first = true;
    for (i, cell) in cells.iter().enumerate() {
        if shown & (1 << i) == 0 && cell.is_zero() {
            continue;
        }
        if std::mem::take(&mut first) {
            header(out, f.name, C::KIND, f.help);
        }
        f.write(i, cell, out);
    }
}

impl<const N: usize> Default for Counters<N> {
    fn default() -> Self {
        Cells::new([const { AtomicU64::new(0) }; N], 0)
    }
}

impl<const N: usize> Counters<N> {
    /// Counts one for `f`'s series with these label values; values of no series are not counted.
    pub fn inc(&self, f: &Family, values: &[&str]) {
        if let Some(c) = self.cell(f, values) {
            c.fetch_add(1, Ordering::Relaxed);
        }
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

    #[test]
    fn a_family_shows_series_with_a_value_or_marked_and_leaves_empty_labels_out() {
        static F: Family = Family {
            name: "f_total",
            help: "F.",
            labels: &["reason", "source"],
            value: |i, l| match (i, l) {
                (0, 0) => "",
                (0, _) => "cache",
                (_, 0) => ["a", "b"][i - 1],
                _ => "api",
            },
        };
        static C: Counters<3> = Cells::new([const { AtomicU64::new(0) }; 3], 0);
        let mut out = String::new();
        C.render(&F, &mut out);
        assert_eq!(out, "");
        C.inc(&F, &["b", "api"]);
        C.inc(&F, &["x", "api"]);
        C.show(1);
        C.render(&F, &mut out);
        assert_eq!(
            out,
            "# HELP f_total F.\n# TYPE f_total counter\nf_total{source=\"cache\"} 0\nf_total{reason=\"b\",source=\"api\"} 1\n"
        );
    }
}
