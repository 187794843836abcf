//! The serving core: one small tokio runtime on a background thread. Every connection is a task (TLS by
//! tokio-rustls over the same rustls configurations); a request is read from the bytes received so far
//! ([`http::parse_buffered`]) and handed to the synchronous handler ([`api::handle`]) on the blocking pool,
//! so injected delays and stalls block nothing else; a watch then stays a task fed by the hub
//! ([`crate::watch`]). Counters for the benchmarks ([`Stats`]): connections, TLS handshakes, API requests
//! by kind, watches, and the process's CPU time.

use std::io;
use std::net::Shutdown;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, LockResult, MutexGuard, WaitTimeoutResult};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio_rustls::TlsAcceptor;

use crate::api::{self, Next};
use crate::http::{self, HttpRequest};
use crate::{At, Fault, Shared};

/// How long a connection may stay silent (no handshake, no next request) before it is closed.
const IDLE: Duration = Duration::from_secs(120);

/// "Something changed": wakes threads blocked in a handler (stalls, hangs) and the watch dispatcher.
#[derive(Default)]
pub(crate) struct Changed {
    cv: Condvar,
    dispatcher: Notify,
}

impl Changed {
    pub fn notify_all(&self) {
        self.cv.notify_all();
        // A stored permit: the dispatcher runs once more even if it is busy right now.
        self.dispatcher.notify_one();
    }

    pub fn wait_timeout<'a, T>(
        &self,
        guard: MutexGuard<'a, T>,
        d: Duration,
    ) -> LockResult<(MutexGuard<'a, T>, WaitTimeoutResult)> {
        self.cv.wait_timeout(guard, d)
    }
}

/// What a handler writes: the bytes the connection task sends once the handler returns.
#[derive(Default)]
pub(crate) struct Conn {
    out: Vec<u8>,
}

impl Conn {
    pub fn get_mut(&mut self) -> &mut Vec<u8> {
        &mut self.out
    }
}

/// The kind of an API request, as an API server's audit log would count it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// GET of one object.
    Get,
    /// GET of a collection.
    List,
    /// GET with `watch=true`.
    Watch,
    /// Anything else (PATCH, POST, DELETE, ...).
    Other,
}

/// The kind of a request to `/api/v1/...` or `/apis/<group>/<version>/...`.
pub fn kind_of(method: &str, path: &str, query: &str) -> Kind {
    if method != "GET" {
        return Kind::Other;
    }
    if http::parse_query(query)
        .iter()
        .any(|(k, v)| k == "watch" && (v == "true" || v == "1"))
    {
        return Kind::Watch;
    }
    let seg: Vec<&str> = path.trim_matches('/').split('/').collect();
    let rest = match seg.as_slice() {
        ["api", _v, rest @ ..] => rest,
        ["apis", _g, _v, rest @ ..] => rest,
        _ => return Kind::Other,
    };
    let rest = match rest {
        ["namespaces", _ns, r @ ..] if !r.is_empty() => r,
        r => r,
    };
    match rest.len() {
        0 => Kind::Other,
        1 => Kind::List,
        _ => Kind::Get,
    }
}

/// Monotonic counters since the server started.
#[derive(Default)]
pub(crate) struct Counters {
    connections: AtomicU64,
    handshakes: AtomicU64,
    admin_connections: AtomicU64,
    kinds: [AtomicU64; 4],
}

fn kind_index(k: Kind) -> usize {
    match k {
        Kind::Get => 0,
        Kind::List => 1,
        Kind::Watch => 2,
        Kind::Other => 3,
    }
}

/// A snapshot of the counters (see `GET /_double/stats`).
#[derive(Debug, Clone, PartialEq)]
pub struct Stats {
    /// TCP connections accepted.
    pub connections: u64,
    /// TLS handshakes completed.
    pub tls_handshakes: u64,
    /// Connections whose first request was an admin one (`/_double/...`): the harness's own.
    pub admin_connections: u64,
    /// API requests by kind (admin requests are not counted).
    pub gets: u64,
    pub lists: u64,
    pub watches: u64,
    pub others: u64,
    /// Watches streaming right now, and ever opened.
    pub watches_open: u64,
    /// Watches holding their events right now (`Fault::WatchHold`, `Fault::WatchHoldGone`).
    pub watches_held: u64,
    pub watches_opened: u64,
    /// Selector evaluations the watch hub made to hand out changes (with the node index, about one per
    /// change per watcher of that node; without, one per change per watcher).
    pub watch_checks: u64,
    /// User + system CPU time of this process (the double and whatever else runs in it).
    pub cpu_seconds: f64,
}

