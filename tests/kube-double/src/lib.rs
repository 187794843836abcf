//! `kube_double`: an HTTPS Kubernetes API server double for tests, the demo script and benchmarks.
//!
//! Real TLS (rustls, ring) with a CA and server certificate generated at start for `127.0.0.1`, `::1` and
//! `localhost`; bearer-token auth (401 on a wrong token); pods in memory with uid and resourceVersion;
//! field (`spec.nodeName`, `metadata.name`, `metadata.namespace`, `status.phase`) and label selectors;
//! list pagination; watch streams with bookmarks and a forced 410; merge patch of `pods/{name}/status`;
//! delete with preconditions (409); events; fault injection; a record of every API request; DaemonSets,
//! Nodes, per-resource faults and pod-bound tokens ([`objects`]).
//!
//! HTTP/1.1 keep-alive, every connection a task of one small tokio runtime ([`serve`]); watches are fed by
//! a hub indexed by node, so a thousand node agents' watches cost a thousand idle tasks ([`watch`]).
//! Admin endpoints under `/_double/` (no auth, never faulted, never recorded): `POST /_double/pods`,
//! `POST /_double/fault`, `GET /_double/requests`, `POST /_double/gone`, `POST /_double/token`,
//! `GET /_double/events`, `GET /_double/healthz`, `GET /_double/stats` (connections, TLS handshakes, API
//! requests by kind, watches, CPU seconds: [`Stats`]).
//!
//! ```no_run
//! let srv = kube_double::Server::start(kube_double::Options::default()).unwrap();
//! srv.add_pod(r#"{"metadata":{"name":"p","namespace":"ns"},"spec":{"nodeName":"n1"}}"#).unwrap();
//! srv.write_kubeconfig(std::path::Path::new("/tmp/kubeconfig")).unwrap();
//! srv.set_fault(kube_double::Fault::Status(503), Some(2)); // the next two API requests get 503
//! ```

mod admin;
mod api;
pub mod http;
pub mod objects;
mod selector;
pub mod serve;
pub mod store;
mod tls;
mod watch;

use std::io;
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use miniserde::json::{Object, Value};

pub use serve::{Kind, Stats};
pub use store::Store;

/// Server options.
#[derive(Debug, Clone)]
pub struct Options {
    /// Where to listen; port 0 picks a free port.
    pub listen: SocketAddr,
    /// The bearer token clients must send.
    pub token: String,
    /// Interval between BOOKMARK events on watches that allow them.
    pub bookmark_interval: Duration,
}

impl Default for Options {
    fn default() -> Self {
        use std::sync::atomic::AtomicU64;
        static N: AtomicU64 = AtomicU64::new(0);
        Options {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            token: format!(
                "double-token-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::SeqCst)
            ),
            bookmark_interval: Duration::from_secs(1),
        }
    }
}

/// An injected failure. Connection-level faults (`Hang`, `WrongCert`) apply per newly accepted
/// connection (a client's already-open keep-alive connection is not affected; use a fresh client); the
/// others per API request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// Answer normally, after this delay.
    Delay(Duration),
    /// Accept the TCP connection and never speak (no TLS handshake) until the fault is cleared.
    Hang,
    /// Read the request, then close the connection without answering.
    Drop,
    /// Answer with this HTTP status and a matching Status body (500, 429, 401, 403, ...).
    Status(u16),
    /// Complete the TLS handshake with a certificate from another CA.
    WrongCert,
    /// Read the request (TLS done), then never answer until the fault is cleared or the server stops.
    Stall,
    /// Answer 429 `TooManyRequests` with `Retry-After: <seconds>`.
    RetryAfter(u32),
    /// Answer with this HTTP status and this body as it is, whatever was asked (a proxy's page, a
    /// misrouted request, a server answering 200 with another object).
    Answer(u16, String),
    /// Watch requests only: answer 200, then end the stream at once without an event.
    WatchClose,
    /// Watch requests only: answer 200 with one `ERROR` event 410 `Expired`, then end the stream.
    WatchGone,
    /// Watch requests only: answer 200 (the response head goes out at once), then hold the watch's events
    /// (its initial or resumed ones, and every later one) until the fault is cleared or replaced: an API
    /// server slow to replay what a re-opened watch missed.
    WatchHold,
    /// Watch requests only: answer 200 (the head at once), send nothing until the fault is cleared or
    /// replaced, then one `ERROR` event 410 `Expired` and the end of the stream.
    WatchHoldGone,
}

