//! Installer settings through the real process: the differential cases whose difference was a setting
//! or number formatting (run as their README says: `before/` in a conf dir, env.json's env and args,
//! ready, compare with `after/` byte for byte, SIGTERM, compare with `after-cleanup/`), and the log
//! format (`--log_as_json`, scoped levels) of the installer's own and the relayed plugin lines.

use crate::support::install::*;
use istio_cni::json::{self, Value};
use nix::sys::signal::Signal;
use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

const LONG: Duration = Duration::from_secs(15);
/// The run dir the vectors carry in place of the harness's.
const NEUTRAL_RUN_DIR: &str = "/var/run/istio-cni";

fn get(port: u16, path: &str) -> Option<u16> {
    let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    write!(c, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").ok()?;
    let mut s = String::new();
    c.read_to_string(&mut s).ok()?;
    s.get(9..12)?.parse().ok()
}

struct Dirs {
    root: PathBuf,
    conf: PathBuf,
    run: PathBuf,
    health: u16,
}

impl Dirs {
    fn new(tag: &str) -> Dirs {
        let root = tempdir(tag);
        let d = Dirs {
            conf: root.join("conf"),
            run: root.join("run"),
            root,
            health: free_port(),
        };
        let sa = d.root.join("sa");
        for p in [&d.conf, &d.run, &sa, &d.root.join("bin")] {
            fs::create_dir_all(p).unwrap();
        }
        fs::write(sa.join("token"), "token-0").unwrap();
        let ca = conformance_dir().join("kubeconfig/master-tls-verify/ca.crt");
        fs::copy(ca, sa.join("ca.crt")).unwrap();
        d
    }

    /// The case's env with the harness paths (conf dir, run dir, bin dir, service account, ports).
    fn env(&self, case_env: &[(String, String)]) -> Vec<(String, String)> {
        let mut e = case_env.to_vec();
        let (bin, sa) = (self.root.join("bin"), self.root.join("sa"));
        let harness = installer_env(&InstallerDirs {
            conf: &self.conf,
            run: &self.run,
            bin: &bin,
            sa: &sa,
            health: self.health,
            metrics: free_port(),
        });
        set_env(&mut e, &harness);
        e
    }

    fn wait_ready(&self, p: &Proc) {
        let deadline = std::time::Instant::now() + LONG;
        while get(self.health, "/readyz") != Some(200) {
            assert!(
                std::time::Instant::now() < deadline,
                "not ready:\n{}",
                p.stderr()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Dirs {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.root);
    }
}

fn case_dir(name: &str) -> PathBuf {
    conformance_dir().join("differential/install").join(name)
}

/// Every file of `want` (the run dir substituted back) equals the file in `got`, and no other file.
fn same_dir(want: &Path, got: &Path, run_dir: &Path, files: &[String], what: &str) {
    assert_eq!(&names(got), files, "{what}: file names");
    for f in files {
        let w = fs::read_to_string(want.join(f))
            .unwrap()
            .replace(NEUTRAL_RUN_DIR, &run_dir.display().to_string());
        let g = fs::read_to_string(got.join(f)).unwrap();
        assert_eq!(g, w, "{what}: {f}");
    }
}

/// Runs one differential install case; returns its dirs for further checks (before SIGTERM's effects
/// are compared, the kubeconfig mode is read).
fn run_case(name: &str, extra_check: impl Fn(&Dirs, &json::Object)) {
    let dir = case_dir(name);
    let env_json = read_json(&dir.join("env.json"));
    let expect = read_json(&dir.join("expect.json"));
    let d = Dirs::new(name);
    copy_dir(&dir.join("before"), &d.conf, 0o644);
    let case_env: Vec<(String, String)> = match env_json.get("env") {
        Some(Value::Object(o)) => o
            .iter()
            .map(|(k, v)| match v {
                Value::String(s) => (k.clone(), s.clone()),
                other => (k.clone(), json::to_compact(other)),
            })
            .collect(),
        _ => Vec::new(),
    };
    let args = strs(&env_json, "args");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut p = spawn_installer(&d.env(&case_env), &args, &d.root.join("stderr"));
    d.wait_ready(&p);
    same_dir(
        &dir.join("after"),
        &d.conf,
        &d.run,
        &strs(&expect, "after_files"),
        &format!("{name}: after install"),
    );
    extra_check(&d, &expect);
    p.signal(Signal::SIGTERM);
    assert!(p.wait_exit(LONG).success(), "{}", p.stderr());
    same_dir(
        &dir.join("after-cleanup"),
        &d.conf,
        &d.run,
        &strs(&expect, "after_cleanup_files"),
        &format!("{name}: after cleanup"),
    );
}

#[test]
fn differential_number_formatting_go_marshal() {
    run_case("number-formatting-go-marshal", |_, _| {});
}

#[test]
fn differential_ambient_enablement_selector_chart_default() {
    run_case("ambient-enablement-selector-chart-default", |_, _| {});
}

#[test]
fn differential_kubeconfig_mode_decimal_420() {
    run_case("kubeconfig-mode-decimal-420", |d, expect| {
        let want = u32::from_str_radix(s(expect, "kubeconfig_mode"), 8).unwrap();
        assert_eq!(mode(&d.run.join("istio-cni-kubeconfig")), want);
    });
}

/// `--log_as_json` with scoped levels: every installer line is one JSON object with Istio's field names;
/// each scope has its own level (`install` info lines shown, `default` info lines not), and relayed
/// plugin lines follow the `cni-plugin` scope (here warn: the info line is dropped).
#[test]
fn json_log_lines_and_scoped_levels() {
    let d = Dirs::new("jsonlog");
    let primary = case_dir("number-formatting-go-marshal").join("before");
    copy_dir(&primary, &d.conf, 0o644);
    let env = d.env(&[("RUST_LOG".into(), String::new())]);
    let mut p = spawn_installer(
        &env,
        &[
            "--log_as_json",
            "--log_output_level=default:warn,install:info,cni-plugin:warn",
        ],
        &d.root.join("stderr"),
    );
    d.wait_ready(&p);
    let sock = d.run.join("log.sock");
    poll_until("log.sock", LONG, || sock.exists());
    let c = std::os::unix::net::UnixDatagram::unbound().unwrap();
    c.send_to(br#"{"level":"info","msg":"plugin info line"}"#, &sock)
        .unwrap();
    c.send_to(br#"{"level":"warn","msg":"plugin warn line"}"#, &sock)
        .unwrap();
    poll_until("relayed warn line", LONG, || {
        p.stderr().contains("plugin warn line")
    });
    p.signal(Signal::SIGTERM);
    assert!(p.wait_exit(LONG).success());
    let err = p.stderr();
    assert!(!err.contains("plugin info line"), "{err}");
    let mut install_info = 0;
    for line in err.lines().filter(|l| !l.trim().is_empty()) {
        let o = json::parse_object(line, "log line").unwrap_or_else(|e| panic!("{e}: {line}"));
        for k in ["time", "level", "scope", "msg"] {
            assert!(matches!(o.get(k), Some(Value::String(_))), "{k} in {line}");
        }
        match (s(&o, "scope"), s(&o, "level")) {
            ("install", "info") => install_info += 1,
            ("default", "info") | ("default", "debug") => panic!("default:warn let through {line}"),
            _ => {}
        }
        if s(&o, "msg") == "plugin warn line" {
            assert_eq!((s(&o, "scope"), s(&o, "level")), ("cni-plugin", "warn"));
        }
    }
    assert!(install_info > 0, "install:info gave no info line:\n{err}");
}

/// A bare `--log_output_level=warn` drops the installer's info lines; text lines stay text.
#[test]
fn bare_level_applies_to_the_installer() {
    let d = Dirs::new("warnlog");
    copy_dir(
        &case_dir("number-formatting-go-marshal").join("before"),
        &d.conf,
        0o644,
    );
    let env = d.env(&[("RUST_LOG".into(), String::new())]);
    let mut p = spawn_installer(&env, &["--log_output_level=warn"], &d.root.join("stderr"));
    d.wait_ready(&p);
    p.signal(Signal::SIGTERM);
    assert!(p.wait_exit(LONG).success());
    let err = p.stderr();
    assert!(!err.contains(" INFO "), "{err}");
    assert!(!err.trim_start().starts_with('{'), "{err}");
}

/// The seed-era template settings stop the installer at start with a message naming their replacement.
#[test]
fn legacy_template_refused_at_start() {
    let d = Dirs::new("legacy");
    let env = d.env(&[(
        "CNI_NETWORK_CONFIG".into(),
        r#"{"type":"istio-cni","log_level":"__LOG_LEVEL__"}"#.into(),
    )]);
    let mut p = spawn_installer(&env, &[], &d.root.join("stderr"));
    let st = p.wait_exit(LONG);
    assert_eq!(st.code(), Some(2), "{}", p.stderr());
    let err = p.stderr();
    assert!(
        err.contains("CNI_NETWORK_CONFIG") && err.contains("EXCLUDE_NAMESPACES"),
        "{err}"
    );
    assert!(names(&d.conf).is_empty());
}

/// README deviation: an unmergeable primary (named explicitly, so selection cannot skip it) keeps the
/// installer up and not ready, retrying when the file changes; upstream exits 1 (a restart loop).
#[test]
fn unmergeable_primary_stays_up_not_ready() {
    let d = Dirs::new("unmergeable");
    fs::write(d.conf.join("10-bad.conflist"), "Not JSON at all\n").unwrap();
    let env = d.env(&[("CNI_CONF_NAME".into(), "10-bad.conflist".into())]);
    let mut p = spawn_installer(&env, &[], &d.root.join("stderr"));
    poll_until("the merge error logged", LONG, || {
        p.stderr().contains("10-bad.conflist")
    });
    // Still running, and not ready, a while after the failure.
    std::thread::sleep(Duration::from_millis(500));
    assert!(p.child.try_wait().unwrap().is_none(), "{}", p.stderr());
    assert_eq!(get(d.health, "/readyz"), Some(503));
    assert_eq!(
        fs::read_to_string(d.conf.join("10-bad.conflist")).unwrap(),
        "Not JSON at all\n"
    );
    let primary = case_dir("number-formatting-go-marshal").join("before/10-calico.conflist");
    atomic_write(
        &d.conf.join("10-bad.conflist"),
        &fs::read(primary).unwrap(),
        0o644,
    );
    d.wait_ready(&p);
    p.signal(Signal::SIGTERM);
    assert!(p.wait_exit(LONG).success());
}

/// README deviation: ISTIO_OWNED_CNI_CONFIG=true without ambient writes the merged list to
/// 02-istio-cni.conflist and never touches the primary, also on cleanup (upstream edits the primary in
/// place and its cleanup then deletes the primary).
#[test]
fn istio_owned_without_ambient_keeps_the_primary() {
    let d = Dirs::new("owned");
    let before = case_dir("number-formatting-go-marshal").join("before");
    copy_dir(&before, &d.conf, 0o644);
    let primary = fs::read(d.conf.join("10-calico.conflist")).unwrap();
    let env = d.env(&[
        ("ISTIO_OWNED_CNI_CONFIG".into(), "true".into()),
        ("AMBIENT_ENABLED".into(), "false".into()),
    ]);
    let mut p = spawn_installer(&env, &[], &d.root.join("stderr"));
    d.wait_ready(&p);
    assert_eq!(
        names(&d.conf),
        vec!["02-istio-cni.conflist", "10-calico.conflist"]
    );
    assert_eq!(
        fs::read(d.conf.join("10-calico.conflist")).unwrap(),
        primary
    );
    let owned = fs::read_to_string(d.conf.join("02-istio-cni.conflist")).unwrap();
    assert!(owned.contains("\"type\": \"istio-cni\"") && owned.contains("\"type\": \"calico\""));
    p.signal(Signal::SIGTERM);
    assert!(p.wait_exit(LONG).success());
    assert_eq!(names(&d.conf), vec!["10-calico.conflist"]);
    assert_eq!(
        fs::read(d.conf.join("10-calico.conflist")).unwrap(),
        primary
    );
}

/// The real plugin sends each log record to the installer's relay socket as `{"level":..,"msg":..}`, the
/// form the installer re-logs under the `cni-plugin` scope with its level.
#[test]
fn plugin_sends_level_and_msg_to_the_relay() {
    let d = Dirs::new("plugin-relay");
    let sock = std::os::unix::net::UnixDatagram::bind(d.run.join("log.sock")).unwrap();
    sock.set_read_timeout(Some(LONG)).unwrap();
    let dir = crate::support::PluginDir::new();
    let stdin = format!(
        r#"{{"cniVersion":"1.0.0","name":"n","type":"istio-cni","plugin_log_level":"debug",
        "cni_agent_run_dir":"{}","exclude_namespaces":["kube-system"]}}"#,
        d.run.display()
    );
    let env = crate::support::CniEnv::new("ADD", "c0ffee02", "/run/netns/absent", &dir.cni_path())
        .with_args("K8S_POD_NAMESPACE=kube-system;K8S_POD_NAME=p;IgnoreUnknown=1");
    let bin = dir.istio_cni();
    let o = crate::support::run_plugin(&bin, bin.to_str().unwrap(), &env, stdin.as_bytes());
    o.assert_success();
    let mut buf = vec![0u8; 65536];
    let n = sock.recv(&mut buf).expect("no datagram from the plugin");
    let text = String::from_utf8(buf[..n].to_vec()).unwrap();
    let rec = json::parse_object(&text, "datagram").unwrap();
    let level = s(&rec, "level");
    assert!(
        ["debug", "info", "warn", "error"].contains(&level),
        "{text}"
    );
    assert!(!s(&rec, "msg").is_empty(), "{text}");
    assert_eq!(
        istio_cni::logging::parse_relayed(text.as_bytes()).1,
        s(&rec, "msg")
    );
}

/// FORCE_IPTABLES_BINARY: the installer records that backend for the plugin instead of detecting the
/// node's (here the test host's, which would record `nft` or `plain`).
#[test]
fn forced_iptables_binary_is_recorded() {
    let d = Dirs::new("forced-backend");
    copy_dir(
        &case_dir("number-formatting-go-marshal").join("before"),
        &d.conf,
        0o644,
    );
    let env = d.env(&[("FORCE_IPTABLES_BINARY".into(), "iptables-legacy".into())]);
    let mut p = spawn_installer(&env, &[], &d.root.join("stderr"));
    d.wait_ready(&p);
    assert_eq!(
        fs::read_to_string(d.run.join("iptables-backend")).unwrap(),
        "legacy\n"
    );
    assert!(p.stderr().contains("forced by FORCE_IPTABLES_BINARY"));
    p.signal(Signal::SIGTERM);
    assert!(p.wait_exit(LONG).success());
}

/// The chart-default differential case's env with one setting changed.
fn chart_env_with(extra: &[(&str, &str)]) -> Vec<(String, String)> {
    let env_json =
        read_json(&case_dir("ambient-enablement-selector-chart-default").join("env.json"));
    let mut env: Vec<(String, String)> = match env_json.get("env") {
        Some(Value::Object(o)) => o
            .iter()
            .filter_map(|(k, v)| match v {
                Value::String(s) => Some((k.clone(), s.clone())),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    };
    set_env(&mut env, extra);
    env
}

/// Differential round 3, item 1: `ENABLE_AMBIENT_DETECTION_RETRY=true` is written into the entry as given,
/// as upstream writes it: upstream's chart-default output with that one value flipped, byte for byte, and
/// the standalone file likewise.
#[test]
fn ambient_detection_retry_is_written_as_given() {
    let case = case_dir("ambient-enablement-selector-chart-default");
    let d = Dirs::new("detection-retry");
    copy_dir(&case.join("before"), &d.conf, 0o644);
    let env = d.env(&chart_env_with(&[(
        "ENABLE_AMBIENT_DETECTION_RETRY",
        "true",
    )]));
    let mut p = spawn_installer(&env, &["--log_output_level=info"], &d.root.join("stderr"));
    d.wait_ready(&p);
    let golden = fs::read_to_string(case.join("after/10-calico.conflist"))
        .unwrap()
        .replace(NEUTRAL_RUN_DIR, &d.run.display().to_string());
    let want = golden.replacen(
        "\"enable_ambient_detection_retry\": false",
        "\"enable_ambient_detection_retry\": true",
        1,
    );
    assert_ne!(want, golden, "the golden carries the setting");
    assert_eq!(
        fs::read_to_string(d.conf.join("10-calico.conflist")).unwrap(),
        want
    );
    p.signal(Signal::SIGTERM);
    assert!(p.wait_exit(LONG).success(), "{}", p.stderr());

    let d = Dirs::new("detection-retry-standalone");
    let env = d.env(&chart_env_with(&[
        ("ENABLE_AMBIENT_DETECTION_RETRY", "true"),
        ("CHAINED_CNI_PLUGIN", "false"),
    ]));
    let mut p = spawn_installer(&env, &[], &d.root.join("stderr"));
    d.wait_ready(&p);
    let text = fs::read_to_string(d.conf.join("YYY-istio-cni.conf")).unwrap();
    assert!(
        text.ends_with("  \"enable_ambient_detection_retry\": true\n}\n"),
        "{text}"
    );
    p.signal(Signal::SIGTERM);
    assert!(p.wait_exit(LONG).success(), "{}", p.stderr());
}

/// Differential round 3, item 2 (README deviation): `CHAINED_CNI_PLUGIN=""` chains into the primary (upstream
/// 1.30.3 writes a standalone `YYY-istio-cni.conf`) and logs a warning naming the variable.
#[test]
fn empty_chained_cni_plugin_chains_and_warns() {
    let case = case_dir("ambient-enablement-selector-chart-default");
    let d = Dirs::new("chained-empty");
    copy_dir(&case.join("before"), &d.conf, 0o644);
    let env = d.env(&chart_env_with(&[("CHAINED_CNI_PLUGIN", "")]));
    let mut p = spawn_installer(&env, &["--log_output_level=info"], &d.root.join("stderr"));
    d.wait_ready(&p);
    assert_eq!(
        names(&d.conf),
        vec!["10-calico.conflist"],
        "no standalone file"
    );
    let golden = fs::read_to_string(case.join("after/10-calico.conflist"))
        .unwrap()
        .replace(NEUTRAL_RUN_DIR, &d.run.display().to_string());
    assert_eq!(
        fs::read_to_string(d.conf.join("10-calico.conflist")).unwrap(),
        golden
    );
    let err = p.stderr();
    let line = err
        .lines()
        .find(|l| l.contains("\twarn\t") && l.contains("CHAINED_CNI_PLUGIN"))
        .unwrap_or_else(|| panic!("no warning naming CHAINED_CNI_PLUGIN:\n{err}"));
    assert!(
        line.contains("empty") && line.contains("standalone"),
        "{line}"
    );
    p.signal(Signal::SIGTERM);
    assert!(p.wait_exit(LONG).success(), "{}", p.stderr());
}

/// Differential round 3, item 3 (README deviation): SIGTERM while not ready (an empty conf dir: waiting for
/// a primary) is a requested stop, exit 0 after the cleanup; upstream exits 1 ("create CNI config file:
/// context canceled").
#[test]
fn sigterm_while_waiting_for_a_primary_exits_0() {
    let d = Dirs::new("sigterm-waiting");
    let env = d.env(&chart_env_with(&[]));
    let mut p = spawn_installer(&env, &[], &d.root.join("stderr"));
    poll_until("serving, not ready", LONG, || {
        get(d.health, "/readyz") == Some(503)
    });
    poll_until("waiting for a primary", LONG, || {
        p.stderr().contains("Waiting for CNI network config file")
    });
    assert!(
        d.run.join("istio-cni-kubeconfig").exists() && d.root.join("bin/istio-cni").exists(),
        "{}",
        p.stderr()
    );
    p.signal(Signal::SIGTERM);
    let st = p.wait_exit(LONG);
    assert_eq!(st.code(), Some(0), "{}", p.stderr());
    assert!(names(&d.conf).is_empty());
    assert!(!d.run.join("istio-cni-kubeconfig").exists() && !d.root.join("bin/istio-cni").exists());
}
