//! The one support tree of the integration tests (`mod support;` in each entry file: `tests/unprivileged.rs`,
//! `tests/root.rs`, `tests/conformance.rs`). Here: root check, unique names, temp dirs,
//! the conformance vectors, our binary, netns, exec a plugin as a runtime does, JSON comparison, ports,
//! polling, base64. Below: [`install`] (installer nodes and vectors), [`kube`] (clients for the API double),
//! [`repair`] (the agent and its vectors), [`audit`] (the audit's end-to-end harness), [`e2e`] (a node with
//! pods and traffic), [`traffic`] (what a redirected pod's traffic must show), [`monitoring`] (the
//! monitoring kit, promtool, a real Prometheus).
//!
//! Root-only tests start with `if !crate::support::require_root() { return; }`.
#![allow(dead_code, unused_imports)]

use std::ffi::OsStr;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

pub mod audit;
pub mod cmd;
pub mod e2e;
pub mod install;
pub mod kube;
pub mod monitoring;
pub mod podcache;
pub mod prometheus;
pub mod repair;
pub mod traffic;
pub mod xt;

pub use cmd::{sh, sh_ok};
pub use istio_cni::json::{Number, Object, Value};
pub use kube_double::b64;

/// The environment variable that lets root-only tests skip (with a note) instead of failing when not root.
pub const SKIP_ROOT_ENV: &str = "ISTIO_CNI_SKIP_ROOT_TESTS";
/// Where Debian's `containernetworking-plugins` puts `ptp`, `host-local`, `bridge`, ...
pub const DEBIAN_CNI_DIR: &str = "/usr/lib/cni";
/// The PATH every exec'd plugin gets (a runtime passes its own; ours must find iptables-restore in /usr/sbin).
pub const PLUGIN_PATH_ENV: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/// How long one plugin invocation may run before the test kills it and fails.
pub const PLUGIN_TIMEOUT: Duration = Duration::from_secs(120);

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// A name unique in this machine for this run: `<prefix>-<pid>-<n>` (at most 15 chars of prefix kept).
pub fn unique_name(prefix: &str) -> String {
    let p: String = prefix.chars().take(15).collect();
    format!(
        "{p}-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// True when running as root; when not: skips (returns false, prints a note) if `ISTIO_CNI_SKIP_ROOT_TESTS=1`, else panics.
pub fn require_root() -> bool {
    if nix::unistd::geteuid().is_root() {
        return true;
    }
    if std::env::var(SKIP_ROOT_ENV).as_deref() == Ok("1") {
        eprintln!("note: skipping a root-only test ({SKIP_ROOT_ENV}=1 and not root)");
        return false;
    }
    panic!(
        "this test needs root (it creates network namespaces and runs real CNI plugins); run it as root, \
         or set {SKIP_ROOT_ENV}=1 to skip root-only tests"
    );
}

/// The conformance vectors: `$CONFORMANCE_DIR`, else `<crate>/../shared/conformance`; panics loudly when absent.
pub fn conformance_dir() -> PathBuf {
    let dir = match std::env::var_os("CONFORMANCE_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/conformance"),
    };
    if !dir.is_dir() {
        panic!(
            "conformance vectors not found at {} (set CONFORMANCE_DIR, or clone the repository next to \
             ../shared); they are never copied into the repository",
            dir.display()
        );
    }
    dir
}

/// The `istio-cni-node` test build of our binary (cargo builds it for integration tests).
pub fn our_binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_istio-cni-node"))
}

/// A Debian reference plugin, e.g. `debian_plugin("ptp")`; panics with a hint when the package is missing.
pub fn debian_plugin(name: &str) -> PathBuf {
    let p = Path::new(DEBIAN_CNI_DIR).join(name);
    if !p.is_file() {
        panic!(
            "{} is missing: install Debian's containernetworking-plugins (run scripts/setup as root)",
            p.display()
        );
    }
    p
}

