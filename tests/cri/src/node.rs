//! One node: a network namespace, the API double listening in it, a CNI bin dir (Debian's plugins plus our
//! binary as `istio-cni`), a conflist (ptp + host-local, then istio-cni unless told otherwise), a private
//! containerd started in that namespace with the pause image imported, and a CRI client.

use crate::containerd::Containerd;
use crate::cri::{Cri, PodSpec};
use crate::image;
use crate::util::{in_netns, repo, run, run_ok, saved_rules, Netns, TempDir};
use kube_double::{Options, Server};
use std::path::{Path, PathBuf};
use tokio::sync::RwLock;

/// Tests that count the host's `cni-*` network namespaces (leak checks) take this for writing; every other
/// test takes it for reading, so no sandbox of this process appears or vanishes meanwhile.
pub static NETNS_COUNT: RwLock<()> = RwLock::const_new(());

pub const PAUSE_IMAGE: &str = "localhost/istio-cni-e2e-pause:1";
const DEBIAN_CNI_DIR: &str = "/usr/lib/cni";

/// The static release binary: `$RELEASE_BIN`, else scripts/build's output (built now if missing; cargo
/// makes it a no-op when up to date).
pub fn our_binary() -> PathBuf {
    if let Some(p) = std::env::var_os("RELEASE_BIN").filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    static BUILT: std::sync::Mutex<Option<PathBuf>> = std::sync::Mutex::new(None);
    let mut b = BUILT.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(p) = b.as_ref() {
        return p.clone();
    }
    run_ok("bash", &[repo().join("scripts/build")]);
    let p = release_bin();
    assert!(p.is_file(), "scripts/build made no {}", p.display());
    *b = Some(p.clone());
    p
}

/// Where scripts/build puts the x86_64 release binary: scripts/lib.sh's `release_bin` decides (it honours
/// `CARGO_TARGET_DIR`), so the tests look where the scripts do.
pub fn release_bin() -> PathBuf {
    let out = run_ok(
        "bash",
        &[
            "-c",
            ". \"$1/scripts/lib.sh\" && release_bin x86_64-unknown-linux-musl",
            "release_bin",
            repo().to_string_lossy().as_ref(),
        ],
    );
    PathBuf::from(out.trim())
}

pub struct NodeOptions {
    /// Append istio-cni to the chain.
    pub with_plugin: bool,
}

impl Default for NodeOptions {
    fn default() -> Self {
        NodeOptions { with_plugin: true }
    }
}

pub struct Node {
    pub cri: Cri,
    pub containerd: Containerd,
    pub srv: Server,
    pub ns: Netns,
    pub dir: TempDir,
}

impl Node {
    pub async fn new(opts: NodeOptions) -> Node {
        let dir = TempDir::new("cri");
        let ns = Netns::new("crinode");
        for d in ["bin", "conf", "run", "ipam"] {
            std::fs::create_dir_all(dir.join(d)).unwrap();
        }
        // The API double listens inside the node's namespace, where the plugin runs.
        let srv = in_netns(&ns.path(), || Server::start(Options::default()))
            .expect("start the API double");
        srv.write_kubeconfig(&dir.join("run/istio-cni-kubeconfig"))
            .unwrap();
        for e in std::fs::read_dir(DEBIAN_CNI_DIR).expect("containernetworking-plugins") {
            let e = e.unwrap();
            std::os::unix::fs::symlink(e.path(), dir.join("bin").join(e.file_name())).unwrap();
        }
        std::os::unix::fs::symlink(our_binary(), dir.join("bin/istio-cni")).unwrap();
        std::fs::write(
            dir.join("conf/10-e2e.conflist"),
            Node::conflist(dir.path(), opts.with_plugin),
        )
        .unwrap();
        let pause = dir.join("pause.tar");
        image::pause_archive(PAUSE_IMAGE, &pause);
        let containerd = Containerd::start(
            dir.path(),
            &ns.path(),
            PAUSE_IMAGE,
            &dir.join("bin"),
            &dir.join("conf"),
        );
        containerd.import(&pause);
        let cri = Cri::connect(&containerd.socket()).await;
        Node {
            cri,
            containerd,
            srv,
            ns,
            dir,
        }
    }

    pub fn istio_cni_conf(dir: &Path) -> serde_json::Value {
        serde_json::json!({
            "type": "istio-cni",
            "cni_agent_run_dir": dir.join("run"),
            "exclude_namespaces": ["kube-system"],
            "plugin_log_level": "debug",
            "pod_lookup_timeout_seconds": 2,
        })
    }

