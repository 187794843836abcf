//! The installer tests' part of the support tree: vector cases, temp dirs, file copies, JSON helpers, the
//! README's deliberate deviations, a tiny YAML reader for the upstream kubeconfig goldens, and running
//! `install-cni` ([`node`]: a node with the installer on it).

pub mod agent_dir;
pub mod cluster;
pub mod node;

pub use super::{conformance_dir, free_port, poll_until};

use istio_cni::json::{self, Value};
use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// All case dirs of `sub` (install or kubeconfig), sorted.
pub fn cases(sub: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = fs::read_dir(conformance_dir().join(sub))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    v.sort();
    v
}

pub fn read_json(p: &Path) -> json::Object {
    json::parse_object(&fs::read_to_string(p).unwrap(), &p.display().to_string()).unwrap()
}

pub fn opt_json(p: &Path) -> Option<json::Object> {
    p.exists().then(|| read_json(p))
}

pub fn s<'a>(o: &'a json::Object, k: &str) -> &'a str {
    json::str_of(o, k).unwrap_or("")
}

pub fn b(o: &json::Object, k: &str) -> bool {
    matches!(o.get(k), Some(Value::Bool(true)))
}

pub fn strs(o: &json::Object, k: &str) -> Vec<String> {
    json::arr_of(o, k)
        .map(|a| {
            a.iter()
                .filter_map(|v| match v {
                    Value::String(s) => Some(s.clone()),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default()
}

static N: AtomicU64 = AtomicU64::new(0);

/// A fresh empty temp dir.
pub fn tempdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "istio-install-test-{tag}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = fs::remove_dir_all(&d);
    fs::create_dir_all(&d).unwrap();
    d
}

/// Copies every file of `from` into `to` with `mode` (vectors are read-only; upstream creates 0644).
pub fn copy_dir(from: &Path, to: &Path, mode: u32) {
    if !from.is_dir() {
        return;
    }
    fs::create_dir_all(to).unwrap();
    for e in fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_file() {
            let dst = to.join(e.file_name());
            fs::write(&dst, fs::read(e.path()).unwrap()).unwrap();
            fs::set_permissions(&dst, fs::Permissions::from_mode(mode)).unwrap();
        }
    }
}

/// Sorted file names of a dir.
pub fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = match fs::read_dir(dir) {
        Ok(rd) => rd
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect(),
        Err(_) => vec![],
    };
    v.sort();
    v
}

pub fn mode(p: &Path) -> u32 {
    fs::metadata(p).unwrap().permissions().mode() & 0o7777
}

/// Compact sorted JSON of a text (for JSON-equality).
pub fn canon(text: &str) -> String {
    json::to_compact(&json::parse(text, "canon").unwrap())
}

/// Deviation 1 of the conformance README: a `.conf` converted to `.conflist` keeps its own cniVersion
/// when it is ≥ 0.3.0. Given upstream's golden and the `.conf` it came from, returns what we must write,
/// and whether the deviation changed anything.
pub fn apply_cni_version_deviation(golden: &str, source_conf: &str) -> (String, bool) {
    let src = json::parse_object(source_conf, "source conf").unwrap();
    let ours =
        istio_cni::install::config::conflist::wrapper_cni_version(json::str_of(&src, "cniVersion"));
    let upstream_line = "\n  \"cniVersion\": \"0.3.1\",\n";
    assert!(
        golden.contains(upstream_line),
        "golden without the 0.3.1 wrapper line"
    );
    if ours == "0.3.1" {
        return (golden.to_string(), false);
    }
    (
        golden.replacen(
            upstream_line,
            &format!("\n  \"cniVersion\": \"{ours}\",\n"),
            1,
        ),
        true,
    )
}

/// One file the runtime falls back to, as we leave it (README deviation "our entry in every file the
/// runtime could fall back to", issue 32): upstream leaves it untouched.
#[derive(Debug, Clone)]
pub struct Fallback {
    /// Its name before the install.
    pub before: String,
    /// Its name with our entry (a single-plugin `.conf`/`.json` becomes its `.conflist`, as a primary does).
    pub name: String,
    /// Its content with our entry.
    pub after: String,
    /// Its content after cleanup (our entry out; a converted file stays a list).
    pub cleaned: String,
}

/// The fallbacks of a conf dir `before` (every valid file but `primary`, in libcni's order, and a list only
/// libcni v1.1 loads sorting first: `select::Listing::older`) with `entry`
/// (our plugin object, as the file we wrote holds it) merged in by the installer's own merge: the
/// primary's bytes stay checked against upstream's goldens; these are the files upstream does not touch.
pub fn fallbacks(before: &Path, primary: &str, entry: &json::Object) -> Vec<Fallback> {
    use istio_cni::install::config::{conflist, libcni, plugin_dir, select};
    let cands = select::list_candidates(before).unwrap();
    let Ok(listing) = select::valid_configs("d", &cands, &|n| plugin_dir::read(before, n)) else {
        return Vec::new();
    };
    // A list only libcni v1.1 loads, sorting first, holds our entry too (README: Debian 12's runtimes).
    listing
        .older
        .iter()
        .map(|(n, _)| n)
        .chain(listing.valid.iter())
        .filter(|n| n.to_str() != Some(primary))
        .map(|n| {
            let text = libcni::go_text(&fs::read(before.join(n)).unwrap());
            let after = conflist::merge(&text, entry).unwrap();
            let name = select::list_name_for(n).unwrap_or_else(|| n.clone());
            let cleaned = conflist::remove_entry(&after, "fallback").unwrap().unwrap();
            Fallback {
                before: n.to_string_lossy().into_owned(),
                name: name.to_string_lossy().into_owned(),
                after,
                cleaned,
            }
        })
        .collect()
}

/// The `istio-cni` plugin of a list's text.
pub fn entry_of(text: &str) -> Option<json::Object> {
    let o = json::parse_object(text, "entry_of").ok()?;
    json::arr_of(&o, "plugins")?.iter().find_map(|p| match p {
        Value::Object(x) if json::str_of(x, "type") == Some("istio-cni") => Some(x.clone()),
        _ => None,
    })
}

/// The cases the README lists under deviation 1.
pub const DEVIATION_1_CASES: [&str; 3] = [
    "master-install-specified-conflist-name-finds-conf",
    "master-install-unspecified-conf-primary-to-conflist",
    "master-merge-regular-network-file",
];

/// Reads the YAML subset of upstream's kubeconfig goldens (block maps, `- ` lists, plain scalars, `true`
/// / `false`) into a JSON value.
pub fn yaml_to_json(text: &str) -> Value {
    let lines: Vec<(usize, String)> = text
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
        .map(|l| (l.len() - l.trim_start().len(), l.trim_start().to_string()))
        .collect();
    let mut i = 0;
    parse_block(&lines, &mut i, 0)
}

fn scalar(v: &str) -> Value {
    match v {
        "true" => Value::Bool(true),
        "false" => Value::Bool(false),
        _ => Value::String(v.trim_matches('"').to_string()),
    }
}

fn parse_block(lines: &[(usize, String)], i: &mut usize, indent: usize) -> Value {
    if *i < lines.len() && lines[*i].1.starts_with("- ") {
        let mut arr = Vec::new();
        while *i < lines.len() && lines[*i].0 == indent && lines[*i].1.starts_with("- ") {
            // Rewrite "- x" as "x" at indent+2 and parse that block.
            let mut sub: Vec<(usize, String)> = vec![(indent + 2, lines[*i].1[2..].to_string())];
            *i += 1;
            while *i < lines.len() && lines[*i].0 > indent {
                sub.push(lines[*i].clone());
                *i += 1;
            }
            let mut j = 0;
            arr.push(parse_block(&sub, &mut j, indent + 2));
        }
        return Value::Array(arr.into_iter().collect());
    }
    let mut map = BTreeMap::new();
    while *i < lines.len() && lines[*i].0 == indent {
        let line = lines[*i].1.clone();
        let (k, v) = line.split_once(':').unwrap();
        let v = v.trim();
        *i += 1;
        if v.is_empty() {
            let child_indent = if *i < lines.len() {
                lines[*i].0
            } else {
                indent
            };
            if child_indent > indent || (child_indent == indent && lines[*i].1.starts_with("- ")) {
                map.insert(k.to_string(), parse_block(lines, i, child_indent));
            } else {
                map.insert(k.to_string(), Value::Null);
            }
        } else {
            map.insert(k.to_string(), scalar(v));
        }
    }
    Value::Object(map.into_iter().collect())
}

/// A running `install-cni` process.
pub struct Proc {
    pub child: std::process::Child,
    pub stderr_path: PathBuf,
}

/// The built multicall binary, or `INSTALLER_BINARY_UNDER_TEST` (to measure an older build with the same
/// tests, e.g. the before/after figures of an issue).
pub fn binary() -> PathBuf {
    std::env::var_os("INSTALLER_BINARY_UNDER_TEST")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_istio-cni-node")))
}

/// Starts `istio-cni-node install-cni <args>` with exactly `env` (plus PATH), stderr to a file.
pub fn spawn_installer(env: &[(String, String)], args: &[&str], stderr_path: &Path) -> Proc {
    let err = fs::File::create(stderr_path).unwrap();
    let mut cmd = std::process::Command::new(binary());
    cmd.arg("install-cni").args(args).env_clear();
    cmd.env("PATH", std::env::var("PATH").unwrap_or_default());
    cmd.env("RUST_LOG", "info");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.stdout(std::process::Stdio::null()).stderr(err);
    Proc {
        child: cmd.spawn().unwrap(),
        stderr_path: stderr_path.to_path_buf(),
    }
}

impl Proc {
    pub fn signal(&self, sig: nix::sys::signal::Signal) {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.child.id() as i32), sig).unwrap();
    }
    /// Waits for the exit with a limit; panics with the stderr on timeout.
    pub fn wait_exit(&mut self, limit: std::time::Duration) -> std::process::ExitStatus {
        let deadline = std::time::Instant::now() + limit;
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                return st;
            }
            if std::time::Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("installer did not exit; stderr:\n{}", self.stderr());
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }
    pub fn stderr(&self) -> String {
        fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Writes `data` to `path` via a temp file and rename, as a primary CNI would.
pub fn atomic_write(path: &Path, data: &[u8], mode: u32) {
    let tmp = path.with_file_name(format!(
        ".{}.primarytmp",
        path.file_name().unwrap().to_string_lossy()
    ));
    fs::write(&tmp, data).unwrap();
    fs::set_permissions(&tmp, fs::Permissions::from_mode(mode)).unwrap();
    fs::rename(&tmp, path).unwrap();
}

/// A small deterministic generator (xorshift64, no extra crate); seed it from the clock or the pid and
/// print the seed for replay.
pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Where an installer under test finds its directories, and its ports.
pub struct InstallerDirs<'a> {
    pub conf: &'a Path,
    pub run: &'a Path,
    pub bin: &'a Path,
    pub sa: &'a Path,
    pub health: u16,
    pub metrics: u16,
}