/// A temporary directory (0700, under `$TMPDIR`), removed with its contents on drop.
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    /// Creates `$TMPDIR/istio-cni-test-<prefix>-<pid>-<n>`.
    pub fn new(prefix: &str) -> TempDir {
        let path = std::env::temp_dir().join(format!("istio-cni-test-{}", unique_name(prefix)));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path)
            .unwrap_or_else(|e| panic!("create temp dir {}: {e}", path.display()));
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o700))
            .unwrap_or_else(|e| panic!("chmod temp dir {}: {e}", path.display()));
        TempDir { path }
    }
    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }
    /// `<dir>/<rel>`.
    pub fn join(&self, rel: impl AsRef<Path>) -> PathBuf {
        self.path.join(rel)
    }
    /// Writes `<dir>/<rel>` (creating parent directories) and returns its path.
    pub fn write(&self, rel: impl AsRef<Path>, contents: impl AsRef<[u8]>) -> PathBuf {
        let p = self.path.join(rel);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(&p, contents).unwrap_or_else(|e| panic!("write {}: {e}", p.display()));
        p
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// A CNI bin directory as a runtime sees it: `istio-cni` (and the other applet names) as symlinks to our
/// binary; [`PluginDir::cni_path`] also lists Debian's plugins.
pub struct PluginDir {
    pub dir: TempDir,
}

/// The applet names a node has as links to the one binary.
pub const APPLET_LINKS: &[&str] = &[
    "istio-cni",
    "install-cni",
    "istio-cni-repair",
    "istio-validation",
];

impl PluginDir {
    /// A new temp dir with a symlink per applet name to [`our_binary`].
    pub fn new() -> PluginDir {
        let dir = TempDir::new("bin");
        for name in APPLET_LINKS {
            std::os::unix::fs::symlink(our_binary(), dir.join(name))
                .unwrap_or_else(|e| panic!("symlink {name}: {e}"));
        }
        PluginDir { dir }
    }
    /// `<dir>/istio-cni`, the path a runtime execs.
    pub fn istio_cni(&self) -> PathBuf {
        self.dir.join("istio-cni")
    }
    /// `<dir>/<applet>`.
    pub fn applet(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
    /// The `CNI_PATH` a runtime would pass: this dir, then Debian's plugin dir.
    pub fn cni_path(&self) -> String {
        format!("{}:{DEBIAN_CNI_DIR}", self.dir.path().display())
    }
}

impl Default for PluginDir {
    fn default() -> Self {
        Self::new()
    }
}

/// The CNI parameters of one invocation; `None` leaves a variable unset, `Some("")` sets it empty.
#[derive(Debug, Clone, Default)]
pub struct CniEnv {
    pub command: Option<String>,
    pub container_id: Option<String>,
    pub netns: Option<String>,
    pub ifname: Option<String>,
    pub args: Option<String>,
    pub path: Option<String>,
    /// Further variables (e.g. `RUST_LOG`), appended after the CNI ones.
    pub extra: Vec<(String, String)>,
}

impl CniEnv {
    /// What a runtime sends for `command` on one attachment: CONTAINERID, NETNS, IFNAME=eth0, PATH; no ARGS.
    pub fn new(command: &str, container_id: &str, netns: &str, cni_path: &str) -> CniEnv {
        CniEnv {
            command: Some(command.into()),
            container_id: Some(container_id.into()),
            netns: Some(netns.into()),
            ifname: Some("eth0".into()),
            args: None,
            path: Some(cni_path.into()),
            extra: Vec::new(),
        }
    }
    /// libcni's `GetVersionInfo` environment: VERSION with the dummy NETNS/IFNAME/PATH.
    pub fn version_probe() -> CniEnv {
        CniEnv {
            command: Some("VERSION".into()),
            container_id: None,
            netns: Some("dummy".into()),
            ifname: Some("dummy".into()),
            args: None,
            path: Some("dummy".into()),
            extra: Vec::new(),
        }
    }
    /// The same with `CNI_COMMAND` replaced.
    pub fn with_command(&self, command: &str) -> CniEnv {
        CniEnv {
            command: Some(command.into()),
            ..self.clone()
        }
    }
    /// The same with `CNI_ARGS` set.
    pub fn with_args(&self, args: &str) -> CniEnv {
        CniEnv {
            args: Some(args.into()),
            ..self.clone()
        }
    }
    /// The variables in runtime order (libcni `AsEnv`): COMMAND, CONTAINERID, NETNS, ARGS, IFNAME, PATH, extras.
    pub fn vars(&self) -> Vec<(String, String)> {
        let mut v = Vec::new();
        for (k, val) in [
            ("CNI_COMMAND", &self.command),
            ("CNI_CONTAINERID", &self.container_id),
            ("CNI_NETNS", &self.netns),
            ("CNI_ARGS", &self.args),
            ("CNI_IFNAME", &self.ifname),
            ("CNI_PATH", &self.path),
        ] {
            if let Some(val) = val {
                v.push((k.to_string(), val.clone()));
            }
        }
        v.extend(self.extra.iter().cloned());
        v
    }
}

/// What one plugin invocation produced.
#[derive(Debug, Clone)]
pub struct PluginOutput {
    /// Exit code; -1 when killed by a signal.
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl PluginOutput {
    /// Parses stdout as one JSON document, panicking with the whole output when it is not.
    pub fn json(&self) -> Value {
        miniserde::json::from_str(&self.stdout)
            .unwrap_or_else(|_| panic!("stdout is not one JSON document:\n{self}"))
    }
    /// Parses stdout as a JSON object.
    pub fn object(&self) -> Object {
        match self.json() {
            Value::Object(o) => o,
            _ => panic!("stdout is not a JSON object:\n{self}"),
        }
    }
    /// Panics (showing stdout and stderr) unless the exit code is 0.
    pub fn assert_success(&self) -> &Self {
        assert_eq!(self.code, 0, "plugin failed:\n{self}");
        self
    }
    /// Asserts a CNI error: non-zero exit, stdout exactly one error object with this `code`; returns its `msg`.
    pub fn assert_cni_error(&self, code: u64) -> String {
        assert_ne!(
            self.code, 0,
            "expected failure with CNI code {code}:\n{self}"
        );
        let o = self.object();
        assert_eq!(
            o.get("code").and_then(as_u64),
            Some(code),
            "wrong CNI error code:\n{self}"
        );
        match o.get("msg") {
            Some(Value::String(m)) if !m.is_empty() => m.clone(),
            _ => panic!("CNI error without a msg:\n{self}"),
        }
    }
}

impl std::fmt::Display for PluginOutput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit code: {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

/// Execs a CNI plugin as a runtime does: argv[0] = `argv0`, a clean environment (PATH + the CNI vars), `stdin`.
pub fn run_plugin(bin: &Path, argv0: &str, env: &CniEnv, stdin: &[u8]) -> PluginOutput {
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new(bin);
    cmd.arg0(argv0);
    run_cmd(cmd, env, stdin)
}

/// Like [`run_plugin`] (argv[0] = the path), but inside network namespace `ns` (a runtime in a "node" netns).
pub fn run_plugin_in(ns: &Netns, bin: &Path, env: &CniEnv, stdin: &[u8]) -> PluginOutput {
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", ns.name()]).arg(bin);
    run_cmd(cmd, env, stdin)
}

/// Runs `cmd` with exactly PATH + `env`, feeding `stdin`, capturing output, killing it after [`PLUGIN_TIMEOUT`].
pub fn run_cmd(mut cmd: Command, env: &CniEnv, stdin: &[u8]) -> PluginOutput {
    cmd.env_clear()
        .env("PATH", PLUGIN_PATH_ENV)
        .envs(env.vars())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let what = format!("{cmd:?}");
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("exec {what}: {e}"));
    let mut sin = child.stdin.take().unwrap();
    let input = stdin.to_vec();
    // The plugin may stop reading early (a size limit): a broken pipe here is not an error.
    let writer = std::thread::spawn(move || {
        let _ = sin.write_all(&input);
    });
    let out_r = reader(child.stdout.take().unwrap());
    let err_r = reader(child.stderr.take().unwrap());
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > PLUGIN_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} did not finish within {PLUGIN_TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let _ = writer.join();
    PluginOutput {
        code: status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out_r.join().unwrap()).into_owned(),
        stderr: String::from_utf8_lossy(&err_r.join().unwrap()).into_owned(),
    }
}

fn reader<R: Read + Send + 'static>(mut r: R) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = r.read_to_end(&mut buf);
        buf
    })
}

