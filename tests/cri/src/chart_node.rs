//! A node laid out as upstream's chart expects, running our image as the chart's container (see
//! [`crate::chart`] for the YAML side). The chart's host paths (`/opt/cni/bin`, `/etc/cni/net.d`,
//! `/var/run/istio-cni`, ...) are the node's literal paths: containerd runs in a private mount namespace
//! (held by a `sleep` the test starts) where each is a bind mount of a directory under the test's temp dir.
//! The API double listens on 10.89.0.1 on the node namespace's `lo`, which the agent pod reaches through its
//! default route (no `hostNetwork`).

use crate::chart::{Chart, API_IP};
use crate::containerd::Containerd;
use crate::cri::Cri;
use crate::image;
use crate::node::{our_binary, release_bin, PAUSE_IMAGE};
use crate::util::{in_netns, repo, run, run_ok, Netns, TempDir};
use kube_double::{Options, Server};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Our image's OCI archive from `scripts/image amd64 --no-build --archive` (once per process); the image
/// name it carries.
pub fn our_image_archive() -> (PathBuf, String) {
    static DONE: std::sync::Mutex<Option<(PathBuf, String)>> = std::sync::Mutex::new(None);
    let mut d = DONE.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(x) = d.as_ref() {
        return x.clone();
    }
    let bin = our_binary();
    // scripts/image --no-build packages the binary where release_bin says.
    let want = release_bin();
    let same = match (bin.canonicalize(), want.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    };
    if !same {
        std::fs::create_dir_all(want.parent().unwrap()).unwrap();
        std::fs::copy(&bin, &want).unwrap();
    }
    let out = run_ok(
        "bash",
        &[
            repo().join("scripts/image").to_string_lossy().as_ref(),
            "amd64",
            "--no-build",
            "--archive",
        ],
    );
    let line = out
        .lines()
        .find(|l| l.starts_with("archive "))
        .unwrap_or_else(|| panic!("scripts/image printed no archive line:\n{out}"));
    let path = PathBuf::from(line.split_whitespace().nth(1).unwrap());
    let path = if path.is_absolute() {
        path
    } else {
        repo().join(path)
    };
    let version = std::fs::read_to_string(repo().join("Cargo.toml"))
        .unwrap()
        .lines()
        .find_map(|l| {
            l.strip_prefix("version = \"")
                .map(|v| v.trim_end_matches('"').to_string())
        })
        .unwrap();
    let x = (path, format!("localhost/install-cni:{version}"));
    *d = Some(x.clone());
    x
}

/// A node laid out as the chart expects, with containerd in the node's mount view.
pub struct ChartNode {
    pub cri: Cri,
    pub containerd: Containerd,
    pub srv: Server,
    pub chart: Chart,
    pub bin_dir: String,
    pub conf_dir: String,
    pub run_dir: String,
    pub primary: String,
    holder: Holder,
    pub ns: Netns,
    pub dir: TempDir,
}

/// What a [`ChartNode`] is built with beyond the chart.
#[derive(Debug, Clone, Default)]
pub struct ChartNodeOptions {
    /// containerd mounts the pods' network namespaces under its state dir (see [`Containerd::start_with`]).
    pub netns_under_state: bool,
}

impl ChartNode {
    pub async fn new(chart: Chart) -> ChartNode {
        ChartNode::new_with(chart, ChartNodeOptions::default()).await
    }

    pub async fn new_with(chart: Chart, opts: ChartNodeOptions) -> ChartNode {
        let dir = TempDir::new("chart");
        let ns = Netns::new("chartnode");
        ns.exec_ok(&["ip", "addr", "add", &format!("{API_IP}/32"), "dev", "lo"]);
        let srv = in_netns(&ns.path(), || {
            Server::start(Options {
                listen: format!("{API_IP}:0").parse().unwrap(),
                ..Options::default()
            })
        })
        .expect("start the API double");
        let bin_dir = chart.host_path("cni-bin-dir").expect("cni-bin-dir volume");
        let conf_dir = chart.host_path("cni-net-dir").expect("cni-net-dir volume");
        let run_dir = chart
            .host_path("cni-socket-dir")
            .expect("cni-socket-dir volume");
        // The node's view: every host path but /proc is a bind mount of a directory under ours.
        Holder::enter();
        let mut entered = Entered(true);
        let mut made_dirs = Vec::new();
        let mut script = String::from("set -e\n");
        for p in chart.host_paths() {
            if p == "/proc" {
                continue;
            }
            let src = dir.join(format!("host{p}"));
            std::fs::create_dir_all(&src).unwrap();
            let mut missing = Vec::new();
            let mut q = PathBuf::from(&p);
            while !q.exists() {
                missing.push(q.clone());
                if !q.pop() {
                    break;
                }
            }
            made_dirs.extend(missing);
            script.push_str(&format!(
                "mkdir -p '{p}'\nmount --bind '{}' '{p}'\n",
                src.display()
            ));
        }
        let ready = dir.join("holder-ready");
        script.push_str(&format!("touch '{}'\nexec sleep 100000\n", ready.display()));
        Holder::made(made_dirs);
        let child = Command::new("unshare")
            .args(["--mount", "--propagation", "slave", "sh", "-c", &script])
            .stdin(Stdio::null())
            .spawn()
            .expect("unshare");
        entered.0 = false;
        let holder = Holder { child };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !ready.exists() {
            assert!(
                Instant::now() < deadline,
                "mount namespace holder not ready"
            );
            std::thread::sleep(Duration::from_millis(10));
        }

        // The primary CNI: Debian's ptp + host-local, its binaries in the chart's bin dir.
        let host = |p: &str| dir.join(format!("host{p}"));
        for e in std::fs::read_dir("/usr/lib/cni").expect("containernetworking-plugins") {
            let e = e.unwrap();
            std::os::unix::fs::symlink(e.path(), host(&bin_dir).join(e.file_name())).unwrap();
        }
        let primary = match chart.setting("CNI_CONF_NAME") {
            Some(n) if chart.setting("CHAINED_CNI_PLUGIN").as_deref() != Some("false") => n,
            _ => "10-ptp.conflist".to_string(),
        };
        std::fs::create_dir_all(dir.join("ipam")).unwrap();
        // A subnet of its own: the repair agents of parallel scenarios scan the same host /proc by pod IP.
        let subnet = format!("10.200.{}.0/24", crate::util::next_index() % 250);
        std::fs::write(
            host(&conf_dir).join(&primary),
            primary_conflist(&dir.join("ipam"), &subnet),
        )
        .unwrap();

        // The service-account volume kubelet mounts.
        let sa = dir.join("sa");
        std::fs::create_dir_all(&sa).unwrap();
        std::fs::write(sa.join("token"), srv.token()).unwrap();
        std::fs::write(sa.join("ca.crt"), srv.ca_pem()).unwrap();
        std::fs::write(sa.join("namespace"), "istio-system").unwrap();

        let pause = dir.join("pause.tar");
        image::pause_archive(PAUSE_IMAGE, &pause);
        let containerd = Containerd::start_with(
            dir.path(),
            &ns.path(),
            Some(holder.child.id()),
            PAUSE_IMAGE,
            Path::new(&bin_dir),
            Path::new(&conf_dir),
            opts.netns_under_state,
        );
        containerd.import(&pause);
        containerd.import(&our_image_archive().0);
        let cri = Cri::connect(&containerd.socket()).await;
        ChartNode {
            cri,
            containerd,
            srv,
            chart,
            bin_dir,
            conf_dir,
            run_dir,
            primary,
            holder,
            ns,
            dir,
        }
    }

