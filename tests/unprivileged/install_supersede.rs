//! Two agents on one node at once (a `maxSurge` roll: the new pod starts before the old one stops). The newer
//! agent owns the node's installation; the older one is superseded: it writes nothing (no fight over the
//! kubeconfig or the entry), reports not ready, keeps everything at SIGTERM whatever its rule says, and takes
//! the node back when the newer one is gone. Real processes, signals, files and inotify; the API double.

use crate::support::install::cluster::*;
use crate::support::install::node::get;
use crate::support::install::{atomic_write, Proc};
use crate::support::*;
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
use nix::sys::signal::Signal;
use std::fs;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// An agent on its own health and metrics ports (two agents at once cannot share them).
struct Agent {
    proc: Proc,
    health: u16,
}

impl Agent {
    fn start(c: &Cluster, pod: &str, extra: &[(&str, &str)]) -> Agent {
        let health = free_port();
        let (h, m) = (health.to_string(), free_port().to_string());
        let mut env = extra.to_vec();
        env.extend([("HEALTH_PORT", h.as_str()), ("MONITORING_PORT", m.as_str())]);
        Agent {
            proc: c.start(pod, &env),
            health,
        }
    }
    fn readyz(&self) -> Option<u16> {
        get(self.health, "/readyz").map(|(code, _)| code)
    }
    fn wait_ready(&self) {
        poll_until("ready", LONG, || self.readyz() == Some(200));
    }
    fn log(&self) -> String {
        self.proc.stderr()
    }
    fn wait_log(&self, what: &str) {
        let p = &self.proc;
        let deadline = std::time::Instant::now() + LONG;
        while !p.stderr().contains(what) {
            assert!(
                std::time::Instant::now() < deadline,
                "no {what:?} in:\n{}",
                p.stderr()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// A service-account dir of its own, with `token` (each pod has its own projected token).
fn service_account(c: &Cluster, name: &str, token: &str) -> PathBuf {
    let d = c.root.join(name);
    fs::create_dir_all(&d).unwrap();
    fs::copy(c.sa.join("ca.crt"), d.join("ca.crt")).unwrap();
    fs::write(d.join("namespace"), NS).unwrap();
    fs::write(d.join("token"), token).unwrap();
    d
}

/// Counts the writes (a rename onto the name) of some files, and notes every removal of one.
struct Writes {
    ino: Inotify,
    names: Vec<&'static str>,
}

impl Writes {
    fn watch(dirs: &[&Path], names: &[&'static str]) -> Writes {
        let ino = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC).unwrap();
        for d in dirs {
            ino.add_watch(
                *d,
                AddWatchFlags::IN_MOVED_TO
                    | AddWatchFlags::IN_DELETE
                    | AddWatchFlags::IN_MOVED_FROM,
            )
            .unwrap();
        }
        Writes {
            ino,
            names: names.to_vec(),
        }
    }
    /// Per name: (writes, removals) since the last call.
    fn take(&self) -> Vec<(&'static str, usize, usize)> {
        let evs = self.ino.read_events().unwrap_or_default();
        self.names
            .iter()
            .map(|n| {
                let of = |f: AddWatchFlags| {
                    evs.iter()
                        .filter(|e| {
                            e.mask.contains(f) && e.name.as_deref().is_some_and(|x| x == *n)
                        })
                        .count()
                };
                (
                    *n,
                    of(AddWatchFlags::IN_MOVED_TO),
                    of(AddWatchFlags::IN_DELETE),
                )
            })
            .collect()
    }
}

/// The longest time the node went without our entry in the primary or without the plugin binary, from
/// inotify events on the conf and bin dirs (the state is read at each event; a gap ends at the event that
/// restores it).
struct Gaps {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<(Duration, Duration)>,
}

impl Gaps {
    fn start(c: &Cluster) -> Gaps {
        use std::sync::atomic::Ordering;
        let ino = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC).unwrap();
        for d in [&c.conf, &c.bin] {
            // Changes only: the thread's own reads must not wake it.
            let changes = AddWatchFlags::IN_CREATE
                | AddWatchFlags::IN_DELETE
                | AddWatchFlags::IN_MOVED_FROM
                | AddWatchFlags::IN_MOVED_TO
                | AddWatchFlags::IN_CLOSE_WRITE
                | AddWatchFlags::IN_MODIFY;
            ino.add_watch(d, changes).unwrap();
        }
        let (primary, binary) = (c.conf.join(PRIMARY), c.bin.join("istio-cni"));
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut gaps = [(None, Duration::ZERO), (None, Duration::ZERO)];
            loop {
                let done = s.load(Ordering::SeqCst);
                match ino.read_events() {
                    Ok(_) => {
                        let now = std::time::Instant::now();
                        let ok = [
                            fs::read_to_string(&primary).is_ok_and(|t| {
                                istio_cni::install::config::conflist::count_entries(&t) == 1
                            }),
                            binary.exists(),
                        ];
                        for (g, ok) in gaps.iter_mut().zip(ok) {
                            match (g.0, ok) {
                                (None, false) => g.0 = Some(now),
                                (Some(t0), true) => {
                                    g.1 = g.1.max(now - t0);
                                    g.0 = None;
                                }
                                _ => {}
                            }
                        }
                    }
                    Err(_) if done => {
                        let end = std::time::Instant::now();
                        let open = |g: &(Option<std::time::Instant>, Duration)| {
                            g.0.map_or(g.1, |t0| g.1.max(end - t0))
                        };
                        return (open(&gaps[0]), open(&gaps[1]));
                    }
                    Err(_) => std::thread::sleep(Duration::from_micros(200)),
                }
            }
        });
        Gaps { stop, thread }
    }
    /// The longest time without the entry, and without the binary.
    fn finish(self) -> (Duration, Duration) {
        std::thread::sleep(Duration::from_millis(20));
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        self.thread.join().unwrap()
    }
}

fn decision(log: &str) -> &str {
    log.lines().find(|l| l.contains("(rule ")).unwrap_or("")
}

/// (1) The old agent's rule says clean up (`DISABLE_SAFE_UPGRADE=true`) while the new one runs: before, it
/// removed our entry and the binary and the new agent put them back milliseconds later (a pod started then
/// started unredirected). Now the old agent keeps everything: inotify over the whole roll sees every
/// version of the primary with our entry, and the binary never removed.
#[test]
fn an_old_agent_stopping_during_a_surge_never_removes_the_entry_or_the_binary() {
    let c = Cluster::new("supersede-stop");
    let off = [("DISABLE_SAFE_UPGRADE", "true")];
    let a = Agent::start(&c, "istio-cni-node-aaaaa", &off);
    a.wait_ready();
    let conf = ConfWatch::start(c.conf.clone());
    let bin = Writes::watch(&[&c.bin], &["istio-cni"]);
    let gaps = Gaps::start(&c);

    let b = Agent::start(&c, "istio-cni-node-bbbbb", &off);
    b.wait_ready();
    let (_, log_a) = c.stop(a.proc);
    // The new agent has had every chance to put back anything the old one took away.
    b.wait_ready();
    poll_until("our entry and the binary", LONG, || {
        c.entries() == 1 && c.bin.join("istio-cni").exists()
    });
    let (versions, bad) = conf.finish();
    let (no_entry, no_binary) = gaps.finish();
    println!(
        "old agent stopped during the surge: longest time without our entry {:.3} ms, without the binary \
         {:.3} ms",
        no_entry.as_secs_f64() * 1e3,
        no_binary.as_secs_f64() * 1e3
    );
    assert!(
        bad.is_empty(),
        "{versions} versions seen:\n{}\n{log_a}",
        bad.join("\n")
    );
    let removed: usize = bin.take().iter().map(|w| w.2).sum();
    assert_eq!(removed, 0, "the plugin binary was removed:\n{log_a}");
    assert_eq!((no_entry, no_binary), (Duration::ZERO, Duration::ZERO));
    let line = decision(&log_a);
    assert!(
        line.contains("(rule superseded)")
            && line.contains("leaving the istio-cni entry")
            && line.contains("istio-cni-node-bbbbb"),
        "{log_a}"
    );
    assert!(c.state().iter().all(Option::is_some) && c.entries() == 1);

    // The last agent out: its rule decides, it removes everything (the lease too).
    let (_, log_b) = c.stop(b.proc);
    c.assert_decision(&log_b, "disabled", false);
    assert!(!c.run.join("agents.lock").exists(), "{log_b}");
}

/// (2) Two agents with different tokens (and, second case, different settings) at once: before, each
/// rewrote the other's kubeconfig (and entry) as soon as it saw it. Now, once the newer agent is up,
/// nothing is written: the kubeconfig holds the newer agent's token, the entry its settings.
#[test]
fn overlapping_agents_with_different_tokens_and_settings_do_not_fight() {
    for settings_b in [None, Some("kube-system")] {
        let c = Cluster::new("supersede-fight");
        let sa_a = service_account(&c, "sa-a", "token-a");
        let sa_b = service_account(&c, "sa-b", "token-b");
        c.api.bind_token("token-a", NS, "istio-cni-node-aaaaa");
        c.api.bind_token("token-b", NS, "istio-cni-node-bbbbb");
        let a = Agent::start(
            &c,
            "istio-cni-node-aaaaa",
            &[("SERVICE_ACCOUNT_DIR", sa_a.to_str().unwrap())],
        );
        a.wait_ready();
        let writes = Writes::watch(&[&c.conf, &c.run], &[PRIMARY, "istio-cni-kubeconfig"]);

        let mut env_b = vec![("SERVICE_ACCOUNT_DIR", sa_b.to_str().unwrap())];
        env_b.extend(settings_b.map(|ns| ("EXCLUDE_NAMESPACES", ns)));
        let b = Agent::start(&c, "istio-cni-node-bbbbb", &env_b);
        b.wait_ready();
        let during_start = writes.take();
        // Watched for a while after the newer agent is ready: the number does not depend on how long.
        std::thread::sleep(Duration::from_secs(2));
        let after = writes.take();
        println!(
            "settings {settings_b:?}: writes while the newer agent started: {during_start:?}; in the 2 s \
             after: {after:?}"
        );
        assert!(
            after.iter().all(|w| w.1 == 0 && w.2 == 0),
            "the agents keep rewriting each other's files: {after:?}\n--- old agent:\n{}",
            a.log()
        );
        let kc = fs::read_to_string(c.run.join("istio-cni-kubeconfig")).unwrap();
        assert!(kc.contains("token-b") && !kc.contains("token-a"), "{kc}");
        let conf = fs::read_to_string(c.conf.join(PRIMARY)).unwrap();
        assert_eq!(conf.contains("kube-system"), settings_b.is_some(), "{conf}");
        assert_eq!(c.entries(), 1);
        a.wait_log("superseded: a newer agent (pod istio-cni-node-bbbbb, generation 2)");
        assert_eq!(a.readyz(), Some(503), "a superseded agent is not ready");
        assert_eq!(b.readyz(), Some(200));

        let (_, log_a) = c.stop(a.proc);
        assert!(decision(&log_a).contains("(rule superseded)"), "{log_a}");
        assert!(writes.take().iter().all(|w| w.1 == 0 && w.2 == 0));
    }
}

/// Sends one plugin log record to the relay socket; false when nobody listens there.
fn send_line(run: &Path, msg: &str) -> bool {
    let s = UnixDatagram::unbound().unwrap();
    let line = format!(r#"{{"level":"info","msg":"{msg}"}}"#);
    s.send_to(line.as_bytes(), run.join("log.sock")).is_ok()
}

/// Whether an agent answers on the pod-cache socket (the pod, or that it does not hold it).
fn pod_cache_answers(run: &Path) -> bool {
    use istio_cni::podcache::{client, proto::Request, Miss};
    let req = Request {
        namespace: NS.into(),
        name: "istio-cni-node-aaaaa".into(),
        uid: String::new(),
    };
    let got = client::lookup(&run.join("pod-cache.sock"), &req);
    matches!(got, Ok(_) | Err(Miss::Agent(_)))
}

/// (3) The newer agent is SIGKILLed (nothing cleaned up) while the old one runs: the old one takes the node
/// back (it looks at the newer agent's lock every 200 ms), without a moment without our entry;
/// it writes its own kubeconfig and entry again, is ready, answers a primary that drops our entry, and
/// binds the relay and pod-cache sockets the dead agent left.
#[test]
fn the_old_agent_takes_the_node_back_when_the_newer_one_is_killed() {
    let c = Cluster::new("supersede-kill");
    let sa_b = service_account(&c, "sa-b", "token-b");
    c.api.bind_token("token-b", NS, "istio-cni-node-bbbbb");
    let a = Agent::start(&c, "istio-cni-node-aaaaa", &[]);
    a.wait_ready();
    let b = Agent::start(
        &c,
        "istio-cni-node-bbbbb",
        &[
            ("SERVICE_ACCOUNT_DIR", sa_b.to_str().unwrap()),
            ("EXCLUDE_NAMESPACES", "kube-system"),
        ],
    );
    b.wait_ready();
    a.wait_log("superseded: a newer agent");
    let conf = ConfWatch::start(c.conf.clone());
    let bin = Writes::watch(&[&c.bin], &["istio-cni"]);

    let mut b = b;
    let t = std::time::Instant::now();
    b.proc.signal(Signal::SIGKILL);
    b.proc.wait_exit(LONG);
    a.wait_ready();
    println!(
        "SIGKILL of the newer agent -> old agent ready again: {:.1} ms",
        t.elapsed().as_secs_f64() * 1e3
    );
    a.wait_log("the newer agent (pod istio-cni-node-bbbbb, generation 2) is gone: taking");
    poll_until("the old agent's token and entry back", LONG, || {
        let kc = fs::read_to_string(c.run.join("istio-cni-kubeconfig")).unwrap_or_default();
        kc.contains(&c.api.token())
            && !fs::read_to_string(c.conf.join(PRIMARY))
                .unwrap()
                .contains("kube-system")
    });
    let (versions, bad) = conf.finish();
    assert!(bad.is_empty(), "{versions} versions:\n{}", bad.join("\n"));
    assert_eq!(bin.take()[0].2, 0, "binary removed");

    // It maintains the node again: the primary's CNI rewrites its file without our entry.
    atomic_write(&c.conf.join(PRIMARY), PRIMARY_TEXT.as_bytes(), 0o644);
    poll_until("our entry back", LONG, || c.entries() == 1);
    poll_until(
        "the relay bound again over the dead agent's socket",
        LONG,
        || send_line(&c.run, "a-line-after-the-take-back"),
    );
    poll_until("the line in the old agent's log", LONG, || {
        a.log().contains("a-line-after-the-take-back")
    });
    poll_until(
        "the pod cache bound again over the dead agent's socket",
        LONG,
        || pod_cache_answers(&c.run),
    );
    let (_, log_a) = c.stop(a.proc);
    c.assert_decision(&log_a, "replacement", true);
}

/// The old pod's container restarted in place during the roll is the newest agent: it takes over (it does
/// not defer to the agent it replaced, nor to the new pod's). When its pod is then deleted, the new pod's
/// agent still runs: it hands the node over and keeps everything, whatever its rule says, and the new pod's
/// agent takes the node back. Both stopping together at an uninstall: exactly one decides, the node is
/// left clean.
#[test]
fn a_restarted_agent_takes_over_hands_back_and_the_last_one_out_decides() {
    let c = Cluster::new("supersede-restart");
    let off = [("DISABLE_SAFE_UPGRADE", "true")];
    let a = Agent::start(&c, "istio-cni-node-aaaaa", &off);
    a.wait_ready();
    let b = Agent::start(&c, "istio-cni-node-bbbbb", &off);
    b.wait_ready();
    let mut a = a;
    a.proc.signal(Signal::SIGKILL);
    a.proc.wait_exit(LONG);
    let conf = ConfWatch::start(c.conf.clone());
    let a2 = Agent::start(&c, "istio-cni-node-aaaaa", &off);
    a2.wait_ready();
    a2.wait_log("joined the node's agents as generation 3");
    b.wait_log("superseded: a newer agent (pod istio-cni-node-aaaaa, generation 3)");

    let (_, log_a2) = c.stop(a2.proc);
    let line = decision(&log_a2);
    assert!(
        line.contains("(rule handed-over)") && line.contains("istio-cni-node-bbbbb"),
        "{log_a2}"
    );
    b.wait_log("(pod istio-cni-node-aaaaa, generation 3) is gone: taking");
    b.wait_ready();
    let (versions, bad) = conf.finish();
    assert!(bad.is_empty(), "{versions} versions:\n{}", bad.join("\n"));

    // An uninstall during a roll: the DaemonSet is deleted, both agents stop at once.
    let mut b = b;
    let b2 = Agent::start(&c, "istio-cni-node-ccccc", &[]);
    b2.wait_ready();
    assert!(c.api.delete_daemonset(NS, DS));
    let mut b2 = b2;
    b.proc.signal(Signal::SIGTERM);
    b2.proc.signal(Signal::SIGTERM);
    assert!(b.proc.wait_exit(LONG).success() && b2.proc.wait_exit(LONG).success());
    let logs = [b.log(), b2.log()];
    let rules: Vec<&str> = logs.iter().map(|l| decision(l)).collect();
    assert!(
        rules.iter().any(|l| l.contains("removing")),
        "nobody cleaned up: {rules:?}"
    );
    let [_, binary, kubeconfig] = c.state();
    assert!(
        binary.is_none() && kubeconfig.is_none() && c.entries() == 0,
        "{rules:?}"
    );
    assert!(!c.run.join("agents.lock").exists());
}