impl Stats {
    pub fn requests(&self) -> u64 {
        self.gets + self.lists + self.watches + self.others
    }
}

/// User + system CPU seconds of this process.
pub fn process_cpu_seconds() -> f64 {
    // SAFETY: getrusage only writes the struct we pass, which is a plain C struct zero-initialised here.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_SELF with a valid pointer to an owned rusage.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return 0.0;
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

pub(crate) fn stats(shared: &Shared) -> Stats {
    let c = &shared.counters;
    let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let (open, opened, checks) = {
        let st = shared.lock();
        (
            st.watches.open() as u64,
            st.watches.opened,
            st.watches.checks,
        )
    };
    Stats {
        connections: n(&c.connections),
        tls_handshakes: n(&c.handshakes),
        admin_connections: n(&c.admin_connections),
        gets: n(&c.kinds[0]),
        lists: n(&c.kinds[1]),
        watches: n(&c.kinds[2]),
        others: n(&c.kinds[3]),
        watches_open: open,
        watches_held: shared.held.load(Ordering::SeqCst),
        watches_opened: opened,
        watch_checks: checks,
        cpu_seconds: process_cpu_seconds(),
    }
}

/// The `GET /_double/stats` body: the counters, and `requests` by kind (`get`, `list`, `watch`, `other`).
pub(crate) fn stats_json(s: &Stats) -> miniserde::json::Object {
    use crate::store::number;
    use miniserde::json::{Number, Object, Value};
    let mut kinds = Object::new();
    for (k, v) in [
        ("get", s.gets),
        ("list", s.lists),
        ("watch", s.watches),
        ("other", s.others),
    ] {
        kinds.insert(k.into(), number(v));
    }
    let mut o = Object::new();
    for (k, v) in [
        ("connections", s.connections),
        ("tls_handshakes", s.tls_handshakes),
        ("admin_connections", s.admin_connections),
        ("watches_open", s.watches_open),
        ("watches_held", s.watches_held),
        ("watches_opened", s.watches_opened),
        ("watch_checks", s.watch_checks),
    ] {
        o.insert(k.into(), number(v));
    }
    o.insert("requests".into(), Value::Object(kinds));
    o.insert(
        "cpu_seconds".into(),
        Value::Number(Number::F64(s.cpu_seconds)),
    );
    o
}

/// Starts serving `listener` on a background thread that owns the runtime until the server stops.
pub(crate) fn start(listener: std::net::TcpListener, shared: Arc<Shared>) -> io::Result<()> {
    listener.set_nonblocking(true)?;
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get().clamp(2, 4));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .thread_name("kube-double")
        .enable_all()
        .build()?;
    std::thread::Builder::new()
        .name("kube-double".into())
        .spawn(move || {
            rt.block_on(async {
                let Ok(l) = TcpListener::from_std(listener) else {
                    return;
                };
                tokio::spawn(dispatcher(shared.clone()));
                accept_loop(l, shared).await;
            });
            // Every connection task is dropped (its socket closed); stalled handlers see `stop` and return.
            rt.shutdown_timeout(Duration::from_millis(500));
        })?;
    Ok(())
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        tokio::select! {
            r = listener.accept() => {
                if let Ok((tcp, _)) = r {
                    shared.counters.connections.fetch_add(1, Ordering::Relaxed);
                    tokio::spawn(serve_connection(tcp, shared.clone()));
                }
            }
            _ = shared.stopped.notified() => return,
        }
    }
}

/// Hands out changes and bookmarks whenever something changed or a bookmark is due.
async fn dispatcher(shared: Arc<Shared>) {
    loop {
        let due = {
            let mut guard = shared.lock();
            let st = &mut *guard;
            st.watches.dispatch(&st.store, Instant::now())
        };
        match due {
            Some(d) => tokio::select! {
                _ = shared.changed.dispatcher.notified() => {}
                _ = tokio::time::sleep_until(tokio::time::Instant::from_std(d)) => {}
            },
            None => shared.changed.dispatcher.notified().await,
        }
    }
}

