//! Readiness, metrics, and a tiny HTTP/1.x responder for them: `/healthz` (200 unless a directory we must
//! follow can no longer be watched, e.g. the conf dir's mount shows a deleted directory: then 503, so a
//! liveness probe restarts us), `/readyz` (200 when installed and valid, else 503 `Service Unavailable\n`), and Prometheus text on `/metrics` with
//! upstream's names (`istio_cni_install_ready`, `istio_cni_installs_total{result}`), ours
//! (`istio_cni_startup_ready_seconds`), and what the node's other parts add (a list of renderers).
//! The responder is deliberately small: GET only, the request head bounded to 8 KiB and due within 2 s of
//! accept, `Connection: close`; [`crate::httpd`] multiplexes the connections so none can hold up another,
//! and listens dual-stack.

use crate::error::Result;
use crate::httpd;
use crate::metrics::{self, Counters, Family};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// Install results, upstream's label values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InstallResult {
    Success,
    CopyBinariesFailure,
    CreateKubeconfigFailure,
    CreateCniConfigFailure,
}

impl InstallResult {
    /// Upstream's label value.
    fn name(self) -> &'static str {
        match self {
            InstallResult::Success => "SUCCESS",
            InstallResult::CopyBinariesFailure => "COPY_BINARIES_FAILURE",
            InstallResult::CreateKubeconfigFailure => "CREATE_KUBECONFIG_FAILURE",
            InstallResult::CreateCniConfigFailure => "CREATE_CNI_CONFIG_FAILURE",
        }
    }
}

/// `istio_cni_installs_total{result}`, in [`InstallResult`]'s order.
static INSTALLS: Family = Family {
    name: "istio_cni_installs_total",
    help: "Total number of CNI plugin installs by the installer, by result.",
    labels: &["result"],
    value: |i, _| {
        use InstallResult::*;
        [
            Success,
            CopyBinariesFailure,
            CreateKubeconfigFailure,
            CreateCniConfigFailure,
        ][i]
            .name()
    },
};

pub const STARTUP_READY: &str = "istio_cni_startup_ready_seconds";

/// A part of `/metrics` after the installer's own series.
pub type Render = fn(&mut String);

/// Shared installer state read by the HTTP responders.
#[derive(Default)]
pub struct State {
    ready: AtomicBool,
    unhealthy: AtomicBool,
    /// The loop ended asking for a container restart (a watched directory showing its deleted self).
    restart: AtomicBool,
    /// `istio_cni_installs_total{result}`: `SUCCESS` always, as upstream, the others once counted.
    installs: Counters<4>,
    /// Process start → first ready (`istio_cni_startup_ready_seconds`).
    first_ready: OnceLock<Duration>,
    /// What `/metrics` shows after the installer's own series, in order.
    parts: &'static [Render],
}

impl State {
    /// With `/metrics` showing only the installer's own series.
    pub fn new() -> Arc<State> {
        State::with_metrics(&[])
    }

    /// With `/metrics` showing `parts` after the installer's own series (install-cni's:
    /// [`super::METRICS`]).
    pub fn with_metrics(parts: &'static [Render]) -> Arc<State> {
        Arc::new(State {
            parts,
            ..State::default()
        })
    }
    pub fn set_ready(&self, ready: bool) {
        if ready {
            self.first_ready.get_or_init(crate::applet::since_start);
        }
        self.ready.store(ready, Ordering::SeqCst);
    }

    /// Process start → the first time it was ready.
    pub fn startup(&self) -> Option<Duration> {
        self.first_ready.get().copied()
    }
    pub fn ready(&self) -> bool {
        self.ready.load(Ordering::SeqCst)
    }
    /// Sets liveness; returns the previous value.
    pub fn set_healthy(&self, healthy: bool) -> bool {
        !self.unhealthy.swap(!healthy, Ordering::SeqCst)
    }
    /// The loop is ending for a restart, not an uninstall: keep everything in place.
    pub fn request_restart(&self) {
        self.restart.store(true, Ordering::SeqCst);
    }
    pub fn restart_requested(&self) -> bool {
        self.restart.load(Ordering::SeqCst)
    }
    pub fn healthy(&self) -> bool {
        !self.unhealthy.load(Ordering::SeqCst)
    }
    pub fn count(&self, r: InstallResult) {
        self.installs.inc(&INSTALLS, &[r.name()]);
    }

