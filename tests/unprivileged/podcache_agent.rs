//! `install-cni` as the node's pod cache, against the API double, without root: what 1,000 cached pods
//! cost, and hostile clients on its socket (garbage, 64 KiB lines, a byte per second, 1,000 connections at
//! once) while `/readyz` and real lookups go on.

use crate::repair_rss::{pod, status_kb};
use crate::support::podcache::Agent;
use crate::support::repair::NODE;
use crate::support::TempDir;
use istio_cni::podcache::{client, proto::Request};
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Adds pod `i` to the double; the lookup of it, by the UID the double gave it.
fn add(srv: &kube_double::Server, i: usize) -> Request {
    let stored = srv.add_pod(&pod(i, false)).unwrap();
    Request {
        namespace: format!("ns-{}", i % 17),
        name: format!("app-{i}"),
        uid: crate::support::kube::uid_of(&stored),
    }
}

#[test]
fn a_thousand_cached_pods_cost_under_4_mb() {
    let srv = crate::support::kube::start();
    let dir = TempDir::new("cache-rss");
    let agent = Agent::start(&srv, &dir.join("run"), NODE, &[]);
    agent.wait_synced();
    std::thread::sleep(Duration::from_millis(500));
    let pid = agent.proc.child.id();
    let empty = status_kb(pid, "VmRSS:");
    let added: Vec<Request> = (0..1000).map(|i| add(&srv, i)).collect();
    agent.wait_pods(1000);
    std::thread::sleep(Duration::from_millis(500));
    let full = status_kb(pid, "VmRSS:");
    eprintln!(
        "pod cache memory: VmRSS {empty} kB with 0 pods, {full} kB with 1,000 (+{} kB); VmHWM {} kB",
        full.saturating_sub(empty),
        status_kb(pid, "VmHWM:")
    );
    // Each is served.
    let p = client::lookup(&agent.socket(), &added[999]).unwrap();
    assert!(istio_cni::json::to_compact(&istio_cni::json::Value::Object(p)).contains("app-999"));
    assert!(
        full <= empty + 4096,
        "1,000 cached pods cost {} kB",
        full - empty
    );
}

#[test]
fn hostile_socket_clients_stall_neither_readyz_nor_lookups() {
    // One connection per fd: allow well over 1,000 of them in this process.
    let (_, hard) =
        nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).unwrap();
    let _ = nix::sys::resource::setrlimit(
        nix::sys::resource::Resource::RLIMIT_NOFILE,
        hard.min(8192),
        hard,
    );
    let srv = crate::support::kube::start();
    let requests: Vec<Request> = (0..20).map(|i| add(&srv, i)).collect();
    let dir = TempDir::new("cache-hostile");
    let agent = Agent::start(&srv, &dir.join("run"), NODE, &[]);
    agent.wait_synced();
    agent.wait_pods(20);
    crate::support::poll_until("ready", Duration::from_secs(10), || agent.ready());
    let pid = agent.proc.child.id();
    let hwm_before = status_kb(pid, "VmHWM:");
    let path = agent.socket();
    let stop = AtomicBool::new(false);
    let (mut probes, mut worst, mut hits, mut misses) = (0, Duration::ZERO, 0, Vec::new());
    std::thread::scope(|s| {
        // 1,000 connections held open at once, a third of them sending a byte a second.
        s.spawn(|| {
            let mut held: Vec<UnixStream> = (0..1000)
                .filter_map(|_| UnixStream::connect(&path).ok())
                .collect();
            while !stop.load(Ordering::Relaxed) {
                for (i, c) in held.iter_mut().enumerate() {
                    if i % 3 == 0 {
                        let _ = c.write(b" ");
                    }
                }
                std::thread::sleep(Duration::from_secs(1));
            }
        });
        // Garbage and 64 KiB lines, a thousand connections a second.
        s.spawn(|| {
            let big = vec![b'x'; 64 * 1024];
            let mut n = 0usize;
            while !stop.load(Ordering::Relaxed) {
                if let Ok(mut c) = UnixStream::connect(&path) {
                    let _ = c.set_nonblocking(true);
                    let _ = c.write(if n % 2 == 0 {
                        &big[..]
                    } else {
                        b"\xff{]garbage\n"
                    });
                }
                n += 1;
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        let until = Instant::now() + Duration::from_secs(4);
        let mut i = 0;
        while Instant::now() < until {
            let t = Instant::now();
            let r = crate::support::install::node::get(agent.health, "/readyz");
            let took = t.elapsed();
            assert_eq!(r.map(|(c, _)| c), Some(200), "/readyz after {took:?}");
            probes += 1;
            worst = worst.max(took);
            match client::lookup(&path, &requests[i % 20]) {
                Ok(_) => hits += 1,
                Err(m) => misses.push(m.name()),
            }
            i += 1;
            std::thread::sleep(Duration::from_millis(20));
        }
        stop.store(true, Ordering::Relaxed);
    });
    let hwm_after = status_kb(pid, "VmHWM:");
    eprintln!(
        "hostile clients: {probes} /readyz probes, slowest {worst:?}; lookups {hits} served, misses {misses:?}; VmHWM {hwm_before} → {hwm_after} kB"
    );
    // A lookup may miss its bound on a starved machine and fall back to the API server; most are served.
    assert!(
        hits * 2 > probes,
        "{hits} of {probes} lookups served under load: {misses:?}"
    );
    // Bounded: connections are capped and hit replies are shared, so the peak barely moves.
    assert!(
        hwm_after <= hwm_before + 16 * 1024,
        "VmHWM {hwm_before} → {hwm_after} kB"
    );
    // Once the flood drains, every lookup is served again.
    crate::support::poll_until(
        "20 lookups in a row served after the load",
        Duration::from_secs(10),
        || (0..20).all(|i| client::lookup(&path, &requests[i]).is_ok()),
    );
    assert!(
        agent
            .metric("istio_cni_pod_cache_lookups_total{result=\"bad_request\"}")
            .unwrap_or(0)
            > 0
    );
}

/// Without a node name (NODE_NAME unset: a DaemonSet without the downward API field) the agent can watch
/// no node's pods: neither the pod cache nor the audit runs, and each says so instead of staying silent
/// while its metrics read as "nothing unredirected".
#[test]
fn without_a_node_name_the_cache_and_the_audit_say_they_did_not_start() {
    let srv = crate::support::kube::start();
    let dir = TempDir::new("no-node");
    let agent = Agent::start(&srv, &dir.join("run"), "", &[("AUDIT_INTERVAL", "60s")]);
    let t = Instant::now();
    let said = |l: &str| {
        l.contains("pod cache not started: no node name")
            && l.contains("audit not started: no node name")
    };
    while !said(&agent.log()) {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "no line about the cache and the audit without a node name:\n{}",
            agent.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