/// A named network namespace (`ip netns add`), deleted on drop. Needs root.
pub struct Netns {
    name: String,
}

impl Netns {
    /// Creates `/run/netns/<prefix>-<pid>-<n>` with `lo` up.
    pub fn new(prefix: &str) -> Netns {
        let name = unique_name(prefix);
        sh_ok("ip", &["netns", "add", &name]);
        let ns = Netns { name };
        ns.exec_ok(&["ip", "link", "set", "lo", "up"]);
        ns
    }
    /// The namespace's name.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// `/run/netns/<name>`, what a runtime passes as `CNI_NETNS`.
    pub fn path(&self) -> String {
        format!("/run/netns/{}", self.name)
    }
    /// Runs `argv` inside the namespace (`ip netns exec`) and returns its output.
    pub fn exec<S: AsRef<OsStr>>(&self, argv: &[S]) -> Output {
        let mut a: Vec<&OsStr> = vec![
            OsStr::new("netns"),
            OsStr::new("exec"),
            OsStr::new(&self.name),
        ];
        a.extend(argv.iter().map(|s| s.as_ref()));
        sh("ip", &a)
    }
    /// Like [`Netns::exec`] but panics unless it exits 0; returns stdout.
    pub fn exec_ok<S: AsRef<OsStr>>(&self, argv: &[S]) -> String {
        let mut a: Vec<&OsStr> = vec![
            OsStr::new("netns"),
            OsStr::new("exec"),
            OsStr::new(&self.name),
        ];
        a.extend(argv.iter().map(|s| s.as_ref()));
        sh_ok("ip", &a)
    }
}

