use super::*;
use crate::fsutil::test_dir;
use crate::podcache::client::{self, FIRST_REPLY, FIRST_REPLY_UNPROVEN};
use crate::podcache::Miss;
use crate::redirect::reduce::Reduced;
use crate::serve::socket_file::RECHECK;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Instant;

fn pod(name: &str, uid: &str) -> Reduced {
    Reduced {
        namespace: "ns".into(),
        name: name.into(),
        uid: uid.into(),
        kubelet_uid: String::new(),
        resource_version: "1".into(),
        terminal: false,
        body: Some(format!(
            r#"{{"metadata":{{"name":"{name}","namespace":"ns","uid":"{uid}"}}}}"#
        )),
    }
}

fn req(name: &str, uid: &str) -> Request {
    Request {
        namespace: "ns".into(),
        name: name.into(),
        uid: uid.into(),
    }
}

/// A served cache holding `a` (uid u1), listed and live.
fn served() -> (Cache, PathBuf) {
    let cache = Cache::new().unwrap();
    cache.update(|s| {
        s.apply(pod("a", "u1"));
        s.list_done();
        s.watch_open();
    });
    let path = test_dir("podcache").join("pod-cache.sock");
    serve(cache.clone(), path.clone()).unwrap();
    (cache, path)
}

fn uid_of(o: &crate::json::Object) -> String {
    crate::json::obj_of(o, "metadata")
        .and_then(|m| crate::json::str_of(m, "uid"))
        .unwrap_or("")
        .to_string()
}

/// The UID of the pod a lookup of `name` (with `uid`) is answered with.
fn hit(path: &Path, name: &str, uid: &str) -> String {
    uid_of(&client::lookup(path, &req(name, uid)).unwrap())
}

/// Why a lookup of `name` (with `uid`) is not answered with a pod.
fn miss(path: &Path, name: &str, uid: &str) -> Miss {
    client::lookup(path, &req(name, uid)).unwrap_err()
}

/// What the server answers to `send`; with `end`, the client then shuts its sending side.
fn raw(path: &Path, send: &[u8], end: bool) -> String {
    let mut s = UnixStream::connect(path).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    // Not unwrapped: the server may close before an oversize request is all sent.
    let _ = s.write_all(send);
    if end {
        s.shutdown(std::net::Shutdown::Write).unwrap();
    }
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

#[test]
fn hits_misses_and_a_pod_that_arrives_while_waited_for() {
    let (cache, path) = served();
    assert_eq!(mode_of(&path), 0o600);
    assert_eq!(hit(&path, "a", "u1"), "u1");
    // Unseen: waits, then says so.
    let t = Instant::now();
    assert_eq!(miss(&path, "b", "u2"), Miss::Agent(Answer::Unknown));
    assert!(t.elapsed() >= UNSEEN_WAIT, "{:?}", t.elapsed());
    // The pod's event arrives during the wait: answered then, with the pod.
    let c2 = cache.clone();
    let adder = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(30));
        c2.update(|s| s.apply(pod("c", "u3")));
    });
    assert_eq!(hit(&path, "c", "u3"), "u3");
    adder.join().unwrap();
    // Recreated under the same name: the old UID no longer matches.
    cache.update(|s| s.apply(pod("a", "u9")));
    assert_eq!(miss(&path, "a", "u1"), Miss::Agent(Answer::UidMismatch));
    assert_eq!(hit(&path, "a", "u9"), "u9");
}

/// A plugin older than this agent asks by name alone when the runtime gave no UID: the pod the cache
/// holds under that name may be the previous one, so the answer is `unknown` (which that plugin takes as
/// a miss and reads the API server), at once (no `wait`: nothing the watch delivers makes it an answer),
/// never the cached pod.
#[test]
fn a_request_without_a_uid_is_answered_unknown_at_once() {
    let (_cache, path) = served();
    for req in [
        &br#"{"v":1,"namespace":"ns","name":"a","uid":""}"#[..],
        br#"{"v":1,"namespace":"ns","name":"a"}"#,
        br#"{"v":1,"namespace":"ns","name":"b","uid":""}"#,
    ] {
        let out = raw(&path, &[req, b"\n"].concat(), false);
        assert_eq!(
            out,
            "{\"v\":1,\"result\":\"unknown\"}\n",
            "{}",
            String::from_utf8_lossy(req)
        );
    }
    assert_eq!(miss(&path, "a", ""), Miss::Agent(Answer::Unknown));
    assert_eq!(hit(&path, "a", "u1"), "u1");
}

fn mode_of(p: &Path) -> u32 {
    std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(p).unwrap().permissions()) & 0o777
}

#[test]
fn no_agent_a_dead_agent_and_a_hung_one() {
    let dir = test_dir("podcache");
    let path = dir.join("pod-cache.sock");
    assert_eq!(miss(&path, "a", "u1"), Miss::NoSocket);
    // A socket file nobody listens on (the agent was SIGKILLed).
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    assert!(path.exists());
    assert_eq!(miss(&path, "a", "u1"), Miss::Refused);
    // A listener that never answers (a stopped or hung agent): the first-reply bound, the short one once
    // its socket file shows no sign of life, the long one while it does.
    std::fs::remove_file(&path).unwrap();
    let _hung = std::os::unix::net::UnixListener::bind(&path).unwrap();
    for (stale, bound) in [(true, FIRST_REPLY_UNPROVEN), (false, FIRST_REPLY)] {
        if stale {
            set_mtime_ago(&path, Duration::from_secs(60));
        } else {
            set_mtime_ago(&path, Duration::ZERO);
        }
        let t = Instant::now();
        assert_eq!(miss(&path, "a", "u1"), Miss::Timeout);
        assert!(t.elapsed() >= bound, "{:?} < {bound:?}", t.elapsed());
    }
}

