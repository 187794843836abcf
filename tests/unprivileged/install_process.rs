//! The installer as a process on real files, inotify and signals: re-injection after 100 rewrites,
//! SIGKILL crash safety, token rotation through a `..data` symlink swap, SIGTERM cleanup (also with a
//! second signal and with the primary gone), readiness and metrics, the log relay, conflict backoff,
//! `--once` / `--uninstall`, and configuration errors. Timings are printed, never asserted.

use crate::support::install::*;
use istio_cni::install::config::conflist;
use istio_cni::install::config::entry::PluginEntry;
use istio_cni::json;
use nix::sys::signal::Signal;
use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::symlink;
use std::path::PathBuf;
use std::time::{Duration, Instant};

const PRIMARY: &str = "10-calico.conflist";

struct Node {
    root: PathBuf,
    conf: PathBuf,
    bin: PathBuf,
    run: PathBuf,
    sa: PathBuf,
    health: u16,
    metrics: u16,
    generation: u32,
}

/// The primary's file, in its own (unsorted) key order, with a varying MTU.
fn primary_text(mtu: u64) -> String {
    format!(
        r#"{{
  "name": "k8s-pod-network",
  "cniVersion": "0.3.1",
  "plugins": [
    {{
      "type": "calico",
      "mtu": {mtu},
      "ipam": {{ "type": "calico-ipam" }}
    }},
    {{
      "type": "portmap",
      "snat": true,
      "capabilities": {{ "portMappings": true }}
    }}
  ]
}}
"#
    )
}

impl Node {
    fn new(tag: &str) -> Node {
        let root = tempdir(tag);
        let n = Node {
            conf: root.join("conf"),
            bin: root.join("bin"),
            run: root.join("run"),
            sa: root.join("sa"),
            root,
            health: free_port(),
            metrics: free_port(),
            generation: 0,
        };
        for d in [&n.conf, &n.bin, &n.run, &n.sa] {
            fs::create_dir_all(d).unwrap();
        }
        let ca = conformance_dir().join("kubeconfig/master-tls-verify/ca.crt");
        fs::copy(ca, n.root.join("ca.crt")).unwrap();
        let mut n = n;
        n.rotate_token("token-0");
        symlink("..data/token", n.sa.join("token")).unwrap();
        symlink("..data/ca.crt", n.sa.join("ca.crt")).unwrap();
        n
    }

    /// The kubelet's atomic writer: a new `..<gen>` dir, a `..data_tmp` symlink to it, renamed over
    /// `..data`, then the old dir removed.
    fn rotate_token(&mut self, token: &str) {
        self.generation += 1;
        let dir = self.sa.join(format!("..gen_{}", self.generation));
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("token"), token).unwrap();
        fs::copy(self.root.join("ca.crt"), dir.join("ca.crt")).unwrap();
        let tmp = self.sa.join("..data_tmp");
        symlink(format!("..gen_{}", self.generation), &tmp).unwrap();
        fs::rename(&tmp, self.sa.join("..data")).unwrap();
        if self.generation > 1 {
            fs::remove_dir_all(self.sa.join(format!("..gen_{}", self.generation - 1))).unwrap();
        }
    }

    fn env(&self, extra: &[(&str, &str)]) -> Vec<(String, String)> {
        let mut e = installer_env(&InstallerDirs {
            conf: &self.conf,
            run: &self.run,
            bin: &self.bin,
            sa: &self.sa,
            health: self.health,
            metrics: self.metrics,
        });
        set_env(&mut e, &[("REPAIR_ENABLED", "false")]);
        set_env(&mut e, extra);
        e
    }

    fn start(&self, extra: &[(&str, &str)], args: &[&str], log: &str) -> Proc {
        spawn_installer(&self.env(extra), args, &self.root.join(log))
    }

    fn primary(&self) -> PathBuf {
        self.conf.join(PRIMARY)
    }

    fn write_primary(&self, mtu: u64) -> String {
        let t = primary_text(mtu);
        atomic_write(&self.primary(), t.as_bytes(), 0o644);
        t
    }

    /// The primary holds exactly one istio-cni entry and the given MTU.
    fn injected(&self, mtu: u64) -> bool {
        let Ok(t) = fs::read_to_string(self.primary()) else {
            return false;
        };
        conflist::count_entries(&t) == 1 && t.contains(&format!("\"mtu\": {mtu},"))
    }

    /// What the installer writes for `primary_text(mtu)` (same entry as its settings produce).
    fn merged(&self, mtu: u64) -> String {
        let entry = PluginEntry {
            plugin_log_level: "info".into(),
            cni_agent_run_dir: self.run.display().to_string(),
            ambient_enabled: false,
            exclude_namespaces: None,
            pod_namespace: String::new(),
            native_nftables: false,
            enablement_selectors: Vec::new(),
            enable_ambient_detection_retry: false,
            pod_cache: true,
        };
        conflist::merge(&primary_text(mtu), &entry.to_object()).unwrap()
    }

    /// Waits until this process answers /readyz with 200.
    fn wait_ready(&self, p: &Proc) {
        let deadline = Instant::now() + LONG;
        while !get(self.health, "/readyz").is_some_and(|(c, _)| c == 200) {
            assert!(Instant::now() < deadline, "not ready:\n{}", p.stderr());
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    fn temps(&self) -> Vec<String> {
        let mut v = Vec::new();
        for d in [&self.conf, &self.bin, &self.run] {
            v.extend(names(d).into_iter().filter(|n| n.contains(".tmp.")));
        }
        v
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.root);
    }
}

