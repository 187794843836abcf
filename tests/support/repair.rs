//! The repair agent tests' part of the support tree: the vectors, the API double, running the agent.

use istio_cni::json::{self, Object, Value};
use kube_double::{RecordedRequest, Server};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

pub use super::{conformance_dir, free_port};

pub const BIN: &str = env!("CARGO_BIN_EXE_istio-cni-node");
pub const NODE: &str = "test-node";

pub fn cases() -> Vec<Object> {
    let text = std::fs::read_to_string(conformance_dir().join("repair/cases.json")).unwrap();
    match json::parse(&text, "cases.json").unwrap() {
        Value::Array(a) => a
            .into_iter()
            .map(|v| match v {
                Value::Object(o) => o,
                _ => panic!("entry is not an object"),
            })
            .collect(),
        _ => panic!("cases.json is not an array"),
    }
}

pub fn s<'a>(o: &'a Object, k: &str) -> &'a str {
    json::str_of(o, k).unwrap_or_else(|| panic!("field {k} missing"))
}

pub fn obj<'a>(o: &'a Object, k: &str) -> &'a Object {
    json::obj_of(o, k).unwrap_or_else(|| panic!("object {k} missing"))
}

pub fn flag(o: &Object, k: &str) -> bool {
    matches!(o.get(k), Some(Value::Bool(true)))
}

/// The pod placed on `node` (the API double enforces the field selector).
pub fn on_node(pod: &Object, node: &str) -> Object {
    let mut p = pod.clone();
    let mut spec = json::obj_of(&p, "spec").cloned().unwrap_or_default();
    spec.insert("nodeName".into(), json::string(node));
    p.insert("spec".into(), Value::Object(spec));
    p
}

/// An API double holding `pods`, and a kubeconfig for it.
pub struct Api {
    pub srv: Server,
    pub dir: PathBuf,
    pub kubeconfig: PathBuf,
}