    /// Each node's pods get a subnet of their own (10.201.<n>.0/24): nothing on the host confuses them.
    pub fn conflist(dir: &Path, with_plugin: bool) -> String {
        let subnet = format!("10.201.{}.0/24", crate::util::next_index() % 250);
        let mut plugins = vec![serde_json::json!({
            "type": "ptp", "ipMasq": false,
            "ipam": {"type": "host-local", "dataDir": dir.join("ipam"),
                     "ranges": [[{"subnet": subnet}]], "routes": [{"dst": "0.0.0.0/0"}]},
        })];
        if with_plugin {
            plugins.push(Node::istio_cni_conf(dir));
        }
        serde_json::to_string_pretty(&serde_json::json!({
            "cniVersion": "1.0.0", "name": "e2e", "plugins": plugins,
        }))
        .unwrap()
    }

    /// A pod with a sidecar (an `istio-proxy` container and the injector's status annotation), served by the
    /// double; `annotations` are added to the pod's (and passed to the runtime, as kubelet does).
    pub fn sidecar_pod(&self, ns: &str, name: &str, annotations: &[(&str, &str)]) -> PodSpec {
        self.add_pod(ns, name, annotations, true)
    }

    /// A pod served by the double; `sidecar` adds istio-proxy and the status annotation.
    pub fn add_pod(
        &self,
        ns: &str,
        name: &str,
        annotations: &[(&str, &str)],
        sidecar: bool,
    ) -> PodSpec {
        let uid = crate::cri::pod_uid(name);
        let mut ann: std::collections::HashMap<String, String> = annotations
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let mut containers = vec![serde_json::json!({"name": "app"})];
        if sidecar {
            ann.insert("sidecar.istio.io/status".into(), "{}".into());
            containers
                .push(serde_json::json!({"name": "istio-proxy", "args": ["proxy", "sidecar"]}));
        }
        let pod = serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "uid": uid, "annotations": ann},
            "spec": {"nodeName": "node1", "containers": containers},
        });
        self.srv.add_pod(&pod.to_string()).expect("add pod");
        PodSpec {
            name: name.into(),
            namespace: ns.into(),
            uid,
            annotations: ann,
            attempt: 0,
        }
    }

    /// The iptables-save of the pod netns at `path`, with the backend the plugin recorded.
    pub fn rules(&self, netns: &str) -> String {
        let backend = std::fs::read_to_string(self.dir.join("run/iptables-backend"))
            .unwrap_or_else(|_| "nft".into());
        let prog = if backend.trim() == "legacy" {
            "iptables-legacy-save"
        } else {
            "iptables-nft-save"
        };
        saved_rules(netns, prog)
    }

    /// Runs a pod and returns (id, netns path), asserting the runtime reports it ready with an IP.
    pub async fn run_ready(&self, pod: &PodSpec) -> (String, String) {
        let id = self
            .cri
            .run_pod(pod)
            .await
            .unwrap_or_else(|e| panic!("RunPodSandbox {}: {e}", pod.name));
        let st = self.cri.status(&id).await.expect("PodSandboxStatus");
        assert!(st.ready, "sandbox {} not ready: {st:?}", pod.name);
        assert!(st.ip.starts_with("10.201."), "sandbox IP {st:?}");
        let netns = st.netns.expect("no netns path in the verbose status");
        (id, netns)
    }

    /// Stops and removes a sandbox, asserting the runtime forgets it and its netns is gone.
    pub async fn stop_remove(&self, id: &str, netns: &str) {
        self.cri.stop(id).await.expect("StopPodSandbox");
        let st = self.cri.status(id).await.expect("status after stop");
        assert!(!st.ready, "still ready after StopPodSandbox");
        self.cri.remove(id).await.expect("RemovePodSandbox");
        assert!(!self.cri.list().await.contains(&id.to_string()));
        assert!(!Path::new(netns).exists(), "netns {netns} left behind");
    }

    /// The IP addresses host-local still holds.
    pub fn allocated_ips(&self) -> Vec<String> {
        let d = self.dir.join("ipam/e2e");
        std::fs::read_dir(&d)
            .map(|rd| {
                rd.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.parse::<std::net::IpAddr>().is_ok())
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// The host's containerd-made network namespaces (`/var/run/netns/cni-*`).
pub fn cni_netns() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir("/var/run/netns")
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("cni-"))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

impl Drop for Node {
    fn drop(&mut self) {
        crate::cri::remove_all_sandboxes(self.containerd.socket());
        self.containerd.stop();
        let root = self.dir.join("runc/k8s.io");
        let r = root.to_string_lossy().into_owned();
        let out = run("runc", &["--root", &r, "list", "-q"]);
        for id in String::from_utf8_lossy(&out.stdout).split_whitespace() {
            let _ = run("runc", &["--root", &r, "delete", "--force", id]);
        }
    }
}