/// Where a fault is taken: a new connection, a watch request, any other API request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum At {
    Connection,
    Watch,
    Request,
}

impl Fault {
    fn applies(&self, at: At) -> bool {
        match self {
            Fault::Hang | Fault::WrongCert => at == At::Connection,
            Fault::WatchClose | Fault::WatchGone | Fault::WatchHold | Fault::WatchHoldGone => {
                at == At::Watch
            }
            _ => at != At::Connection,
        }
    }
}

/// One recorded API request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedRequest {
    pub method: String,
    pub path: String,
    /// Raw (still percent-encoded) query.
    pub query: String,
    pub body: String,
    /// The `Authorization` header as sent.
    pub authorization: Option<String>,
    /// The HTTP status we answered (0 when the connection was dropped).
    pub status: u16,
}

impl RecordedRequest {
    /// A decoded query parameter.
    pub fn param(&self, k: &str) -> Option<String> {
        http::parse_query(&self.query)
            .into_iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v)
    }
}

pub(crate) struct FaultRule {
    fault: Fault,
    remaining: Option<u32>,
}

pub(crate) struct State {
    pub store: Store,
    pub token: String,
    pub fault: Option<FaultRule>,
    pub fault_epoch: u64,
    pub requests: Vec<RecordedRequest>,
    /// The open watches.
    pub watches: watch::Hub,
    /// Whether watches may ask for the streaming watch-list (`sendInitialEvents=true`); `false` answers
    /// them 422 as an API server without the `WatchList` feature does (Kubernetes 1.27–1.31 and 1.33 by
    /// default).
    pub watch_list: bool,
}

pub(crate) struct Shared {
    pub state: Mutex<State>,
    pub changed: serve::Changed,
    pub stop: AtomicBool,
    /// Ends the accept loop.
    pub stopped: tokio::sync::Notify,
    pub counters: serve::Counters,
    /// Watches holding their events right now ([`Fault::WatchHold`], [`Fault::WatchHoldGone`]).
    pub held: std::sync::atomic::AtomicU64,
    pub bookmark_interval: Duration,
    pub good: tls::Pki,
    pub wrong: tls::Pki,
}

impl Shared {
    pub fn lock(&self) -> MutexGuard<'_, State> {
        match self.state.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// Takes one use of the current fault if it applies at this level.
    pub fn take_fault(&self, at: At) -> Option<Fault> {
        let mut st = self.lock();
        let rule = st.fault.as_mut()?;
        if !rule.fault.applies(at) {
            return None;
        }
        let f = rule.fault.clone();
        if let Some(n) = rule.remaining.as_mut() {
            *n = n.saturating_sub(1);
            if *n == 0 {
                st.fault = None;
            }
        }
        Some(f)
    }
}

/// A running double. Dropping it stops the server.
pub struct Server {
    shared: Arc<Shared>,
    addr: SocketAddr,
}

fn invalid(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg.into())
}

fn parse_object(text: &str) -> io::Result<Object> {
    miniserde::json::from_str::<Object>(text).map_err(|_| invalid("not a JSON object"))
}

/// Standard base64 with padding (kubeconfig `certificate-authority-data`). Public for the tests of the
/// root crate, which need an encoder independent of the one under test.
pub fn b64(data: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in data.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |acc, (i, b)| acc | (*b as u32) << (16 - 8 * i));
        for i in 0..4 {
            out.push(if i <= chunk.len() {
                A[(n >> (18 - 6 * i) & 63) as usize] as char
            } else {
                '='
            });
        }
    }
    out
}