impl Api {
    pub fn new(tag: &str) -> Api {
        let srv = Server::start(kube_double::Options::default()).unwrap();
        let dir = std::env::temp_dir().join(format!(
            "istio-cni-repair-{tag}-{}-{}",
            std::process::id(),
            srv.addr().port()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let kubeconfig = dir.join("kubeconfig");
        srv.write_kubeconfig(&kubeconfig).unwrap();
        Api {
            srv,
            dir,
            kubeconfig,
        }
    }

    pub fn add(&self, pod: &Object) -> Object {
        self.srv
            .add_pod(&json::to_compact(&Value::Object(pod.clone())))
            .unwrap()
    }

    /// Requests other than GET (the writes), in order.
    pub fn writes(&self) -> Vec<RecordedRequest> {
        self.srv
            .requests()
            .into_iter()
            .filter(|r| r.method != "GET")
            .collect()
    }

    pub fn writes_to(&self, method: &str, path: &str) -> Vec<RecordedRequest> {
        self.writes()
            .into_iter()
            .filter(|r| r.method == method && r.path == path)
            .collect()
    }

    /// The agent as a command, with a clean environment.
    pub fn agent(&self, args: &[String]) -> Command {
        // ISTIO_CNI_BIN measures another build (e.g. the static musl release) with the same harness.
        let bin = std::env::var("ISTIO_CNI_BIN").unwrap_or_else(|_| BIN.to_string());
        let mut c = Command::new(bin);
        c.arg("istio-cni-repair")
            .arg(format!("--kubeconfig={}", self.kubeconfig.display()));
        // A run dir of its own (the audit keeps its decisions there), unless the test names one: never
        // the node's /var/run/istio-cni, which other tests' agents (and a real node's) share.
        if !args.iter().any(|a| a.starts_with("--cni-agent-run-dir")) {
            let run = self.dir.join("run");
            std::fs::create_dir_all(&run).unwrap();
            c.arg(format!("--cni-agent-run-dir={}", run.display()));
        }
        c.args(args)
            .env_clear()
            .env(
                "PATH",
                "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            )
            .env("RUST_LOG", "info");
        c
    }

    pub fn run_once(&self, args: &[String]) -> Output {
        let mut a = vec!["--run-as-daemon=false".to_string()];
        a.extend_from_slice(args);
        self.agent(&a).output().unwrap()
    }

    pub fn spawn(&self, args: &[String], log: &Path) -> Child {
        let f = std::fs::File::create(log).unwrap();
        self.agent(args)
            .stdout(Stdio::null())
            .stderr(Stdio::from(f))
            .spawn()
            .unwrap()
    }
}

impl Drop for Api {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

pub fn show(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The value of `istio_cni_repair_pods_repaired_total{result,type}` in a metrics text (0 if absent).
pub fn metric(text: &str, kind: &str, result: &str) -> u64 {
    let series =
        format!("istio_cni_repair_pods_repaired_total{{result=\"{result}\",type=\"{kind}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&series))
        .map(|v| v.trim().parse().unwrap())
        .unwrap_or(0)
}

pub fn parse_body(r: &RecordedRequest) -> Object {
    json::parse_object(&r.body, "request body").unwrap()
}

/// Polls `f` every 100 ms for up to `secs` seconds (a bound, not a timing assertion).
pub fn wait_until(secs: u64, mut f: impl FnMut() -> bool) -> bool {
    let end = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while std::time::Instant::now() < end {
        if f() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    f()
}

pub fn scrape(port: u16) -> String {
    use std::io::{Read, Write};
    let Ok(mut c) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return String::new();
    };
    // A bound, so a server that keeps the connection open fails the caller's assertion instead of hanging it.
    let _ = c.set_read_timeout(Some(std::time::Duration::from_secs(30)));
    let _ = c.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    let mut s = String::new();
    let _ = c.read_to_string(&mut s);
    s
}

/// Changes pod `default/<name>` (an annotation), which starts a new repair streak for it.
pub fn touch_pod(srv: &Server, name: &str) {
    srv.patch_pod(
        "default",
        name,
        r#"{"metadata":{"annotations":{"touched":"1"}}}"#,
    )
    .unwrap();
}

/// The status of a race victim: `istio-validation` failed with 126 and is in CrashLoopBackOff.
pub const BROKEN_STATUS: &str = r#"{"status":{"initContainerStatuses":[{"name":"istio-validation",
  "state":{"waiting":{"reason":"CrashLoopBackOff"}},
  "lastState":{"terminated":{"exitCode":126,"reason":"Error"}},"ready":false,"restartCount":1,"image":"","imageID":""}]}}"#;

/// A long-running process in a pod's namespace (the pause container the agent finds through /proc).
pub struct Pause(Child);

impl Pause {
    pub fn start(ns: &super::Netns) -> Pause {
        Pause(
            Command::new("ip")
                .args(["netns", "exec", ns.name(), "sleep", "3600"])
                .stdin(Stdio::null())
                .spawn()
                .expect("start the pause process"),
        )
    }
}

impl Pause {
    /// Its pid.
    pub fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Pause {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A cgroup named as the kubelet's systemd driver names a pod's container
/// (`kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod<uid>.slice/cri-containerd-….scope`),
/// in the first cgroup hierarchy here that takes it: v2 at `/sys/fs/cgroup` or `/sys/fs/cgroup/unified`
/// (hybrid), else v1's `pids`. Removed on drop (what we made of it), its processes moved back to the
/// hierarchy's root first.
pub struct PodCgroup {
    root: PathBuf,
    made: Vec<PathBuf>,
    leaf: PathBuf,
}

impl PodCgroup {
    pub fn new(uid: &str) -> PodCgroup {
        PodCgroup::scope(uid, "cri-containerd-e2e.scope")
    }

    /// Another cgroup `scope` of the pod (`crio-conmon-<id>.scope`: CRI-O's `conmon_cgroup = "pod"`).
    /// Dropped before a [`PodCgroup`] of the same pod made earlier (it removes the pod's slice).
    pub fn scope(uid: &str, scope: &str) -> PodCgroup {
        let pod = format!("kubepods-besteffort-pod{}.slice", uid.replace('-', "_"));
        PodCgroup::at(&[
            "kubepods.slice",
            "kubepods-besteffort.slice",
            pod.as_str(),
            scope,
        ])
    }

    /// As kind's kubelet names a pod's container (systemd driver, `kubelet.slice` root).
    pub fn kind(uid: &str) -> PodCgroup {
        let pod = format!(
            "kubelet-kubepods-besteffort-pod{}.slice",
            uid.replace('-', "_")
        );
        PodCgroup::at(&[
            "kubelet.slice",
            "kubelet-kubepods.slice",
            "kubelet-kubepods-besteffort.slice",
            pod.as_str(),
            "cri-containerd-e2e.scope",
        ])
    }

    /// The cgroup at the path `rel` below the first hierarchy that takes it.
    pub fn at(rel: &[&str]) -> PodCgroup {
        for root in [
            "/sys/fs/cgroup",
            "/sys/fs/cgroup/unified",
            "/sys/fs/cgroup/pids",
        ] {
            let root = PathBuf::from(root);
            if !root.join("cgroup.procs").is_file() {
                continue;
            }
            let mut cg = PodCgroup {
                root: root.clone(),
                made: Vec::new(),
                leaf: root.clone(),
            };
            for r in rel {
                cg.leaf.push(r);
                if !cg.leaf.is_dir() {
                    if std::fs::create_dir(&cg.leaf).is_err() {
                        break;
                    }
                    cg.made.push(cg.leaf.clone());
                }
            }
            if cg.leaf.join("cgroup.procs").is_file() {
                return cg;
            }
        }
        panic!(
            "no cgroup hierarchy takes a pod cgroup here (tried cgroup v2 at /sys/fs/cgroup and \
             /sys/fs/cgroup/unified, v1 pids): the test needs root with a writable cgroup tree"
        );
    }

    /// Moves process `pid` into the pod's cgroup.
    pub fn add(&self, pid: u32) {
        std::fs::write(self.leaf.join("cgroup.procs"), pid.to_string())
            .unwrap_or_else(|e| panic!("move {pid} into {}: {e}", self.leaf.display()));
    }
}

impl Drop for PodCgroup {
    fn drop(&mut self) {
        for dir in self.made.iter().rev() {
            let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
            for pid in procs.lines() {
                let _ = std::fs::write(self.root.join("cgroup.procs"), pid);
            }
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// `istio-validation` in the pod's namespace as the proxy uid 1337 (the init container).
pub fn validation_in(ns: &super::Netns, native_nftables: bool) -> Output {
    let mut args = vec![
        "setpriv",
        "--reuid",
        "1337",
        "--regid",
        "1337",
        "--clear-groups",
        BIN,
        "istio-validation",
    ];
    if native_nftables {
        args.push("--native-nftables");
    }
    args.extend(["--probe-timeout", "1s"]);
    ns.exec(&args)
}

/// Asserts that `istio-validation` now passes in the pod's namespace (after a repair; `agent_log` for the
/// failure message).
pub fn assert_validation_passes(ns: &super::Netns, native_nftables: bool, agent_log: &str) {
    let after = validation_in(ns, native_nftables);
    assert_eq!(
        after.status.code(),
        Some(0),
        "after repair:\n{}\nagent log:\n{agent_log}",
        show(&after)
    );
    assert!(String::from_utf8_lossy(&after.stdout).contains("Validation passed"));
}

/// The standalone repair agent on an end-to-end node (`node1`, repair mode, host `/proc`), debug log in the
/// node's dir; killed on drop.
pub struct Agent {
    child: Child,
    pub port: u16,
    log: PathBuf,
}

impl Agent {
    /// Starts it with the node's run dir and kubeconfig, plus `flags` (which may turn repair mode off) and
    /// the environment `env`.
    pub fn start(node: &super::e2e::Node, flags: &[&str], env: &[(&str, &str)]) -> Agent {
        let run = node.dir.join("run");
        let port = free_port();
        let log = node.dir.join("agent.log");
        let mut cmd = Command::new(BIN);
        cmd.arg("istio-cni-repair")
            .arg(format!(
                "--kubeconfig={}",
                run.join("istio-cni-kubeconfig").display()
            ))
            .args(["--repair-node-name=node1", "--host-proc=/proc"])
            // Repair mode unless `flags` say otherwise (a flag given twice is refused).
            .args(
                (!flags.iter().any(|f| f.starts_with("--repair-repair-pods")))
                    .then_some("--repair-repair-pods=true"),
            )
            .args(flags)
            .arg(format!("--cni-agent-run-dir={}", run.display()))
            .arg(format!("--monitoring-port={port}"))
            .env_clear()
            .env("PATH", super::PLUGIN_PATH_ENV)
            .env("RUST_LOG", "debug")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::from(std::fs::File::create(&log).unwrap()));
        Agent {
            child: cmd.spawn().unwrap(),
            port,
            log,
        }
    }

    /// The agent's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Whether one successful repair is counted within 60 s (a bound, not a timing assertion).
    pub fn wait_repaired(&self) -> bool {
        wait_until(60, || metric(&scrape(self.port), "repair", "success") == 1)
    }

    /// Stops the agent now.
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.stop();
    }
}
