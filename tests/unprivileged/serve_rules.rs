//! The connection server's rules ([`istio_cni::serve`]) through a small line protocol: turn by turn where
//! the order matters (eviction, the accept batch), on a thread of its own for the deadlines and deferred
//! answers. Both real servers (the health listener, the pod cache) run on it; their own tests cover their
//! protocols.
use istio_cni::serve::socket_file::{self, SocketFile};
use istio_cni::serve::{Limits, Protocol, Server, Step};
use nix::sys::socket::SockType;
use std::io::{ErrorKind, Read, Write};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One line in, the same line back; `later` is deferred (the first bytes `wait`) for `wait`, `soon` for a
/// minute: answered `woken` once the test said so and woke the server, or `late` at its time.
struct Lines {
    wait: Duration,
    ready: Arc<AtomicBool>,
    wake: UnixStream,
}

fn line(s: &str) -> Arc<[u8]> {
    Arc::from(s.as_bytes())
}

impl Protocol for Lines {
    fn request(&self, bytes: &[u8], eof: bool) -> Step {
        match bytes.iter().position(|b| *b == b'\n') {
            Some(5) if bytes.starts_with(b"later") => Step::Defer(line("wait\n"), self.wait),
            Some(4) if bytes.starts_with(b"soon") => {
                Step::Defer(line("wait\n"), Duration::from_secs(60))
            }
            Some(end) => Step::Reply(Arc::from(&bytes[..=end])),
            None if eof => Step::Reply(line("eof\n")),
            None => Step::More,
        }
    }
    fn resume(&self, _: &[u8], last: bool) -> Option<Arc<[u8]>> {
        match (last, self.ready.load(Ordering::SeqCst)) {
            (true, _) => Some(line("late\n")),
            (false, true) => Some(line("woken\n")),
            (false, false) => None,
        }
    }
    fn wake(&self) -> Option<BorrowedFd<'_>> {
        Some(self.wake.as_fd())
    }
}

struct Setup {
    server: Server,
    path: PathBuf,
    ready: Arc<AtomicBool>,
    wake: UnixStream,
}

fn temp_dir() -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "serve-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn setup(limits: Limits, wait: Duration) -> Setup {
    let path = temp_dir().join("s.sock");
    let (listener, _) = socket_file::bind(&path, SockType::Stream).unwrap();
    let (wake, rx) = UnixStream::pair().unwrap();
    rx.set_nonblocking(true).unwrap();
    let ready = Arc::new(AtomicBool::new(false));
    let proto = Lines {
        wait,
        ready: ready.clone(),
        wake: rx,
    };
    Setup {
        server: Server::new(listener, None, limits, Box::new(proto)),
        path,
        ready,
        wake,
    }
}

fn limits(max_conns: usize, accept_batch: usize, read: Duration) -> Limits {
    Limits {
        name: "test",
        max_conns,
        accept_batch,
        read,
        write: Duration::from_secs(60),
    }
}

fn connect(s: &Setup, send: &[u8]) -> UnixStream {
    let mut c = UnixStream::connect(&s.path).unwrap();
    c.write_all(send).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c
}

/// Everything the server sent, up to its close.
fn answer(c: &mut UnixStream) -> String {
    let mut out = String::new();
    c.read_to_string(&mut out).unwrap();
    out
}

/// What is there to read now, the connection still open.
fn pending(c: &mut UnixStream) -> String {
    c.set_nonblocking(true).unwrap();
    let mut out = [0u8; 64];
    let n = match c.read(&mut out) {
        Ok(0) => panic!("closed"),
        Ok(n) => n,
        Err(e) if e.kind() == ErrorKind::WouldBlock => 0,
        Err(e) => panic!("{e}"),
    };
    String::from_utf8_lossy(&out[..n]).into_owned()
}

#[test]
fn beyond_the_limit_the_oldest_idle_connection_goes_never_one_being_answered_while_one_is_idle() {
    let mut s = setup(
        limits(2, 16, Duration::from_secs(60)),
        Duration::from_secs(60),
    );
    let mut deferred = connect(&s, b"later\n");
    let mut idle = connect(&s, b"");
    let mut newer = connect(&s, b"");
    // A request that came with its connection is answered at once, whatever the table holds.
    let mut asked = connect(&s, b"hello\n");
    s.server.turn();
    assert_eq!(answer(&mut asked), "hello\n");
    assert_eq!(answer(&mut idle), "", "the oldest idle one made room");
    assert_eq!(pending(&mut deferred), "wait\n");
    assert_eq!(pending(&mut newer), "");
    // Two more deferred ones: the idle one goes first, then (every one being answered) the oldest.
    let mut second = connect(&s, b"later\n");
    let mut third = connect(&s, b"later\n");
    s.server.turn();
    assert_eq!(answer(&mut newer), "");
    assert_eq!(answer(&mut deferred), "");
    assert_eq!(pending(&mut second), "wait\n");
    assert_eq!(pending(&mut third), "wait\n");
}