/// Waits until `done`, failing with `what` after `limit`.
fn wait_until(limit: Duration, what: &str, done: impl Fn() -> bool) {
    let t = Instant::now();
    while !done() {
        assert!(t.elapsed() < limit, "{what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Sets `path`'s times to `ago` before now.
fn set_mtime_ago(path: &Path, ago: Duration) {
    use nix::sys::stat::{utimensat, UtimensatFlags};
    use nix::sys::time::TimeSpec;
    let t = std::time::SystemTime::now() - ago;
    let since = t.duration_since(std::time::UNIX_EPOCH).unwrap();
    let ts = TimeSpec::from_duration(since);
    utimensat(None, path, &ts, &ts, UtimensatFlags::NoFollowSymlink).unwrap();
}

fn mtime_age(path: &Path) -> Duration {
    let m = std::fs::symlink_metadata(path).unwrap().modified().unwrap();
    std::time::SystemTime::now()
        .duration_since(m)
        .unwrap_or(Duration::ZERO)
}

#[test]
fn the_server_keeps_its_socket_files_heartbeat_fresh() {
    let (_cache, path) = served();
    set_mtime_ago(&path, Duration::from_secs(600));
    assert!(mtime_age(&path) >= Duration::from_secs(599));
    wait_until(HEARTBEAT * 10, "the heartbeat stopped", || {
        mtime_age(&path) <= client::HEARTBEAT_FRESH
    });
    assert_eq!(hit(&path, "a", "u1"), "u1");
}

#[test]
fn hostile_clients_get_bad_request_or_are_dropped_and_others_are_served() {
    let (_cache, path) = served();
    let out = raw(&path, b"garbage\n", false);
    assert!(out.contains(r#""result":"bad_request""#), "{out}");
    let out = raw(
        &path,
        b"{\"v\":7,\"namespace\":\"ns\",\"name\":\"a\"}\n",
        false,
    );
    assert!(
        out.contains("bad_request") && out.contains("version"),
        "{out}"
    );
    // A request the client ends without a newline.
    let out = raw(&path, b"{\"v\":1", true);
    assert!(out.contains("newline"), "{out}");
    // Oversize: refused after MAX_REQUEST bytes, not buffered.
    let out = raw(&path, &[b'x'; 64 * 1024], false);
    assert!(out.contains("too long"), "{out}");
    // Many connections, some sending a byte at a time, some silent, some never reading: a real lookup
    // still gets its answer.
    let mut idle = Vec::new();
    for i in 0..(LIMITS.max_conns + 100) {
        let mut c = UnixStream::connect(&path).unwrap();
        if i % 3 == 0 {
            let _ = c.write_all(b"{");
        }
        idle.push(c);
    }
    assert_eq!(hit(&path, "a", "u1"), "u1");
    // A slow client is dropped at its deadline.
    let mut slow = UnixStream::connect(&path).unwrap();
    slow.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let t = Instant::now();
    let mut n = 0;
    while t.elapsed() < LIMITS.read + Duration::from_millis(500) {
        if slow.write_all(b" ").is_err() {
            break;
        }
        n += 1;
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut out = Vec::new();
    match slow.read_to_end(&mut out) {
        Ok(_) => assert!(out.is_empty(), "{out:?}"),
        Err(e) => assert!(
            !matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ),
            "still open after {n} bytes: {e}"
        ),
    }
    drop(idle);
    assert_eq!(hit(&path, "a", "u1"), "u1");
}

#[test]
fn a_removed_socket_is_bound_again() {
    let (_cache, path) = served();
    std::fs::remove_file(&path).unwrap();
    wait_until(RECHECK * 4, "socket not bound again", || path.exists());
    assert_eq!(hit(&path, "a", "u1"), "u1");
}

/// A newer agent bound the socket over ours and was killed: its file is left, nobody listens on it; this
/// server binds it again.
#[test]
fn a_socket_left_by_a_dead_agent_is_bound_again() {
    let (_cache, path) = served();
    let other = path.with_file_name("newer.sock");
    drop(std::os::unix::net::UnixListener::bind(&other).unwrap());
    std::fs::rename(&other, &path).unwrap();
    let theirs = crate::rundir::identity(&path);
    wait_until(
        RECHECK * 10,
        "the dead agent's socket not bound again",
        || crate::rundir::identity(&path) != theirs,
    );
    assert_eq!(hit(&path, "a", "u1"), "u1");
}

#[test]
fn before_the_first_list_nothing_is_served() {
    let cache = Cache::new().unwrap();
    let path = test_dir("podcache").join("pod-cache.sock");
    serve(cache.clone(), path.clone()).unwrap();
    cache.update(|s| s.watch_open());
    assert_eq!(miss(&path, "a", "u1"), Miss::Agent(Answer::NotSynced));
}
