//! The health server under a connection flood (issue 23 L5): threads open connections as fast as the
//! server takes them, holding some idle, dribbling a byte into others and resetting the rest, while a
//! kubelet-like probe (one connect, `GET /readyz`, read to the end) runs beside them. Every probe must be
//! answered; how long an answer takes is not asserted (each has a generous 10 s), the flood rate and the
//! answer ratio are printed (`--nocapture`).

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use istio_cni::install::node::server::{serve, Endpoints, State};
use nix::sys::socket::{self as s, sockopt, AddressFamily, SockFlag, SockType, SockaddrIn};

/// A connection that is reset (not left in TIME_WAIT) when dropped, so a long flood does not run the
/// loopback out of ports.
fn connect_rst(addr: SocketAddr) -> Option<TcpStream> {
    let fd = s::socket(
        AddressFamily::Inet,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .ok()?;
    let linger = nix::libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    s::setsockopt(&fd, sockopt::Linger, &linger).ok()?;
    let SocketAddr::V4(v4) = addr else {
        return None;
    };
    s::connect(fd.as_raw_fd(), &SockaddrIn::from(v4)).ok()?;
    Some(TcpStream::from(fd))
}

struct Flood {
    stop: Arc<AtomicBool>,
    connects: Arc<AtomicU64>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

/// `threads` flooders: each connects in a loop; of every three connections one is held idle, one gets a
/// single byte and is held, one is reset at once. Each keeps its last 200 connections open.
fn flood(addr: SocketAddr, threads: usize) -> Flood {
    let stop = Arc::new(AtomicBool::new(false));
    let connects = Arc::new(AtomicU64::new(0));
    let threads = (0..threads)
        .map(|_| {
            let (stop, connects) = (stop.clone(), connects.clone());
            std::thread::spawn(move || {
                let mut held = VecDeque::new();
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let Some(mut c) = connect_rst(addr) else {
                        continue;
                    };
                    connects.fetch_add(1, Ordering::Relaxed);
                    n += 1;
                    match n % 3 {
                        0 => held.push_back(c),
                        1 => {
                            let _ = c.write_all(b"G");
                            held.push_back(c);
                        }
                        _ => drop(c),
                    }
                    if held.len() > 200 {
                        held.pop_front();
                    }
                }
            })
        })
        .collect();
    Flood {
        stop,
        connects,
        threads,
    }
}

/// One kubelet-like probe: the status code, or why there was none.
fn probe(addr: SocketAddr) -> Result<u16, String> {
    let limit = Duration::from_secs(10);
    let mut c = TcpStream::connect_timeout(&addr, limit).map_err(|e| format!("connect: {e}"))?;
    c.set_read_timeout(Some(limit)).unwrap();
    write!(
        c,
        "GET /readyz HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: kube-probe/1.30\r\nAccept: */*\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| format!("write: {e}"))?;
    let mut s = String::new();
    c.read_to_string(&mut s)
        .map_err(|e| format!("read: {e} (got {s:?})"))?;
    s.get(9..12)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("no answer (got {s:?})"))
}

#[test]
fn every_probe_is_answered_during_a_connection_flood() {
    let st = State::new();
    st.set_ready(true);
    let h = serve(0, st, Endpoints::Health).unwrap();
    let addr = SocketAddr::from(([127, 0, 0, 1], h.port()));
    let f = flood(addr, 6);
    std::thread::sleep(Duration::from_millis(300));
    let (start, before) = (Instant::now(), f.connects.load(Ordering::Relaxed));
    let mut results = Vec::new();
    let mut slowest = Duration::ZERO;
    while start.elapsed() < Duration::from_secs(4) {
        let t = Instant::now();
        results.push(probe(addr));
        slowest = slowest.max(t.elapsed());
        std::thread::sleep(Duration::from_millis(10));
    }
    let rate = (f.connects.load(Ordering::Relaxed) - before) as f64 / start.elapsed().as_secs_f64();
    f.stop.store(true, Ordering::Relaxed);
    for t in f.threads {
        t.join().unwrap();
    }
    let answered = results.iter().filter(|r| **r == Ok(200)).count();
    println!(
        "MEASURE flood {rate:.0} connections/s: {answered}/{} probes answered, slowest {slowest:?}",
        results.len()
    );
    let failed: Vec<_> = results.iter().filter(|r| **r != Ok(200)).collect();
    assert!(
        failed.is_empty(),
        "{} of {} probes not answered during a flood of {rate:.0} connections/s: {:?}",
        failed.len(),
        results.len(),
        &failed[..failed.len().min(5)]
    );
}
