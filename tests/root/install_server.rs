//! The installer's health and metrics servers under hostile clients (loopback, and a network namespace the
//! test creates): idle and trickling connections must not delay `/readyz` or `/metrics` for anyone else,
//! a request head has a deadline counted from accept, and both listen dual-stack, still serving IPv4 in
//! a namespace whose IPv6 is disabled.
//!
//! The latency under 100 idle + 10 trickling connections is measured (not asserted) by
//!   cargo test --test install_server -- --ignored --nocapture measure

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use istio_cni::install::node::server::{serve, Endpoints, State};

/// GET `path` on `addr`; the status code, or the error. Bounded by `limit` (a generous "not hung").
fn get(addr: SocketAddr, path: &str, limit: Duration) -> Result<u16, String> {
    let mut c = TcpStream::connect_timeout(&addr, limit).map_err(|e| format!("connect: {e}"))?;
    c.set_read_timeout(Some(limit)).unwrap();
    c.set_write_timeout(Some(limit)).unwrap();
    write!(c, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").map_err(|e| format!("write: {e}"))?;
    let mut s = String::new();
    c.read_to_string(&mut s)
        .map_err(|e| format!("read: {e} (got {s:?})"))?;
    s.get(9..12)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("bad response {s:?}"))
}

fn local(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// Hostile clients on `addr`: `idle` connections that never send, `trickling` ones that send one byte of
/// a never-ending head every `every`. They stop (and close) when the returned flag is set.
fn attack(addr: SocketAddr, idle: usize, trickling: usize, every: Duration) -> Arc<AtomicBool> {
    let stop = Arc::new(AtomicBool::new(false));
    let mut held = Vec::new();
    for _ in 0..idle {
        if let Ok(c) = TcpStream::connect(addr) {
            held.push(c);
        }
    }
    let s = stop.clone();
    std::thread::spawn(move || {
        while !s.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(50));
        }
        drop(held);
    });
    for _ in 0..trickling {
        let s = stop.clone();
        std::thread::spawn(move || {
            // Reconnect when the server closes us, as an attacker would.
            while !s.load(Ordering::SeqCst) {
                let Ok(mut c) = TcpStream::connect(addr) else {
                    std::thread::sleep(every);
                    continue;
                };
                let mut head = b"GET /readyz HTTP/1.1\r\nX-Slow: ".iter().cycle();
                while !s.load(Ordering::SeqCst) {
                    if c.write_all(&[*head.next().unwrap_or(&b'a')]).is_err() {
                        break;
                    }
                    std::thread::sleep(every);
                }
            }
        });
    }
    // Let the attack settle in (connections accepted, first bytes sent).
    std::thread::sleep(Duration::from_millis(300));
    stop
}

#[test]
fn idle_and_trickling_clients_do_not_delay_readiness_or_metrics() {
    let st = State::new();
    st.set_ready(true);
    let h = serve(0, st.clone(), Endpoints::Health).unwrap();
    let m = serve(0, st.clone(), Endpoints::Metrics).unwrap();
    let stop_h = attack(local(h.port()), 100, 10, Duration::from_millis(300));
    let stop_m = attack(local(m.port()), 100, 10, Duration::from_millis(300));
    // Probes over 3 s: each answered, none waiting for the attackers (the old server took 2 s per idle
    // connection, one at a time).
    let limit = Duration::from_secs(3);
    let end = Instant::now() + Duration::from_secs(3);
    let mut n = 0;
    while Instant::now() < end {
        assert_eq!(get(local(h.port()), "/readyz", limit), Ok(200));
        assert_eq!(get(local(m.port()), "/metrics", limit), Ok(200));
        n += 1;
        std::thread::sleep(Duration::from_millis(200));
    }
    stop_h.store(true, Ordering::SeqCst);
    stop_m.store(true, Ordering::SeqCst);
    assert!(n >= 3, "{n} probes");
}