    /// install-cni's whole `/metrics`: its own series, then its parts'.
    pub fn metrics_text(&self) -> String {
        metrics::text(|s| {
            self.render(s);
            self.parts.iter().for_each(|p| p(s));
        })
    }

    /// The installer's own series: readiness, installs, start-up.
    fn render(&self, out: &mut String) {
        let ready = "istio_cni_install_ready";
        metrics::header(
            out,
            ready,
            "gauge",
            "Whether this istio-cni-node has the CNI plugin installed and valid (1) or not (0).",
        );
        metrics::sample(out, ready, &[], u8::from(self.ready()).into());
        self.installs.show(1);
        self.installs.render(&INSTALLS, out);
        if let Some(d) = self.startup() {
            metrics::header(
                out,
                STARTUP_READY,
                "gauge",
                "Seconds from the start of this istio-cni-node process to its first ready.",
            );
            metrics::sample(out, STARTUP_READY, &[], d.as_secs_f64());
        }
    }
}

/// Which endpoints a listener serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoints {
    Health,
    Metrics,
}

/// The answer for a request path on the `which` server.
pub fn respond(state: &State, which: Endpoints, path: &str) -> httpd::Reply {
    let probe = |ok: bool| match ok {
        true => (200, "text/plain", "OK\n".into()),
        false => (503, "text/plain", "Service Unavailable\n".into()),
    };
    match (which, path) {
        (Endpoints::Health, "/healthz") => probe(state.healthy()),
        (Endpoints::Health, "/readyz") => probe(state.ready()),
        (Endpoints::Metrics, "/metrics") => (200, metrics::CONTENT_TYPE, state.metrics_text()),
        _ => (404, "text/plain", "Not Found\n".into()),
    }
}

/// Serves `which` on `port` ([`httpd::serve`]: dual-stack, every connection independently). Returns the
/// bound address.
pub fn serve(port: u16, state: Arc<State>, which: Endpoints) -> Result<SocketAddr> {
    httpd::serve(port, &format!("{which:?}"), move |path| {
        respond(&state, which, path)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpStream;

    fn get(addr: SocketAddr, path: &str) -> (u16, String) {
        let mut c = TcpStream::connect(("127.0.0.1", addr.port())).unwrap();
        write!(c, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut s = String::new();
        c.read_to_string(&mut s).unwrap();
        let code = s[9..12].parse().unwrap();
        let body = s.split("\r\n\r\n").nth(1).unwrap_or("").to_string();
        (code, body)
    }

    #[test]
    fn health_and_metrics() {
        let st = State::new();
        let h = serve(0, st.clone(), Endpoints::Health).unwrap();
        let m = serve(0, st.clone(), Endpoints::Metrics).unwrap();
        assert_eq!(get(h, "/healthz").0, 200);
        assert_eq!(get(h, "/readyz"), (503, "Service Unavailable\n".into()));
        st.set_ready(true);
        st.count(InstallResult::Success);
        assert_eq!(get(h, "/readyz").0, 200);
        let (c, body) = get(m, "/metrics");
        assert_eq!(c, 200);
        assert!(body.contains("istio_cni_install_ready 1\n"), "{body}");
        assert!(
            body.contains("istio_cni_installs_total{result=\"SUCCESS\"} 1\n"),
            "{body}"
        );
        assert_eq!(get(m, "/readyz").0, 404);
        let parts = State::with_metrics(&[|s| s.push_str("a 1\n"), |s| s.push_str("b 2\n")]);
        assert!(parts.metrics_text().ends_with("a 1\nb 2\n"));
        // An oversized head is refused, not buffered.
        let mut c = TcpStream::connect(("127.0.0.1", h.port())).unwrap();
        let _ = c.write_all(&vec![b'a'; httpd::MAX_HEAD + 10]);
        let mut s = String::new();
        let _ = c.read_to_string(&mut s);
        assert!(s.starts_with("HTTP/1.1 431"), "{s}");
    }
}
