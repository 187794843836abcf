//! A node for installer process tests: a temp root with conf/bin/run/sa dirs, the installer started on it
//! with free health and metrics ports, and the readiness invariant's two sides (ready, and the file
//! libcni picks holds our entry).

use super::*;
use istio_cni::install::config::{check, select};
use std::fs;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

pub const LONG: Duration = Duration::from_secs(10);

pub struct Node {
    pub root: PathBuf,
    pub conf: PathBuf,
    pub health: u16,
    pub metrics: u16,
}

pub fn list_text(name: &str, plugin: &str) -> String {
    format!(
        "{{\n  \"name\": \"{name}\",\n  \"cniVersion\": \"1.0.0\",\n  \"plugins\": [\n    {{ \"type\": \"{plugin}\" }}\n  ]\n}}\n"
    )
}

impl Node {
    pub fn new(tag: &str) -> Node {
        let root = tempdir(tag);
        for d in ["conf", "bin", "run", "sa"] {
            fs::create_dir_all(root.join(d)).unwrap();
        }
        fs::write(root.join("sa/token"), "token").unwrap();
        fs::copy(
            conformance_dir().join("kubeconfig/master-tls-verify/ca.crt"),
            root.join("sa/ca.crt"),
        )
        .unwrap();
        Node {
            conf: root.join("conf"),
            root,
            health: free_port(),
            metrics: free_port(),
        }
    }

    /// The environment [`Node::start`] gives the installer, with `extra` set on top.
    pub fn env(&self, extra: &[(&str, &str)]) -> Vec<(String, String)> {
        let (run, bin, sa) = (
            self.root.join("run"),
            self.root.join("bin"),
            self.root.join("sa"),
        );
        let mut env = installer_env(&InstallerDirs {
            conf: &self.conf,
            run: &run,
            bin: &bin,
            sa: &sa,
            health: self.health,
            metrics: self.metrics,
        });
        set_env(&mut env, &[("REPAIR_ENABLED", "false")]);
        set_env(&mut env, extra);
        env
    }

    pub fn start(&self, extra: &[(&str, &str)]) -> Proc {
        spawn_installer(&self.env(extra), &[], &self.root.join("stderr"))
    }

    pub fn write(&self, name: &str, text: &str) {
        atomic_write(&self.conf.join(name), text.as_bytes(), 0o644);
    }

    pub fn entries(&self, name: &str) -> usize {
        entries_at(&self.conf.join(name))
    }

    /// libcni's choice right now (the file the runtime will use).
    pub fn runtime_file(&self) -> Option<String> {
        let c = select::list_candidates(&self.conf).ok()?;
        select::valid_configs("d", &c, &|n| {
            istio_cni::install::config::plugin_dir::read(&self.conf, n)
        })
        .ok()?
        .valid
        .first()
        .map(|n| n.to_string_lossy().into_owned())
    }

    /// The invariant's right-hand side: the runtime's file holds our entry.
    pub fn runtime_file_has_entry(&self) -> bool {
        self.runtime_file()
            .and_then(|f| fs::read(self.conf.join(f)).ok())
            .is_some_and(|b| check::holds_entry(&b))
    }

    pub fn ready(&self) -> bool {
        get(self.health, "/readyz").is_some_and(|(c, _)| c == 200)
    }

    pub fn not_ready(&self) -> bool {
        get(self.health, "/readyz").is_some_and(|(c, _)| c == 503)
    }

    pub fn metric_ready(&self) -> Option<String> {
        let (_, body) = get(self.metrics, "/metrics")?;
        body.lines()
            .find(|l| l.starts_with("istio_cni_install_ready "))
            .map(|l| l["istio_cni_install_ready ".len()..].trim().to_string())
    }

    /// Waits until ready and then checks the invariant holds (ready ⇒ runtime's file has our entry).
    pub fn settle_ready(&self, p: &Proc, what: &str) {
        let deadline = Instant::now() + LONG;
        while !(self.ready() && self.runtime_file_has_entry()) {
            assert!(
                Instant::now() < deadline,
                "{what}: not ready with our entry in {:?}:\n{}",
                self.runtime_file(),
                p.stderr()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.root);
    }
}

/// How many `istio-cni` entries the file at `p` holds (0 when it cannot be read).
pub fn entries_at(p: &std::path::Path) -> usize {
    fs::read_to_string(p)
        .map(|t| istio_cni::install::config::conflist::count_entries(&t))
        .unwrap_or(0)
}

pub fn get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    c.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        c,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut s = String::new();
    c.read_to_string(&mut s).ok()?;
    let code = s.get(9..12)?.parse().ok()?;
    Some((code, s.split("\r\n\r\n").nth(1).unwrap_or("").to_string()))
}

/// Holds for `d`, polling: `f` must stay true the whole time.
pub fn stays(what: &str, d: Duration, f: impl Fn() -> bool) {
    let until = Instant::now() + d;
    while Instant::now() < until {
        assert!(f(), "{what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}