#[test]
fn a_request_head_has_a_deadline_from_accept_not_per_byte() {
    let st = State::new();
    let h = serve(0, st, Endpoints::Health).unwrap();
    let mut c = TcpStream::connect(local(h.port())).unwrap();
    c.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let t = Instant::now();
    let mut closed = false;
    // One byte every 300 ms, for up to 15 s: a per-byte timeout never fires.
    while t.elapsed() < Duration::from_secs(15) {
        if c.write_all(b"G").is_err() {
            closed = true;
            break;
        }
        let mut buf = [0u8; 256];
        match c.read(&mut buf) {
            Ok(_) => {
                closed = true;
                break;
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(_) => {
                closed = true;
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        closed,
        "a trickling head kept its connection for {:?}",
        t.elapsed()
    );
    assert!(
        t.elapsed() < Duration::from_secs(8),
        "closed only after {:?}",
        t.elapsed()
    );
}

#[test]
fn both_servers_answer_over_ipv4_and_ipv6() {
    let st = State::new();
    let h = serve(0, st.clone(), Endpoints::Health).unwrap();
    let m = serve(0, st, Endpoints::Metrics).unwrap();
    let limit = Duration::from_secs(5);
    assert_eq!(get(local(h.port()), "/healthz", limit), Ok(200));
    assert_eq!(get(local(m.port()), "/metrics", limit), Ok(200));
    if std::net::TcpListener::bind("[::1]:0").is_err() {
        eprintln!("NOTE: no IPv6 loopback here; the IPv6 half is not run");
        return;
    }
    let v6 = |p: u16| SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, p));
    assert_eq!(get(v6(h.port()), "/healthz", limit), Ok(200));
    assert_eq!(get(v6(m.port()), "/metrics", limit), Ok(200));
}

#[test]
fn ipv4_still_served_in_a_namespace_with_ipv6_disabled() {
    if !crate::support::require_root() {
        return;
    }
    let ns = crate::support::Netns::new("srv6off");
    // The namespace's own sysctls (`ip netns exec` remounts /proc/sys/net for it); not the host's.
    for k in ["all", "default", "lo"] {
        let f = format!("/proc/sys/net/ipv6/conf/{k}/disable_ipv6");
        ns.exec_ok(&["sh", "-c", &format!("echo 1 > {f} && test $(cat {f}) = 1")]);
    }
    assert!(
        !ns.exec_ok(&["ip", "-6", "addr", "show", "dev", "lo"])
            .contains("::1"),
        "IPv6 still on in the namespace"
    );
    let path = ns.path();
    let res = std::thread::spawn(move || -> Result<u16, String> {
        let f = std::fs::File::open(&path).map_err(|e| format!("{path}: {e}"))?;
        nix::sched::setns(f, nix::sched::CloneFlags::CLONE_NEWNET)
            .map_err(|e| format!("setns {path}: {e}"))?;
        let st = State::new();
        let h = serve(0, st, Endpoints::Health).map_err(|e| e.to_string())?;
        get(local(h.port()), "/healthz", Duration::from_secs(5))
    })
    .join()
    .unwrap();
    assert_eq!(res, Ok(200));
}

// ---------------------------------------------------------------------------------------------------

#[test]
fn the_standalone_repair_agents_metrics_server_is_as_robust() {
    let addr = istio_cni::agents::standalone::serve(0).unwrap();
    let stop = attack(local(addr.port()), 100, 10, Duration::from_millis(300));
    let limit = Duration::from_secs(3);
    for _ in 0..3 {
        assert_eq!(get(local(addr.port()), "/metrics", limit), Ok(200));
        std::thread::sleep(Duration::from_millis(200));
    }
    stop.store(true, Ordering::SeqCst);
    if std::net::TcpListener::bind("[::1]:0").is_ok() {
        let v6 = SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, addr.port()));
        assert_eq!(get(v6, "/metrics", limit), Ok(200));
    }
}