    /// A node path's backing directory (what the test reads).
    pub fn host(&self, p: &str) -> PathBuf {
        self.dir.join(format!("host{p}"))
    }

    /// The process holding the node's mount view.
    pub fn holder_pid(&self) -> u32 {
        self.holder.child.id()
    }
}

/// ptp + host-local: the node's primary CNI.
pub fn primary_conflist(ipam: &Path, subnet: &str) -> String {
    serde_json::to_string_pretty(&serde_json::json!({
        "cniVersion": "1.0.0", "name": "e2e",
        "plugins": [{"type": "ptp", "ipMasq": false,
            "ipam": {"type": "host-local", "dataDir": ipam,
                     "ranges": [[{"subnet": subnet}]], "routes": [{"dst": "0.0.0.0/0"}]}}],
    }))
    .unwrap()
}

impl Drop for ChartNode {
    fn drop(&mut self) {
        crate::cri::remove_all_sandboxes(self.containerd.socket());
        self.containerd.stop();
        let r = self.dir.join("runc/k8s.io").to_string_lossy().into_owned();
        let out = run("runc", &["--root", &r, "list", "-q"]);
        for id in String::from_utf8_lossy(&out.stdout).split_whitespace() {
            let _ = run("runc", &["--root", &r, "delete", "--force", id]);
        }
    }
}

/// The process holding the node's mount view. The node directories made for mount points (empty) are
/// shared by every scenario of this process (a directory removed on the host would vanish from a
/// running scenario's view too), so the last holder to go removes them.
struct Holder {
    child: Child,
}

/// Live holders, and the directories they made.
static LIVE: std::sync::Mutex<(usize, Vec<PathBuf>)> = std::sync::Mutex::new((0, Vec::new()));

impl Holder {
    /// Counts a holder in before it makes anything (so no other scenario removes directories meanwhile).
    fn enter() {
        LIVE.lock().unwrap_or_else(|p| p.into_inner()).0 += 1;
    }
    fn made(dirs: Vec<PathBuf>) {
        let mut l = LIVE.lock().unwrap_or_else(|p| p.into_inner());
        for d in dirs {
            if !l.1.contains(&d) {
                l.1.push(d);
            }
        }
    }
    fn leave() {
        let mut l = LIVE.lock().unwrap_or_else(|p| p.into_inner());
        l.0 = l.0.saturating_sub(1);
        if l.0 == 0 {
            let mut dirs = std::mem::take(&mut l.1);
            dirs.sort_by_key(|d| std::cmp::Reverse(d.as_os_str().len()));
            for d in dirs {
                let _ = std::fs::remove_dir(d);
            }
        }
    }
}

/// Leaves [`LIVE`] if set-up fails before a holder exists.
struct Entered(bool);

impl Drop for Entered {
    fn drop(&mut self) {
        if self.0 {
            Holder::leave();
        }
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        Holder::leave();
    }
}

/// Waits (generously: the machine may be loaded) until `f` holds, polling every 20 ms; fails naming `what`
/// with the agent's log. Returns how long it took.
pub async fn wait_node(
    node: &ChartNode,
    what: &str,
    secs: u64,
    mut f: impl FnMut() -> bool,
) -> Duration {
    let t = Instant::now();
    while !f() {
        assert!(
            t.elapsed() < Duration::from_secs(secs),
            "{what}: not within {secs} s; agent log:\n{}",
            node.agent_log()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    t.elapsed()
}
