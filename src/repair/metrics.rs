//! `istio_cni_repair_pods_repaired_total{type,result}`, process-wide (the installer's `/metrics` appends
//! [`render`]; the standalone agent serves it itself with [`serve`]). A series appears after its first
//! increment, as upstream.

use crate::error::Result;
use crate::httpd;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};

pub const NAME: &str = "istio_cni_repair_pods_repaired_total";
const HELP: &str = "Total number of pods repaired by repair controller";
const TYPES: [&str; 3] = ["label", "delete", "repair"];
const RESULTS: [&str; 3] = ["success", "skip", "fail"];

static COUNTS: [AtomicU64; 9] = [const { AtomicU64::new(0) }; 9];

fn index(kind: &str, result: &str) -> Option<usize> {
    let t = TYPES.iter().position(|x| *x == kind)?;
    let r = RESULTS.iter().position(|x| *x == result)?;
    Some(t * RESULTS.len() + r)
}

/// Counts one outcome; `kind` ∈ label/delete/repair, `result` ∈ success/skip/fail.
pub fn inc(kind: &str, result: &str) {
    if let Some(i) = index(kind, result) {
        COUNTS[i].fetch_add(1, Ordering::Relaxed);
    }
}

pub fn get(kind: &str, result: &str) -> u64 {
    index(kind, result).map_or(0, |i| COUNTS[i].load(Ordering::Relaxed))
}

/// The Prometheus text for the series seen so far ("" before the first increment).
pub fn render() -> String {
    let mut lines = String::new();
    for (ti, t) in TYPES.iter().enumerate() {
        for (ri, r) in RESULTS.iter().enumerate() {
            let n = COUNTS[ti * RESULTS.len() + ri].load(Ordering::Relaxed);
            if n > 0 {
                lines.push_str(&format!("{NAME}{{result=\"{r}\",type=\"{t}\"}} {n}\n"));
            }
        }
    }
    if lines.is_empty() {
        return lines;
    }
    format!("# HELP {NAME} {HELP}\n# TYPE {NAME} counter\n{lines}")
}

/// Serves `GET /metrics` on `port` ([`httpd::serve`]: dual-stack, every connection independently, as the
/// installer); returns the bound address.
pub fn serve(port: u16) -> Result<SocketAddr> {
    httpd::serve(port, "repair-metrics", |path| match path {
        "/metrics" => (
            200,
            "text/plain; version=0.0.4; charset=utf-8",
            render() + &crate::kube::watch_timing::render(),
        ),
        _ => (404, "text/plain", "Not Found\n".into()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn series_appear_after_first_increment_and_are_served() {
        assert!(!render().contains("type=\"bogus\""));
        inc("bogus", "success");
        inc("label", "skip");
        let before = get("label", "skip");
        inc("label", "skip");
        assert_eq!(get("label", "skip"), before + 1);
        let text = render();
        assert!(
            text.starts_with("# HELP istio_cni_repair_pods_repaired_total Total number"),
            "{text}"
        );
        assert!(
            text.contains("istio_cni_repair_pods_repaired_total{result=\"skip\",type=\"label\"}"),
            "{text}"
        );
        let addr = serve(0).unwrap();
        let mut c = std::net::TcpStream::connect(("127.0.0.1", addr.port())).unwrap();
        c.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut s = String::new();
        c.read_to_string(&mut s).unwrap();
        assert!(
            s.starts_with("HTTP/1.1 200 OK") && s.contains("type=\"label\""),
            "{s}"
        );
    }
}