#[test]
fn connections_accepted_in_one_turn_are_read_before_the_next_batch_can_push_them_out() {
    let mut s = setup(
        limits(2, 2, Duration::from_secs(60)),
        Duration::from_secs(60),
    );
    let mut first = [connect(&s, b""), connect(&s, b"")];
    let _flood: Vec<_> = (0..6).map(|_| connect(&s, b"")).collect();
    s.server.turn();
    // Their requests arrive after the accept: read in the next turn, before it accepts more.
    for c in &mut first {
        c.write_all(b"hello\n").unwrap();
    }
    s.server.turn();
    for c in &mut first {
        assert_eq!(answer(c), "hello\n");
    }
}

#[test]
fn deadlines_close_the_silent_and_the_dribbling_and_give_deferred_answers() {
    let s = setup(
        limits(8, 8, Duration::from_millis(100)),
        Duration::from_millis(100),
    );
    let (ready, mut wake, path) = (s.ready.clone(), s.wake.try_clone().unwrap(), s.path.clone());
    s.server.spawn("serve-test".into()).unwrap();
    let connect = |send: &[u8]| {
        let mut c = UnixStream::connect(&path).unwrap();
        c.write_all(send).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        c
    };
    // Silent: closed at the request deadline.
    assert_eq!(answer(&mut connect(b"")), "");
    // A byte at a time: the deadline counts from accept, not from the last byte.
    let mut dribbling = connect(b"");
    let t = Instant::now();
    dribbling.set_nonblocking(true).unwrap();
    loop {
        assert!(t.elapsed() < Duration::from_secs(10), "still open");
        match dribbling.read(&mut [0u8; 8]) {
            Ok(0) => break,
            Ok(_) => panic!("answered"),
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            Err(_) => break,
        }
        let _ = dribbling.write(b"x");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Deferred: answered at its time, or when woken and the answer is there.
    assert_eq!(answer(&mut connect(b"later\n")), "wait\nlate\n");
    let mut woken = connect(b"soon\n");
    let mut first = [0u8; 5];
    woken.read_exact(&mut first).unwrap();
    assert_eq!(&first, b"wait\n");
    wake.write_all(b"!").unwrap();
    // Woken without its answer there: it waits on.
    std::thread::sleep(Duration::from_millis(50));
    ready.store(true, Ordering::SeqCst);
    wake.write_all(b"!").unwrap();
    assert_eq!(answer(&mut woken), "woken\n");
}

/// The socket file kept up: another live process's file is left to it, even while its backlog is full
/// (the look never blocks); once nobody listens on it (that process was killed), it is bound again.
#[test]
fn a_socket_file_left_by_a_dead_process_is_bound_again_a_live_ones_never() {
    use istio_cni::rundir::identity;
    use nix::sys::socket::{self as s, AddressFamily, SockFlag, UnixAddr};
    let dir = temp_dir();
    let path = dir.join("s.sock");
    let (_ours, id) = socket_file::bind(&path, SockType::Stream).unwrap();
    let mut file = SocketFile::new(path.clone(), "test", SockType::Stream, id);
    assert!(file.tend(false).is_none());
    // A newer process binds it over ours; it never accepts, so its backlog fills up.
    let newer = std::os::unix::net::UnixListener::bind(dir.join("newer.sock")).unwrap();
    std::fs::rename(dir.join("newer.sock"), &path).unwrap();
    let theirs = identity(&path);
    let addr = UnixAddr::new(&path).unwrap();
    let flags = SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC;
    loop {
        let c = s::socket(AddressFamily::Unix, SockType::Stream, flags, None).unwrap();
        match s::connect(std::os::fd::AsRawFd::as_raw_fd(&c), &addr) {
            Ok(()) => {}
            Err(nix::errno::Errno::EAGAIN) => break,
            Err(e) => panic!("{e}"),
        }
    }
    for _ in 0..3 {
        assert!(file.tend(false).is_none());
    }
    assert_eq!(identity(&path), theirs, "taken from a live process");
    drop(newer);
    let bound = file
        .tend(false)
        .expect("a dead process's socket file bound again");
    assert_ne!(identity(&path), theirs);
    drop(bound);
    std::fs::remove_dir_all(&dir).unwrap();
}