/// The environment that points `install-cni` at `d`: conf, run, bin and service-account dirs, no secondary
/// bin dir, an API address (never dialled by these tests) and the two ports.
pub fn installer_env(d: &InstallerDirs) -> Vec<(String, String)> {
    let path = |p: &Path| p.display().to_string();
    [
        ("MOUNTED_CNI_NET_DIR", path(d.conf)),
        ("CNI_AGENT_RUN_DIR", path(d.run)),
        ("CNI_BIN_DIR", path(d.bin)),
        ("SECONDARY_BIN_DIR", String::new()),
        ("SERVICE_ACCOUNT_DIR", path(d.sa)),
        ("KUBERNETES_SERVICE_HOST", "10.96.0.1".into()),
        ("KUBERNETES_SERVICE_PORT", "443".into()),
        ("HEALTH_PORT", d.health.to_string()),
        ("MONITORING_PORT", d.metrics.to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// Sets each of `vars` in `env`, replacing a variable of the same name.
pub fn set_env<K: AsRef<str>, V: AsRef<str>>(env: &mut Vec<(String, String)>, vars: &[(K, V)]) {
    for (k, v) in vars {
        env.retain(|(x, _)| x != k.as_ref());
        env.push((k.as_ref().to_string(), v.as_ref().to_string()));
    }
}
