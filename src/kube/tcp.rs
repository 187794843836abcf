//! The API connections' TCP: what ureq's own TCP connector and transport do, plus TCP keepalive on the
//! node agents' connections (ureq 3 has no socket options and keeps its TCP transport private); the
//! plugin's one request per ADD has a deadline of its own and goes without.
//!
//! Why keepalive: a watch only reads. When its server goes away and the FIN or reset never reaches us (a
//! firewall's or NAT's state lost, a node or load balancer gone under a partition), nothing on our side ever
//! sends, so nothing fails: the read waits for the watch's own timeout (5-10 min) while the node believes
//! it is watching (the pod cache misses the pods started meanwhile, the repair agent sees none). kube-apiserver's
//! BOOKMARKs cannot serve as a heartbeat: one reaches a watch only once the pods' resourceVersion has moved
//! past the watch's (measured on 1.34: the first one 2 min after a watch started on a quiet cluster).
//! client-go dials with keepalive for this (30 s); [`KEEPALIVE`] ends such a connection within about a
//! minute: the probes get no answer, the read fails with `ETIMEDOUT`, and the watch restarts.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::sync::{Arc, Weak};
use std::time::Duration;

use nix::sys::socket::{setsockopt, sockopt};
use ureq::unversioned::transport::{
    Buffers, ConnectionDetails, Connector, Either, LazyBuffers, NextTimeout, ShutdownHandle,
    Transport,
};
use ureq::Timeout;

/// When a connection with nothing to send starts probing its peer, how often, and after how many
/// unanswered probes it is dead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Keepalive {
    pub idle: Duration,
    pub interval: Duration,
    pub count: u32,
}

/// Idle 30 s (client-go's), then a probe every 10 s, dead after 3 unanswered: a silent dead connection
/// ends 60 s after it last carried anything; a live one costs a probe per 30 s of silence.
pub const KEEPALIVE: Keepalive = Keepalive {
    idle: Duration::from_secs(30),
    interval: Duration::from_secs(10),
    count: 3,
};

/// Opens the TCP connection (to the server, or to the proxy ureq's CONNECT connector asks for), with
/// keepalive when given one; a connection already made by an earlier connector in the chain passes through.
#[derive(Debug)]
pub struct TcpConnector(pub Option<Keepalive>);

impl<In: Transport> Connector<In> for TcpConnector {
    type Out = Either<In, Tcp>;

    fn connect(
        &self,
        details: &ConnectionDetails,
        chained: Option<In>,
    ) -> Result<Option<Self::Out>, ureq::Error> {
        if let Some(t) = chained {
            return Ok(Some(Either::A(t)));
        }
        let stream = connect_any(details)?;
        if let Some(k) = self.0 {
            keepalive(&stream, k)?;
        }
        if details.config.no_delay() {
            stream.set_nodelay(true)?;
        }
        let buffers = LazyBuffers::new(
            details.config.input_buffer_size(),
            details.config.output_buffer_size(),
        );
        let tcp = Tcp {
            stream: Arc::new(stream),
            buffers,
            read_limit: None,
            write_limit: None,
        };
        (details.register_shutdown)(Arc::downgrade(&tcp.stream) as Weak<dyn ShutdownHandle>)?;
        Ok(Some(Either::B(tcp)))
    }
}

/// The first of the resolved addresses that accepts within what is left of the connect limit. An
/// address that fails gives way to the next; the last failure is reported. Every address but the last may
/// spend half of what is left (as ureq's own connector shares it out), so one that swallows its SYNs
/// cannot take the whole limit from the others.
fn connect_any(details: &ConnectionDetails) -> Result<TcpStream, ureq::Error> {
    use ureq::unversioned::transport::time::Instant;
    let mut last = None;
    let n = details.addrs.len();
    for (i, addr) in details.addrs.iter().enumerate() {
        let elapsed = match ((details.current_time)(), details.now) {
            (Instant::Exact(now), Instant::Exact(then)) => now.saturating_duration_since(then),
            _ => Duration::ZERO,
        };
        let limit = details
            .timeout
            .not_zero()
            .map(|t| attempt_limit(t.saturating_sub(elapsed), i, n));
        let tried = match limit {
            Some(l) if l.is_zero() => return Err(ureq::Error::Timeout(Timeout::Connect)),
            Some(l) => TcpStream::connect_timeout(addr, l),
            None => TcpStream::connect(addr),
        };
        match tried {
            Ok(s) => return Ok(s),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
                ) =>
            {
                last = Some(ureq::Error::Timeout(Timeout::Connect))
            }
            Err(e) => last = Some(ureq::Error::Io(e)),
        }
    }
    Err(last.unwrap_or_else(|| {
        ureq::Error::Io(io::Error::new(
            io::ErrorKind::ConnectionRefused,
            "no address to connect to",
        ))
    }))
}

/// What attempt `i` of `n` may spend of the `left` connect time: half of it, all of it for the last.
fn attempt_limit(left: Duration, i: usize, n: usize) -> Duration {
    if i + 1 < n {
        left / 2
    } else {
        left
    }
}

/// Turns keepalive on with `k`'s timing (whole seconds, at least 1).
pub fn keepalive(stream: &TcpStream, k: Keepalive) -> io::Result<()> {
    let secs = |d: Duration| u32::try_from(d.as_secs().max(1)).unwrap_or(u32::MAX);
    setsockopt(stream, sockopt::KeepAlive, &true)?;
    setsockopt(stream, sockopt::TcpKeepIdle, &secs(k.idle))?;
    setsockopt(stream, sockopt::TcpKeepInterval, &secs(k.interval))?;
    setsockopt(stream, sockopt::TcpKeepCount, &k.count.max(1))?;
    Ok(())
}