impl Server {
    pub fn start(opts: Options) -> io::Result<Server> {
        let mut names: Vec<String> = vec!["localhost".into(), "127.0.0.1".into(), "::1".into()];
        // A specific non-loopback listen address (a test node's address that pods reach) is in the
        // certificate too.
        let ip = opts.listen.ip();
        if !ip.is_unspecified() && !ip.is_loopback() {
            names.push(ip.to_string());
        }
        let good = tls::generate("kube-double CA", &names)?;
        let wrong = tls::generate("some other CA", &names)?;
        let listener = TcpListener::bind(opts.listen)?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                store: Store::default(),
                token: opts.token,
                fault: None,
                fault_epoch: 0,
                requests: Vec::new(),
                watches: watch::Hub::default(),
                watch_list: true,
            }),
            changed: serve::Changed::default(),
            stop: AtomicBool::new(false),
            stopped: tokio::sync::Notify::new(),
            counters: serve::Counters::default(),
            held: std::sync::atomic::AtomicU64::new(0),
            bookmark_interval: opts.bookmark_interval,
            good,
            wrong,
        });
        serve::start(listener, shared.clone())?;
        Ok(Server { shared, addr })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `https://127.0.0.1:<port>` (or `https://[::1]:<port>`).
    pub fn url(&self) -> String {
        format!("https://{}", self.addr)
    }

    pub fn ca_pem(&self) -> String {
        self.shared.good.ca_pem.clone()
    }

    /// The PEM CA of the *wrong* certificate (for tests that trust the wrong CA on purpose).
    pub fn other_ca_pem(&self) -> String {
        self.shared.wrong.ca_pem.clone()
    }

    pub fn token(&self) -> String {
        self.shared.lock().token.clone()
    }

    /// Changes the accepted token (simulates rotation: the old one gets 401 from now on).
    pub fn set_token(&self, token: &str) {
        self.shared.lock().token = token.to_string();
    }

    /// The kubeconfig our installer writes (upstream master's format, byte for byte) for `server`.
    pub fn kubeconfig_for(&self, server: &str) -> String {
        format!(
            "apiVersion: v1\nclusters:\n- cluster:\n    certificate-authority-data: {}\n    server: {server}\n  name: local\ncontexts:\n- context:\n    cluster: local\n    user: istio-cni\n  name: istio-cni-context\ncurrent-context: istio-cni-context\nkind: Config\nusers:\n- name: istio-cni\n  user:\n    token: {}\n",
            b64(self.ca_pem().as_bytes()),
            self.token()
        )
    }

    pub fn kubeconfig(&self) -> String {
        self.kubeconfig_for(&self.url())
    }

    /// Writes [`Server::kubeconfig`] to `path` (mode 0600, atomically).
    pub fn write_kubeconfig(&self, path: &Path) -> io::Result<()> {
        write_private(path, self.kubeconfig().as_bytes())
    }

    /// Adds (or replaces) a pod from its JSON; returns the stored object with uid and resourceVersion.
    pub fn add_pod(&self, json: &str) -> io::Result<Object> {
        let pod = parse_object(json)?;
        let mut st = self.shared.lock();
        let out = st.store.put_pod(pod).map_err(invalid)?;
        drop(st);
        self.shared.changed.notify_all();
        Ok(out)
    }

    /// Adds pods from a JSON file (a pod, a list with `items`, or an array) or every `*.json` in a dir.
    pub fn add_pods_from(&self, path: &Path) -> io::Result<usize> {
        admin::load_pods(&self.shared, path)
    }

    pub fn pod(&self, ns: &str, name: &str) -> Option<Object> {
        self.shared
            .lock()
            .store
            .pods
            .get(&(ns.to_string(), name.to_string()))
            .cloned()
    }

    pub fn pod_count(&self) -> usize {
        self.shared.lock().store.pods.len()
    }

    /// Injects `fault` for the next `times` requests (connections for `Hang`/`WrongCert`, watch
    /// requests for the `Watch*` faults), or until cleared when `None`.
    pub fn set_fault(&self, fault: Fault, times: Option<u32>) {
        let mut st = self.shared.lock();
        st.fault = Some(FaultRule {
            fault,
            remaining: times,
        });
        st.fault_epoch += 1;
        drop(st);
        // Stalled requests of an earlier fault are released.
        self.shared.changed.notify_all();
    }

    /// Removes any fault and releases hung connections.
    pub fn clear_fault(&self) {
        let mut st = self.shared.lock();
        st.fault = None;
        st.fault_epoch += 1;
        drop(st);
        self.shared.changed.notify_all();
    }

    /// Every API request so far (admin requests excluded).
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.lock().requests.clone()
    }

    pub fn clear_requests(&self) {
        self.shared.lock().requests.clear();
    }

    /// Connections, TLS handshakes, API requests by kind, watches and CPU time so far.
    pub fn stats(&self) -> Stats {
        serve::stats(&self.shared)
    }

    /// Events received through `POST .../events`.
    pub fn events(&self) -> Vec<Object> {
        self.shared.lock().store.events.clone()
    }

    /// Ends every open watch normally, as an API server does at a watch's timeout: the client re-watches
    /// from the last resource version it saw.
    pub fn end_watches(&self) {
        self.shared.lock().watches.end_all();
    }

    /// Whether watches may ask for the streaming watch-list (default `true`); `false` answers them 422
    /// `Invalid`, as an API server without the `WatchList` feature (1.33's default) does.
    pub fn set_watch_list(&self, supported: bool) {
        self.shared.lock().watch_list = supported;
    }

    /// Ends every open watch with an ERROR 410 and makes all resource versions seen so far expired.
    pub fn force_gone(&self) {
        self.shared.lock().store.force_gone();
        self.shared.changed.notify_all();
    }

    pub fn resource_version(&self) -> u64 {
        self.shared.lock().store.rv
    }

    /// Applies a merge patch to a pod as `PATCH pods/{name}/status` would (emits MODIFIED).
    pub fn patch_pod(&self, ns: &str, name: &str, patch_json: &str) -> io::Result<Object> {
        let patch: Value =
            miniserde::json::from_str(patch_json).map_err(|_| invalid("patch is not JSON"))?;
        let key = (ns.to_string(), name.to_string());
        let r = self.shared.lock().store.patch_status(&key, &patch);
        self.shared.changed.notify_all();
        r.map_err(|(_, _, m)| invalid(m))
    }

    /// Deletes a pod (emits DELETED).
    pub fn delete_pod(&self, ns: &str, name: &str) -> io::Result<()> {
        let key = (ns.to_string(), name.to_string());
        let r = self.shared.lock().store.delete(&key, None, None);
        self.shared.changed.notify_all();
        r.map(|_| ()).map_err(|(_, _, m)| invalid(m))
    }

    pub fn stop(&self) {
        if self.shared.stop.swap(true, Ordering::SeqCst) {
            return;
        }
        self.shared.changed.notify_all();
        self.shared.stopped.notify_one();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Writes `data` to `path` atomically (temp file + rename), mode 0600.
pub fn write_private(path: &Path, data: &[u8]) -> io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp-double");
    let tmp = std::path::PathBuf::from(tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(data)?;
    drop(f);
    std::fs::rename(&tmp, path)
}

/// Blocks until the fault is cleared (or replaced) or the server stops.
pub(crate) fn hold_until_cleared(shared: &Shared) {
    let mut st = shared.lock();
    let epoch = st.fault_epoch;
    while !shared.stop.load(Ordering::SeqCst) && st.fault_epoch == epoch {
        st = match shared.changed.wait_timeout(st, Duration::from_millis(200)) {
            Ok((g, _)) => g,
            Err(p) => p.into_inner().0,
        };
    }
}
