//! `istio_cni_repair_pods_repaired_total{type,result}`, process-wide (a part of the installer's `/metrics`
//! and of the standalone agent's, [`serve`]). A series appears after its first increment, as upstream.

use crate::error::Result;
use crate::httpd;
use crate::metrics::{self, Cells, Counters, Family};
use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;

pub const NAME: &str = "istio_cni_repair_pods_repaired_total";

static REPAIRED: Family = Family {
    name: NAME,
    help: "Total number of pods repaired by repair controller",
    labels: &["result", "type"],
    value: |i, l| match l {
        0 => ["success", "skip", "fail"][i % 3],
        _ => ["label", "delete", "repair"][i / 3],
    },
};
static COUNTS: Counters<9> = Cells::new([const { AtomicU64::new(0) }; 9], 0);

/// Counts one outcome; `kind` ∈ label/delete/repair, `result` ∈ success/skip/fail.
pub fn inc(kind: &str, result: &str) {
    COUNTS.inc(&REPAIRED, &[result, kind]);
}

/// The series seen so far (nothing before the first increment).
pub fn render(out: &mut String) {
    COUNTS.render(&REPAIRED, out);
}

/// Serves the standalone agent's `GET /metrics` on `port` ([`httpd::serve`]: dual-stack, every connection
/// independently, as the installer): its counter and its watch's timings. Returns the bound address.
pub fn serve(port: u16) -> Result<SocketAddr> {
    httpd::serve(port, "repair-metrics", |path| match path {
        "/metrics" => (
            200,
            metrics::CONTENT_TYPE,
            metrics::text(|s| {
                render(s);
                super::audit::metrics::render(s);
                crate::kube::podwatch::timing::render(s);
            }),
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
        let text = || metrics::text(render);
        inc("bogus", "success");
        inc("label", "skip");
        let text = text();
        assert!(!text.contains("type=\"bogus\""), "{text}");
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