/// A plain TCP connection as ureq's own transport drives one: blocking reads and writes bounded by the
/// request's time limits (set on the socket only when they change).
pub struct Tcp {
    /// Shared (weakly) with the agent's shutdown handle.
    stream: Arc<TcpStream>,
    buffers: LazyBuffers,
    read_limit: Option<Duration>,
    write_limit: Option<Duration>,
}

impl std::fmt::Debug for Tcp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tcp({:?})", self.stream.peer_addr().ok())
    }
}

/// The socket limit for the next read or write: `None` without one; a spent budget is the timeout itself.
fn limit_of(t: NextTimeout) -> Result<Option<Duration>, ureq::Error> {
    if t.after.is_zero() {
        return Err(ureq::Error::Timeout(t.reason));
    }
    Ok(t.not_zero().map(|d| *d))
}

/// A socket limit that ran out (`EAGAIN` on Linux) is ureq's timeout; anything else (`ETIMEDOUT` from
/// keepalive included) is the connection's own failure.
fn failed(e: io::Error, reason: Timeout) -> ureq::Error {
    match e.kind() {
        io::ErrorKind::WouldBlock => ureq::Error::Timeout(reason),
        _ => ureq::Error::Io(e),
    }
}

impl Transport for Tcp {
    fn buffers(&mut self) -> &mut dyn Buffers {
        &mut self.buffers
    }

    fn transmit_output(&mut self, amount: usize, timeout: NextTimeout) -> Result<(), ureq::Error> {
        let t = timeout.for_write();
        let limit = limit_of(t)?;
        if limit != self.write_limit {
            self.stream.set_write_timeout(limit)?;
            self.write_limit = limit;
        }
        let out = &self.buffers.output()[..amount];
        (&*self.stream)
            .write_all(out)
            .map_err(|e| failed(e, t.reason))
    }

    fn await_input(&mut self, timeout: NextTimeout) -> Result<bool, ureq::Error> {
        let t = timeout.for_read();
        let limit = limit_of(t)?;
        if limit != self.read_limit {
            self.stream.set_read_timeout(limit)?;
            self.read_limit = limit;
        }
        let input = self.buffers.input_append_buf();
        let n = loop {
            match (&*self.stream).read(input) {
                // A signal: read on (ureq bounds the whole request again at its next call).
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                r => break r.map_err(|e| failed(e, t.reason))?,
            }
        };
        self.buffers.input_appended(n);
        Ok(n > 0)
    }

    /// Whether a pooled connection can carry the next request: nothing unread and not closed.
    fn is_open(&mut self) -> bool {
        let s = &*self.stream;
        if s.set_nonblocking(true).is_err() {
            return false;
        }
        let mut b = [0u8; 1];
        let open = matches!((&*s).read(&mut b), Err(e) if e.kind() == io::ErrorKind::WouldBlock);
        open && s.set_nonblocking(false).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::sys::socket::getsockopt;

    #[test]
    fn keepalive_sets_the_probe_timing_on_the_socket() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let s = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        keepalive(&s, KEEPALIVE).unwrap();
        assert!(getsockopt(&s, sockopt::KeepAlive).unwrap());
        assert_eq!(getsockopt(&s, sockopt::TcpKeepIdle).unwrap(), 30);
        assert_eq!(getsockopt(&s, sockopt::TcpKeepInterval).unwrap(), 10);
        assert_eq!(getsockopt(&s, sockopt::TcpKeepCount).unwrap(), 3);
    }

    #[test]
    fn every_address_but_the_last_leaves_half_of_the_connect_time_to_the_others() {
        let left = Duration::from_secs(4);
        assert_eq!(attempt_limit(left, 0, 1), left);
        assert_eq!(attempt_limit(left, 0, 3), Duration::from_secs(2));
        assert_eq!(
            attempt_limit(Duration::from_secs(2), 1, 3),
            Duration::from_secs(1)
        );
        assert_eq!(
            attempt_limit(Duration::from_secs(1), 2, 3),
            Duration::from_secs(1)
        );
    }

    #[test]
    fn a_spent_budget_is_the_timeout_and_an_endless_one_no_limit() {
        let spent = NextTimeout {
            after: ureq::unversioned::transport::time::Duration::from_secs(0),
            reason: Timeout::Global,
            ..NextTimeout::default()
        };
        assert!(matches!(
            limit_of(spent),
            Err(ureq::Error::Timeout(Timeout::Global))
        ));
        assert_eq!(limit_of(NextTimeout::default()).unwrap(), None);
    }

    #[test]
    fn only_a_socket_limit_running_out_is_a_timeout() {
        let e = |k| io::Error::from(k);
        assert!(matches!(
            failed(e(io::ErrorKind::WouldBlock), Timeout::RecvBody),
            ureq::Error::Timeout(Timeout::RecvBody)
        ));
        // Keepalive's verdict on a dead peer: the connection failed, not a limit of ours.
        assert!(matches!(
            failed(io::Error::from_raw_os_error(libc_etimedout()), Timeout::RecvBody),
            ureq::Error::Io(ref i) if i.kind() == io::ErrorKind::TimedOut
        ));
    }

    fn libc_etimedout() -> i32 {
        nix::errno::Errno::ETIMEDOUT as i32
    }
}