/// The next request on the connection, reading more bytes as needed; `None` when the client closed (or
/// went silent for [`IDLE`], or sent something that is not HTTP).
async fn next_request<S: tokio::io::AsyncRead + Unpin>(
    io: &mut S,
    buf: &mut Vec<u8>,
) -> Option<HttpRequest> {
    loop {
        match http::parse_buffered(buf) {
            Ok(Some((req, used))) => {
                buf.drain(..used);
                return Some(req);
            }
            Ok(None) => {}
            Err(_) => return None,
        }
        let mut chunk = [0u8; 16 << 10];
        match tokio::time::timeout(IDLE, io.read(&mut chunk)).await {
            Ok(Ok(n)) if n > 0 => buf.extend_from_slice(&chunk[..n]),
            _ => return None,
        }
    }
}

async fn serve_connection(tcp: TcpStream, shared: Arc<Shared>) {
    let _ = tcp.set_nodelay(true);
    let config = match shared.take_fault(At::Connection) {
        Some(Fault::Hang) => {
            // Hold the socket silently until the fault is cleared or the server stops.
            let sh = shared.clone();
            let _ = tokio::task::spawn_blocking(move || crate::hold_until_cleared(&sh)).await;
            return;
        }
        Some(Fault::WrongCert) => shared.wrong.config.clone(),
        _ => shared.good.config.clone(),
    };
    let tls = match tokio::time::timeout(IDLE, TlsAcceptor::from(config).accept(tcp)).await {
        Ok(Ok(s)) => s,
        _ => return,
    };
    shared.counters.handshakes.fetch_add(1, Ordering::Relaxed);
    let mut tls = tls;
    let mut buf = Vec::new();
    let mut first = true;
    loop {
        let Some(req) = next_request(&mut tls, &mut buf).await else {
            return;
        };
        let c = &shared.counters;
        if req.path.starts_with("/_double/") {
            if first {
                c.admin_connections.fetch_add(1, Ordering::Relaxed);
            }
        } else {
            let k = kind_of(&req.method, &req.path, &req.query);
            c.kinds[kind_index(k)].fetch_add(1, Ordering::Relaxed);
        }
        first = false;
        let sh = shared.clone();
        let handled = tokio::task::spawn_blocking(move || {
            let mut conn = Conn::default();
            let next = api::handle(&sh, req, &mut conn);
            (next, conn.out)
        })
        .await;
        let Ok((next, out)) = handled else {
            return;
        };
        if !out.is_empty() && (tls.write_all(&out).await.is_err() || tls.flush().await.is_err()) {
            return;
        }
        match next {
            Next::KeepAlive => continue,
            Next::Close => {
                // close_notify, then FIN.
                let _ = tls.shutdown().await;
                return;
            }
            Next::Drop => {
                // No TLS close: the client sees the connection cut.
                let (tcp, _) = tls.into_inner();
                if let Ok(s) = tcp.into_std() {
                    let _ = s.shutdown(Shutdown::Both);
                }
                return;
            }
            Next::Stream(s) => {
                crate::watch::stream(&shared, tls, s).await;
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_kinds() {
        assert_eq!(kind_of("GET", "/api/v1/namespaces/a/pods/b", ""), Kind::Get);
        assert_eq!(
            kind_of("GET", "/api/v1/namespaces/a/pods", "limit=10"),
            Kind::List
        );
        assert_eq!(
            kind_of("GET", "/api/v1/pods", "fieldSelector=x"),
            Kind::List
        );
        assert_eq!(kind_of("GET", "/api/v1/pods", "watch=true"), Kind::Watch);
        assert_eq!(kind_of("GET", "/api/v1/namespaces/a", ""), Kind::Get);
        assert_eq!(kind_of("GET", "/api/v1/namespaces", ""), Kind::List);
        assert_eq!(kind_of("GET", "/api/v1/nodes/n1", ""), Kind::Get);
        assert_eq!(
            kind_of("GET", "/apis/apps/v1/namespaces/s/daemonsets/d", ""),
            Kind::Get
        );
        assert_eq!(
            kind_of("PATCH", "/api/v1/namespaces/a/pods/b/status", ""),
            Kind::Other
        );
        assert_eq!(kind_of("GET", "/healthz", ""), Kind::Other);
    }
}
