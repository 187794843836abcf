//! Two agents on one node at once (a `maxSurge` roll, an uninstall overlapping a reinstall): the newer one
//! binds its sockets and writes its records into the shared run dir while the older one still runs. With
//! the run dir's lease the older agent keeps everything at SIGTERM (`install_supersede`); without one (an
//! agent of a version before it, a file system without open file description locks: here a directory in
//! the lease's place) its rule may say clean up, and it must take away only what is still its own: the
//! newer agent's log and pod-cache sockets, kubeconfig and backend record stay (never deleted, watched with
//! inotify), and its log relay keeps relaying plugin lines. A socket removed anyway is bound again.

use crate::support::install::cluster::*;
use crate::support::*;
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
use std::fs;
use std::os::unix::net::{UnixDatagram, UnixStream};
use std::path::Path;

const FILES: [&str; 4] = [
    "log.sock",
    "pod-cache.sock",
    "istio-cni-kubeconfig",
    "iptables-backend",
];

fn ids(run: &Path) -> Vec<Option<(u64, u64)>> {
    FILES
        .iter()
        .map(|f| {
            use std::os::unix::fs::MetadataExt;
            let m = std::fs::symlink_metadata(run.join(f)).ok()?;
            Some((m.dev(), m.ino()))
        })
        .collect()
}

fn ready_on(port: u16) -> bool {
    crate::support::install::node::get(port, "/readyz").is_some_and(|(c, _)| c == 200)
}

/// Sends one plugin log record to the relay socket, as the plugin does; false when nobody listens there.
fn send_line(run: &Path, msg: &str) -> bool {
    let s = UnixDatagram::unbound().unwrap();
    let line = format!(r#"{{"level":"info","msg":"{msg}"}}"#);
    s.send_to(line.as_bytes(), run.join("log.sock")).is_ok()
}

#[test]
fn an_old_agent_stopping_leaves_the_new_agents_sockets_and_records() {
    let c = Cluster::new("overlap");
    fs::create_dir_all(c.run.join("agents.lock")).unwrap();
    let common = [
        ("DISABLE_SAFE_UPGRADE", "true"),
        ("FORCE_IPTABLES_BINARY", "iptables-nft"),
    ];
    let a = c.start("istio-cni-node-aaaaa", &common);
    c.wait_ready(&a);
    let of_a = ids(&c.run);
    assert!(of_a.iter().all(Option::is_some), "{of_a:?}\n{}", a.stderr());
    assert!(a.stderr().contains("no lease"), "{}", a.stderr());

    // The new agent, on its own ports, up before the old one stops.
    let (health, metrics) = (free_port(), free_port());
    let (h, m) = (health.to_string(), metrics.to_string());
    let mut env_b = common.to_vec();
    env_b.extend([("HEALTH_PORT", h.as_str()), ("MONITORING_PORT", m.as_str())]);
    let b = c.start("istio-cni-node-bbbbb", &env_b);
    poll_until("the new agent ready", LONG, || ready_on(health));
    let of_b = ids(&c.run);
    assert!(of_b.iter().all(Option::is_some), "{of_b:?}\n{}", b.stderr());
    for (i, f) in FILES.iter().enumerate().take(2) {
        assert_ne!(of_b[i], of_a[i], "{f}: bound by the new agent");
    }

    let ino = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC).unwrap();
    ino.add_watch(
        &c.run,
        AddWatchFlags::IN_DELETE | AddWatchFlags::IN_MOVED_FROM | AddWatchFlags::IN_MOVED_TO,
    )
    .unwrap();
    let (_, log_a) = c.stop(a);
    // Its rule says clean up (the entry it removes, the new agent puts back at once).
    let line = log_a
        .lines()
        .find(|l| l.contains("(rule "))
        .unwrap_or_default();
    assert!(
        line.contains("(rule disabled)") && line.contains("removing"),
        "{log_a}"
    );
    let touched: Vec<String> = ino
        .read_events()
        .unwrap_or_default()
        .into_iter()
        .filter_map(|e| e.name.map(|n| n.to_string_lossy().into_owned()))
        .filter(|n| FILES.contains(&n.as_str()))
        .collect();
    assert!(
        touched.is_empty(),
        "the old agent's cleanup touched the new agent's {touched:?}:\n{log_a}"
    );
    assert_eq!(ids(&c.run), of_b, "every file still the new agent's");
    for f in [
        "log.sock",
        "pod-cache.sock",
        "istio-cni-kubeconfig",
        "iptables-backend",
    ] {
        assert!(
            log_a.contains(&format!("{f}: left in place")),
            "{f} not reported as left:\n{log_a}"
        );
    }

    // The new agent's relay and pod cache still answer a plugin.
    assert!(send_line(&c.run, "first-line-after-the-roll"));
    poll_until("the relayed line in the new agent's log", LONG, || {
        b.stderr().contains("first-line-after-the-roll")
    });
    assert!(UnixStream::connect(c.run.join("pod-cache.sock")).is_ok());

    // A relay socket removed anyway (by hand, by an older agent's cleanup) is bound again.
    std::fs::remove_file(c.run.join("log.sock")).unwrap();
    poll_until("log.sock bound again", LONG, || {
        send_line(&c.run, "a-line-after-the-socket-came-back")
    });
    poll_until("the line relayed by the re-bound socket", LONG, || {
        b.stderr().contains("a-line-after-the-socket-came-back")
    });
    assert!(b.stderr().contains("was removed; bound it again"));

    // The new agent's own cleanup still removes everything it put there.
    let mut b = b;
    b.signal(nix::sys::signal::Signal::SIGTERM);
    assert!(b.wait_exit(LONG).success(), "{}", b.stderr());
    let left = ids(&c.run);
    assert!(left.iter().all(Option::is_none), "{left:?}\n{}", b.stderr());
}