impl Netns {
    /// `prog` (an `iptables-save` variant) inside the namespace, without comments and counters, for
    /// comparing two dumps.
    pub fn saved_rules(&self, prog: &str) -> String {
        cmd::without_counters(&self.exec_ok(&[prog]))
    }
}

impl Netns {
    /// Deletes, by its handle, the first rule of `inet <table> <chain>` whose listing contains `text`.
    pub fn nft_delete_rule(&self, table: &str, chain: &str, text: &str) {
        let listing = self.exec_ok(&["nft", "-a", "list", "chain", "inet", table, chain]);
        let handle = listing
            .lines()
            .find(|l| l.contains(text))
            .and_then(|l| l.rsplit("# handle ").next())
            .unwrap_or_else(|| panic!("no rule with {text} in:\n{listing}"))
            .trim()
            .to_string();
        self.exec_ok(&[
            "nft", "delete", "rule", "inet", table, chain, "handle", &handle,
        ]);
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = sh("ip", &["netns", "del", &self.name]);
    }
}

/// A JSON number as u64, if it is one.
pub fn as_u64(v: &Value) -> Option<u64> {
    match v {
        Value::Number(Number::U64(n)) => Some(*n),
        Value::Number(Number::I64(n)) if *n >= 0 => Some(*n as u64),
        _ => None,
    }
}

/// Parses JSON text, panicking with the text when it is invalid.
pub fn parse_json(text: &str) -> Value {
    miniserde::json::from_str(text).unwrap_or_else(|_| panic!("not valid JSON:\n{text}"))
}

/// Compact JSON with sorted keys, for comparisons and messages.
pub fn to_json(v: &Value) -> String {
    istio_cni::json::to_compact(v)
}

/// Drops null, "", [] and {} members recursively (Go's `omitempty`), so results compare by meaning.
pub fn normalize_json(v: &Value) -> Value {
    fn empty(v: &Value) -> bool {
        match v {
            Value::Null => true,
            Value::String(s) => s.is_empty(),
            Value::Array(a) => a.is_empty(),
            Value::Object(o) => o.is_empty(),
            _ => false,
        }
    }
    match v {
        Value::Object(o) => {
            let mut out = Object::new();
            for (k, x) in o.iter() {
                let n = normalize_json(x);
                if !empty(&n) {
                    out.insert(k.clone(), n);
                }
            }
            Value::Object(out)
        }
        Value::Array(a) => {
            let mut out = istio_cni::json::Array::new();
            for x in a.iter() {
                out.push(normalize_json(x));
            }
            Value::Array(out)
        }
        other => other.clone(),
    }
}

/// Asserts two JSON values are equal after [`normalize_json`], printing both on failure.
pub fn assert_json_eq(got: &Value, want: &Value, what: &str) {
    let (g, w) = (
        to_json(&normalize_json(got)),
        to_json(&normalize_json(want)),
    );
    assert_eq!(g, w, "{what}: JSON differs\n got: {g}\nwant: {w}");
}

/// A free TCP port on loopback for a server a test starts, taken below the kernel's ephemeral range
/// (`ip_local_port_range`): a port the kernel handed out for `bind(0)` and that was released can be given
/// again as the source port of any loopback connection (the suites make thousands) before the server binds
/// it ("Address already in use"). Ports here are only ever chosen on purpose: each test process walks its own
/// stretch (from its pid), never repeats one, and skips ports something holds.
pub fn free_port() -> u16 {
    const FIRST: u32 = 20_000;
    const SPAN: u32 = 12_000;
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u32>().ok())
        .unwrap_or(32_768);
    let (first, span) = if low >= FIRST + SPAN {
        (FIRST, SPAN)
    } else {
        (1_024, low.saturating_sub(1_024).max(1))
    };
    let start = std::process::id().wrapping_mul(7_919) % span;
    for _ in 0..span {
        let n = NEXT.fetch_add(1, Ordering::Relaxed) as u32;
        let port = (first + (start + n) % span) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free loopback port between {first} and {}", first + span)
}

/// Polls `f` every few ms until it holds; panics with `what` after `limit` (a bound, not a timing assertion).
pub fn poll_until(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// The words of `s` (split on white space): a command line written as upstream's docs write it.
pub fn words(s: &str) -> Vec<&str> {
    s.split_whitespace().collect()
}

/// `istio-cni explain --nft ARGS` in a clean environment: the nftables script it prints, without its `#`
/// comment lines. Panics naming `what` when it fails.
pub fn explain_nft_script<S: AsRef<OsStr>>(what: &str, args: &[S]) -> String {
    let out = Command::new(our_binary())
        .args(["istio-cni", "explain", "--nft"])
        .args(args)
        .env_clear()
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect()
}
