//! A thousand node agents' watches on one double: each `spec.nodeName=node-i` watch gets its own node's pod
//! and no other, and the counters the scale benchmark reads (`Server::stats`, `GET /_double/stats`) say
//! what happened: one TLS handshake and one WATCH per watcher, a thousand watches open, no GET or LIST, and
//! each change offered to its node's watcher only.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kube_double::{Options, Server};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const WATCHES: usize = 1000;

/// Raises the soft open-files limit to what `need` takes (each watch is a socket on both sides here).
fn raise_nofile(need: u64) {
    // SAFETY: getrlimit/setrlimit with a valid pointer to an owned, initialised rlimit.
    unsafe {
        let mut r = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut r), 0);
        if r.rlim_cur < need {
            assert!(
                r.rlim_max >= need,
                "this test needs {need} open files; the hard limit is {}",
                r.rlim_max
            );
            r.rlim_cur = need;
            assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &r), 0);
        }
    }
}

fn client_config(ca_pem: &str) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Arc::new(
        rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth(),
    )
}

/// Opens the watch of `node` and returns everything it received up to (and with) the event of `pod`.
async fn watch_until(
    srv_addr: std::net::SocketAddr,
    cfg: Arc<rustls::ClientConfig>,
    token: String,
    node: String,
    pod: String,
    opened: tokio::sync::mpsc::UnboundedSender<()>,
) -> String {
    let tcp = tokio::net::TcpStream::connect(srv_addr).await.unwrap();
    let name = ServerName::try_from("127.0.0.1").unwrap();
    let mut tls = tokio_rustls::TlsConnector::from(cfg)
        .connect(name, tcp)
        .await
        .unwrap();
    let req = format!(
        "GET /api/v1/pods?watch=true&fieldSelector=spec.nodeName%3D{node}&timeoutSeconds=120 HTTP/1.1\r\n\
         Host: x\r\nAuthorization: Bearer {token}\r\n\r\n"
    );
    tls.write_all(req.as_bytes()).await.unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let mut told = false;
    let want = format!("\"name\":\"{pod}\"");
    loop {
        let n = tls.read(&mut buf).await.unwrap();
        assert!(
            n > 0,
            "{node}: watch ended early: {}",
            String::from_utf8_lossy(&got)
        );
        got.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&got);
        if !told && text.contains("\r\n\r\n") {
            assert!(text.starts_with("HTTP/1.1 200"), "{node}: {text}");
            told = true;
            let _ = opened.send(());
        }
        if text.contains(&want) {
            return text.into_owned();
        }
    }
}

#[test]
fn a_thousand_watches_each_get_only_their_nodes_pods() {
    raise_nofile(2 * WATCHES as u64 + 256);
    let srv = Server::start(Options {
        bookmark_interval: Duration::from_secs(3600),
        ..Options::default()
    })
    .unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let cfg = client_config(&srv.ca_pem());
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let tasks: Vec<_> = (0..WATCHES)
        .map(|i| {
            rt.spawn(watch_until(
                srv.addr(),
                cfg.clone(),
                srv.token(),
                format!("node-{i}"),
                format!("pod-{i}"),
                tx.clone(),
            ))
        })
        .collect();
    rt.block_on(async {
        for _ in 0..WATCHES {
            tokio::time::timeout(Duration::from_secs(120), rx.recv())
                .await
                .expect("every watch is answered")
                .unwrap();
        }
    });
    let s = srv.stats();
    assert_eq!(s.watches_open, WATCHES as u64, "{s:?}");
    assert_eq!(s.tls_handshakes, WATCHES as u64, "{s:?}");
    assert_eq!(
        (s.watches, s.gets, s.lists, s.others),
        (WATCHES as u64, 0, 0, 0),
        "{s:?}"
    );
    // A pod on a node nobody watches, then one pod per watched node, in order: a watch that is handed
    // other nodes' events sees pods before its own.
    srv.add_pod(
        r#"{"metadata":{"name":"stray","namespace":"default"},"spec":{"nodeName":"other"}}"#,
    )
    .unwrap();
    for i in 0..WATCHES {
        srv.add_pod(&format!(
            r#"{{"metadata":{{"name":"pod-{i}","namespace":"default"}},"spec":{{"nodeName":"node-{i}"}}}}"#
        ))
        .unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    for (i, t) in tasks.into_iter().enumerate() {
        let left = deadline.saturating_duration_since(Instant::now());
        let text = rt
            .block_on(async { tokio::time::timeout(left, t).await })
            .unwrap_or_else(|_| panic!("watch of node-{i} never got pod-{i}"))
            .unwrap();
        assert_eq!(text.matches("\"name\":\"").count(), 1, "node-{i}: {text}");
        assert!(text.contains("\"type\":\"ADDED\""), "node-{i}: {text}");
    }
    // Handed out through the node index: each pod was checked against its node's watcher only (a hub
    // that offered every change to every watcher would have made a million checks).
    let s = srv.stats();
    assert!(s.watch_checks <= WATCHES as u64 + 1, "{s:?}");
    // Every watcher hung up: the server notices each close.
    let until = Instant::now() + Duration::from_secs(60);
    while srv.stats().watches_open > 0 {
        assert!(Instant::now() < until, "{:?}", srv.stats());
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(srv.stats().watches_opened, WATCHES as u64);
}