fn get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    write!(c, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").ok()?;
    let mut s = String::new();
    c.read_to_string(&mut s).ok()?;
    let code = s.get(9..12)?.parse().ok()?;
    Some((code, s.split("\r\n\r\n").nth(1).unwrap_or("").to_string()))
}

const LONG: Duration = Duration::from_secs(10);

#[test]
fn rewrites_100_times_entry_back_exactly_once() {
    let n = Node::new("rewrite");
    n.write_primary(1000);
    let mut p = n.start(&[], &[], "stderr");
    poll_until("first injection", LONG, || n.injected(1000));
    for i in 1..=100u64 {
        n.write_primary(1000 + i);
        poll_until(&format!("re-injection {i}"), LONG, || n.injected(1000 + i));
        assert_eq!(
            fs::read_to_string(n.primary()).unwrap(),
            n.merged(1000 + i),
            "rewrite {i}"
        );
    }
    assert!(n.temps().is_empty(), "temp files: {:?}", n.temps());
    p.signal(Signal::SIGTERM);
    assert!(p.wait_exit(LONG).success(), "{}", p.stderr());
}

#[test]
fn reinjection_latency_median_of_100() {
    let n = Node::new("latency");
    n.write_primary(1);
    let mut p = n.start(&[], &[], "stderr");
    poll_until("first injection", LONG, || n.injected(1));
    let mut lat = Vec::new();
    for i in 2..102u64 {
        // Spaced so the reinstall throttle never engages: this measures the plain reaction.
        std::thread::sleep(Duration::from_millis(250));
        let t0 = Instant::now();
        n.write_primary(i);
        while !n.injected(i) {
            assert!(t0.elapsed() < LONG, "no re-injection {i}");
            std::thread::sleep(Duration::from_micros(100));
        }
        lat.push(t0.elapsed());
    }
    lat.sort();
    println!(
        "re-injection latency over {} rewrites: median {:?}, p90 {:?}, max {:?}",
        lat.len(),
        lat[lat.len() / 2],
        lat[lat.len() * 9 / 10],
        lat[lat.len() - 1]
    );
    p.signal(Signal::SIGTERM);
    assert!(p.wait_exit(LONG).success());
}

#[test]
fn sigkill_during_reinjection_never_corrupts() {
    let iterations: u64 = std::env::var("INSTALL_CRASH_ITERATIONS")
        .ok()
        .map(|v| {
            v.parse()
                .expect("INSTALL_CRASH_ITERATIONS must be a number")
        })
        .unwrap_or(200);
    let seed = std::env::var("INSTALL_CRASH_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        });
    println!("crash test: {iterations} iterations, INSTALL_CRASH_SEED={seed}");
    let mut rng = Rng(seed);
    let n = Node::new("crash");
    n.write_primary(0);
    let (mut old_seen, mut new_seen, mut temps_left) = (0, 0, 0);
    for i in 1..=iterations {
        let mut p = n.start(&[], &[], "stderr");
        // Restarted: the previous run's temp files are gone once it is ready.
        n.wait_ready(&p);
        assert!(
            n.injected(i - 1),
            "iteration {i}: not installed after restart"
        );
        assert!(
            n.temps().is_empty(),
            "iteration {i}: temp files survived a restart: {:?}",
            n.temps()
        );
        let old = n.write_primary(i);
        let delay = Duration::from_micros(rng.next() % 8000);
        std::thread::sleep(delay);
        p.signal(Signal::SIGKILL);
        p.wait_exit(LONG);
        if !n.temps().is_empty() {
            temps_left += 1;
        }
        let now = fs::read_to_string(n.primary()).unwrap();
        json::parse(&now, "primary after SIGKILL").unwrap();
        if now == old {
            old_seen += 1;
            // The next run must inject into it.
        } else {
            assert_eq!(
                now,
                n.merged(i),
                "iteration {i} (delay {delay:?}): neither old nor new content"
            );
            new_seen += 1;
        }
        // Next iteration expects mtu i injected; the restarted installer does it.
        if now == old {
            let mut p2 = n.start(&[], &[], "stderr2");
            n.wait_ready(&p2);
            assert!(n.injected(i), "iteration {i}: not injected by the next run");
            p2.signal(Signal::SIGKILL);
            p2.wait_exit(LONG);
        }
    }
    println!(
        "crash test: killed before our rewrite landed {old_seen} times, after {new_seen} times; \
         {temps_left} kills left a temp file behind (swept by the next start)"
    );
    let mut p = n.start(&[], &[], "stderr");
    n.wait_ready(&p);
    assert!(n.injected(iterations));
    assert!(n.temps().is_empty(), "temp files: {:?}", n.temps());
    p.signal(Signal::SIGTERM);
    let st = p.wait_exit(LONG);
    assert!(st.success(), "{st:?}: {}", p.stderr());
}

#[test]
fn token_rotation_rewrites_the_kubeconfig() {
    let mut n = Node::new("token");
    n.write_primary(1);
    let mut p = n.start(&[], &[], "stderr");
    let kc = n.run.join("istio-cni-kubeconfig");
    n.wait_ready(&p);
    poll_until("kubeconfig", LONG, || {
        fs::read_to_string(&kc).is_ok_and(|t| t.contains("token-0"))
    });
    for round in 1..=3 {
        let token = format!("rotated-token-{round}");
        let t0 = Instant::now();
        n.rotate_token(&token);
        poll_until("kubeconfig with the rotated token", LONG, || {
            fs::read_to_string(&kc).is_ok_and(|t| t.contains(&format!("\"token\": \"{token}\"")))
        });
        println!(
            "token rotation {round}: kubeconfig updated after {:?}",
            t0.elapsed()
        );
        assert_eq!(mode(&kc), 0o600);
    }
    assert!(n.injected(1), "{}", p.stderr());
    p.signal(Signal::SIGTERM);
    assert!(p.wait_exit(LONG).success());
}

// The installer never reports ready with a kubeconfig the plugin would refuse: a CA holding no
// certificate (empty, or not PEM) fails the start, exit 1 naming the file, and arriving with a rotation
// makes the agent not ready, the last good kubeconfig kept, until a good CA comes.
#[test]
fn a_ca_without_a_certificate_is_never_written() {
    let mut n = Node::new("badca");
    n.write_primary(1);
    let good = fs::read(n.root.join("ca.crt")).unwrap();
    let kc = n.run.join("istio-cni-kubeconfig");
    fs::write(n.root.join("ca.crt"), b"").unwrap();
    n.rotate_token("token-1");
    let mut p = n.start(&[], &[], "stderr");
    assert_eq!(p.wait_exit(LONG).code(), Some(1), "{}", p.stderr());
    let err = p.stderr();
    assert!(
        err.contains("ca.crt") && err.contains("no PEM certificate"),
        "{err}"
    );
    assert!(!kc.exists());

    fs::write(n.root.join("ca.crt"), &good).unwrap();
    n.rotate_token("token-2");
    let mut p = n.start(&[], &[], "stderr2");
    n.wait_ready(&p);
    let has = |t: &str| fs::read_to_string(&kc).is_ok_and(|k| k.contains(t));
    poll_until("kubeconfig", LONG, || has("token-2"));
    fs::write(n.root.join("ca.crt"), "not a certificate\n").unwrap();
    n.rotate_token("token-3");
    poll_until("the refusal logged", LONG, || {
        p.stderr().contains("no PEM certificate")
    });
    let ready = get(n.health, "/readyz").map(|(c, _)| c);
    assert_eq!(ready, Some(503), "{}", p.stderr());
    assert!(has("token-2") && !has("token-3"), "{}", p.stderr());

    fs::write(n.root.join("ca.crt"), &good).unwrap();
    n.rotate_token("token-4");
    poll_until("kubeconfig", LONG, || has("token-4"));
    n.wait_ready(&p);
    p.signal(Signal::SIGTERM);
    assert!(p.wait_exit(LONG).success(), "{}", p.stderr());
}

// The plugin takes its API server and token from the kubeconfig: a KUBECONFIG_MODE letting group or other
// users write it is refused at start (exit 2, nothing written); read bits are the operator's choice.
#[test]
fn a_kubeconfig_mode_others_could_write_is_refused() {
    let n = Node::new("kcmode");
    n.write_primary(1);
    let kc = n.run.join("istio-cni-kubeconfig");
    for v in ["0666", "0620", "0602", "438"] {
        let mut p = n.start(&[("KUBECONFIG_MODE", v)], &[], "stderr");
        let st = p.wait_exit(LONG);
        assert_eq!(st.code(), Some(2), "KUBECONFIG_MODE={v}: {}", p.stderr());
        let err = p.stderr();
        assert!(
            err.contains("KUBECONFIG_MODE") && err.contains("write"),
            "{err}"
        );
        assert!(!kc.exists(), "KUBECONFIG_MODE={v}");
    }
    let mut p = n.start(&[("KUBECONFIG_MODE", "0644")], &[], "stderr2");
    n.wait_ready(&p);
    assert_eq!(mode(&kc), 0o644);
    p.signal(Signal::SIGTERM);
    assert!(p.wait_exit(LONG).success(), "{}", p.stderr());
}

#[test]
fn sigterm_twice_uninstalls_cleanly() {
    let n = Node::new("sigterm");
    let original = primary_text(1500);
    fs::write(n.primary(), &original).unwrap();
    let mut p = n.start(&[], &[], "stderr");
    poll_until("installed", LONG, || {
        n.injected(1500) && n.bin.join("istio-cni").exists()
    });
    assert!(n.run.join("log.sock").exists() && n.run.join("istio-cni-kubeconfig").exists());
    // The backend record (written by the installer or by the plugin's first ADD) goes with the rest.
    fs::write(n.run.join("iptables-backend"), "nft\n").unwrap();
    p.signal(Signal::SIGTERM);
    p.signal(Signal::SIGTERM);
    let st = p.wait_exit(LONG);
    assert!(st.success(), "exit {st:?}\n{}", p.stderr());
    let after = fs::read_to_string(n.primary()).unwrap();
    assert_eq!(
        canon(&after),
        canon(&original),
        "primary semantically unchanged"
    );
    assert_eq!(names(&n.conf), vec![PRIMARY]);
    assert!(!n.bin.join("istio-cni").exists());
    assert!(!n.run.join("istio-cni-kubeconfig").exists() && !n.run.join("log.sock").exists());
    assert!(!n.run.join("iptables-backend").exists());
}

#[test]
fn sigterm_after_the_primary_vanished() {
    let n = Node::new("vanished");
    n.write_primary(7);
    let mut p = n.start(&[], &[], "stderr");
    poll_until("installed", LONG, || n.injected(7));
    fs::remove_file(n.primary()).unwrap();
    poll_until("not ready", LONG, || {
        get(n.health, "/readyz").is_some_and(|(c, _)| c == 503)
    });
    p.signal(Signal::SIGTERM);
    assert!(p.wait_exit(LONG).success(), "{}", p.stderr());
    assert!(
        names(&n.conf).is_empty(),
        "nothing re-created: {:?}",
        names(&n.conf)
    );
    assert!(!n.bin.join("istio-cni").exists());
    assert!(p.stderr().contains("no longer exists"), "{}", p.stderr());
}

#[test]
fn readiness_flips_and_metrics_are_served() {
    let n = Node::new("ready");
    let mut p = n.start(&[], &[], "stderr");
    poll_until("health server", LONG, || {
        get(n.health, "/healthz").is_some_and(|(c, _)| c == 200)
    });
    assert_eq!(get(n.health, "/readyz").unwrap().0, 503, "no primary yet");
    let (c, m) = get(n.metrics, "/metrics").unwrap();
    assert_eq!(c, 200);
    assert!(m.contains("istio_cni_install_ready 0\n"), "{m}");
    n.write_primary(1);
    poll_until("ready", LONG, || {
        get(n.health, "/readyz").is_some_and(|(c, _)| c == 200)
    });
    let (_, m) = get(n.metrics, "/metrics").unwrap();
    assert!(m.contains("istio_cni_install_ready 1\n"), "{m}");
    assert!(m.contains("# TYPE istio_cni_installs_total counter"), "{m}");
    assert!(
        m.contains("istio_cni_installs_total{result=\"SUCCESS\"} "),
        "{m}"
    );
    fs::remove_file(n.primary()).unwrap();
    poll_until("not ready", LONG, || {
        get(n.health, "/readyz").is_some_and(|(c, _)| c == 503)
    });
    n.write_primary(2);
    poll_until("ready again", LONG, || {
        get(n.health, "/readyz").is_some_and(|(c, _)| c == 200) && n.injected(2)
    });
    assert_eq!(get(n.health, "/healthz").unwrap().0, 200);
    p.signal(Signal::SIGTERM);
    assert!(p.wait_exit(LONG).success());
}

#[test]
fn plugin_log_lines_are_relayed() {
    let n = Node::new("relay");
    n.write_primary(1);
    let mut p = n.start(&[], &[], "stderr");
    let sock = n.run.join("log.sock");
    poll_until("log.sock", LONG, || sock.exists());
    let c = std::os::unix::net::UnixDatagram::unbound().unwrap();
    c.send_to(b"ADD pod default/web: redirected", &sock)
        .unwrap();
    poll_until("relayed line", LONG, || {
        p.stderr()
            .contains("\tinfo\tcni-plugin\tADD pod default/web: redirected\n")
    });
    p.signal(Signal::SIGTERM);
    assert!(p.wait_exit(LONG).success());
}

#[test]
fn a_primary_that_keeps_reverting_us_is_throttled() {
    let n = Node::new("conflict");
    n.write_primary(1);
    let mut p = n.start(&[], &[], "stderr");
    poll_until("installed", LONG, || n.injected(1));
    // A hostile primary: rewrites its file without our entry as fast as it can for 3 s.
    let path = n.primary();
    let t = std::thread::spawn(move || {
        let t0 = Instant::now();
        let mut writes = 0u64;
        while t0.elapsed() < Duration::from_secs(3) {
            atomic_write(&path, primary_text(2).as_bytes(), 0o644);
            writes += 1;
            std::thread::sleep(Duration::from_millis(1));
        }
        writes
    });
    let writes = t.join().unwrap();
    poll_until("entry back after the conflict", LONG, || n.injected(2));
    let err = p.stderr();
    let reinstalls = err.matches("wrote the istio-cni configuration").count();
    let conflict_logs = err.matches("configuration conflict").count();
    println!("conflict: primary wrote {writes} times, installer rewrote {reinstalls} times, logged the conflict {conflict_logs} time(s)");
    assert!(
        reinstalls < 80,
        "throttle did not engage: {reinstalls} reinstalls for {writes} reverts"
    );
    assert_eq!(conflict_logs, 1, "the conflict is logged once per interval");
    p.signal(Signal::SIGTERM);
    assert!(p.wait_exit(LONG).success());
}

#[test]
fn once_and_uninstall_modes() {
    let n = Node::new("once");
    // No primary: waits at most --wait-timeout, then fails, writing nothing.
    let mut p = n.start(&[], &["--once", "--wait-timeout=300ms"], "stderr-wait");
    let st = p.wait_exit(LONG);
    assert_eq!(st.code(), Some(1), "{}", p.stderr());
    assert!(names(&n.conf).is_empty());
    // With a primary: one pass, exit 0, everything in place.
    n.write_primary(5);
    let mut p = n.start(&[], &["--once"], "stderr-once");
    assert!(p.wait_exit(LONG).success(), "{}", p.stderr());
    assert!(
        n.injected(5)
            && n.bin.join("istio-cni").exists()
            && n.run.join("istio-cni-kubeconfig").exists()
    );
    // --uninstall finds our entry without any state and removes it all.
    let mut p = n.start(&[], &["--uninstall"], "stderr-uninstall");
    assert!(p.wait_exit(LONG).success(), "{}", p.stderr());
    assert_eq!(
        fs::read_to_string(n.primary()).unwrap(),
        conflist::remove_entry(&n.merged(5), "x").unwrap().unwrap()
    );
    assert_eq!(
        conflist::count_entries(&fs::read_to_string(n.primary()).unwrap()),
        0
    );
    assert!(!n.bin.join("istio-cni").exists() && !n.run.join("istio-cni-kubeconfig").exists());
}

#[test]
fn standalone_mode_writes_and_removes_its_own_file() {
    let n = Node::new("standalone");
    let mut p = n.start(
        &[
            ("CHAINED_CNI_PLUGIN", "false"),
            ("CNI_CONF_GROUP_READ", "true"),
        ],
        &[],
        "stderr",
    );
    let f = n.conf.join("YYY-istio-cni.conf");
    poll_until("standalone file", LONG, || f.exists());
    assert_eq!(mode(&f), 0o640);
    let text = fs::read_to_string(&f).unwrap();
    assert!(text.starts_with(
        "{\n  \"cniVersion\": \"0.3.1\",\n  \"name\": \"istio-cni\",\n  \"type\": \"istio-cni\","
    ));
    fs::remove_file(&f).unwrap();
    poll_until("standalone file restored", LONG, || f.exists());
    p.signal(Signal::SIGTERM);
    assert!(p.wait_exit(LONG).success());
    assert!(names(&n.conf).is_empty());
}

#[test]
fn bad_configuration_fails_at_start_naming_the_setting() {
    let n = Node::new("badcfg");
    for (k, v) in [
        ("CHAINED_CNI_PLUGIN", "maybe"),
        ("MONITORING_PORT", "70000"),
        ("KUBECONFIG_MODE", "rwx"),
        ("REPAIR_DELETE_PODS", "perhaps"),
        ("AMBIENT_ENABLED", "true"),
        ("MOUNTED_CNI_NET_DIR", "relative/dir"),
    ] {
        let mut p = n.start(&[(k, v)], &[], "stderr");
        let st = p.wait_exit(LONG);
        assert!(!st.success(), "{k}={v} accepted");
        let err = p.stderr();
        assert!(err.contains(k), "{k}={v}: {err}");
    }
    let mut p = n.start(&[], &["--no-such-flag"], "stderr");
    assert!(!p.wait_exit(LONG).success());
    // Missing service host: the kubeconfig cannot be written; checked at start, before anything is
    // written, exit 1 (upstream's code; it fails on the first pass).
    n.write_primary(1);
    let mut p = n.start(&[("KUBERNETES_SERVICE_HOST", "")], &[], "stderr");
    assert_eq!(p.wait_exit(LONG).code(), Some(1));
    assert!(
        p.stderr()
            .contains("KUBERNETES_SERVICE_HOST not set. Is this not running within a pod?"),
        "{}",
        p.stderr()
    );
}

#[test]
fn a_removed_binary_or_kubeconfig_is_put_back() {
    let n = Node::new("heal");
    n.write_primary(1);
    let mut p = n.start(&[], &[], "stderr");
    n.wait_ready(&p);
    let (bin, kc) = (n.bin.join("istio-cni"), n.run.join("istio-cni-kubeconfig"));
    fs::remove_file(&bin).unwrap();
    poll_until("binary reinstalled", LONG, || bin.is_file());
    fs::remove_file(&kc).unwrap();
    poll_until("kubeconfig rewritten", LONG, || kc.is_file());
    // Another binary in the bin dir is not ours: its changes are ignored and it is never removed.
    fs::write(n.bin.join("calico"), b"x").unwrap();
    n.wait_ready(&p);
    assert_eq!(
        fs::read(&bin).unwrap(),
        fs::read(binary()).unwrap(),
        "the installed plugin is this very executable"
    );
    p.signal(Signal::SIGTERM);
    assert!(p.wait_exit(LONG).success());
    assert_eq!(names(&n.bin), vec!["calico"]);
}

#[test]
fn a_binary_made_unexecutable_is_made_executable_again() {
    use std::os::unix::fs::PermissionsExt;
    let n = Node::new("chmod");
    n.write_primary(1);
    let mut p = n.start(&[], &[], "stderr");
    n.wait_ready(&p);
    let bin = n.bin.join("istio-cni");
    let mode = |p: &std::path::Path| fs::metadata(p).map(|m| m.permissions().mode() & 0o7777);
    let installed = mode(&bin).unwrap();
    assert_eq!(installed, mode(&binary()).unwrap() & 0o7777);
    assert_ne!(installed & 0o100, 0, "installed executable");
    // The same bytes, but the runtime can no longer run the plugin (CRI-O would skip our list).
    fs::set_permissions(&bin, fs::Permissions::from_mode(0o644)).unwrap();
    poll_until("binary executable again", LONG, || {
        mode(&bin).is_ok_and(|m| m == installed)
    });
    n.wait_ready(&p);
    p.signal(Signal::SIGTERM);
    assert!(p.wait_exit(LONG).success());
}

#[test]
fn a_binary_it_may_not_replace_is_not_ready_while_unexecutable() {
    use std::os::unix::fs::PermissionsExt;
    let n = Node::new("chmod-keep");
    n.write_primary(1);
    let mut p = n.start(&[("UPDATE_CNI_BINARIES", "false")], &[], "stderr");
    n.wait_ready(&p);
    let bin = n.bin.join("istio-cni");
    // UPDATE_CNI_BINARIES=false keeps the existing file: the runtime cannot run it, so not ready.
    fs::set_permissions(&bin, fs::Permissions::from_mode(0o644)).unwrap();
    poll_until("not ready with an unexecutable binary", LONG, || {
        get(n.health, "/readyz").is_some_and(|(c, _)| c != 200)
    });
    poll_until("waiting for the bin dir, said", LONG, || {
        p.stderr()
            .contains("has mode 0644, not executable by its owner")
            && p.stderr().contains("waiting for a change in the bin dir")
    });
    fs::set_permissions(&bin, fs::Permissions::from_mode(0o755)).unwrap();
    n.wait_ready(&p);
    p.signal(Signal::SIGTERM);
    assert!(p.wait_exit(LONG).success());
}

#[test]
fn start_sweeps_our_temp_files_but_not_a_primarys_fresh_one() {
    let n = Node::new("sweep");
    n.write_primary(1);
    let ours = n.conf.join(format!("{PRIMARY}.tmp.1.7"));
    let go_fresh = n.conf.join(format!("{PRIMARY}.tmp.4242"));
    let go_old = n.conf.join(format!("{PRIMARY}.tmp.77"));
    let kc_tmp = n.run.join("istio-cni-kubeconfig.tmp.1.3");
    for p in [&ours, &go_fresh, &go_old, &kc_tmp] {
        fs::write(p, b"partial").unwrap();
    }
    let f = fs::File::options().write(true).open(&go_old).unwrap();
    f.set_modified(std::time::SystemTime::now() - Duration::from_secs(600))
        .unwrap();
    drop(f);
    let mut p = n.start(&[], &[], "stderr");
    n.wait_ready(&p);
    assert!(
        !ours.exists() && !go_old.exists() && !kc_tmp.exists(),
        "{:?}",
        names(&n.conf)
    );
    assert!(
        go_fresh.exists(),
        "a fresh temp file of another writer is left alone"
    );
    p.signal(Signal::SIGTERM);
    assert!(p.wait_exit(LONG).success());
}

// A higher-priority config appearing (followed without CNI_CONF_NAME, not ready when pinned) is covered
// by tests/install_select_process.rs: master's pin-and-warn is a deviation we reject (README).

#[test]
fn native_nftables_mode_writes_the_flag_and_probes_no_iptables_backend() {
    // The chart's `global.nativeNftables=true` (conformance chart/nftables.yaml) sets NATIVE_NFTABLES=true.
    let n = Node::new("nft");
    n.write_primary(5);
    let mut p = n.start(&[("NATIVE_NFTABLES", "true")], &["--once"], "stderr-nft");
    assert!(p.wait_exit(LONG).success(), "{}", p.stderr());
    let primary = fs::read_to_string(n.primary()).unwrap();
    assert!(primary.contains(r#""native_nftables": true"#), "{primary}");
    // The plugin programs nf_tables over netlink in this mode: no iptables backend is probed or recorded.
    assert!(!n.run.join("iptables-backend").exists(), "{}", p.stderr());
}
