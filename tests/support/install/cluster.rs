//! A cluster for the SIGTERM-decision tests: a node's CNI dirs, the API double serving our DaemonSet (as
//! upstream's chart renders it, for scheduling), the node and the agent pods, agents started on them, and an
//! inotify watch of the conf dir through a handover.

use super::*;
use istio_cni::install::config::conflist;
use kube_double::{Options, Server};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
use nix::sys::signal::Signal;
use std::fs;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub const PRIMARY: &str = "10-calico.conflist";
pub const NS: &str = "istio-system";
pub const DS: &str = "istio-cni-node";
pub const NODE: &str = "node-1";
pub const LONG: Duration = Duration::from_secs(15);

pub const PRIMARY_TEXT: &str = r#"{
  "name": "k8s-pod-network",
  "cniVersion": "0.3.1",
  "plugins": [
    { "type": "calico", "ipam": { "type": "calico-ipam" } },
    { "type": "portmap", "snat": true, "capabilities": { "portMappings": true } }
  ]
}
"#;

/// Upstream's chart's DaemonSet, as far as scheduling goes: Linux nodes, every taint tolerated.
pub fn daemonset_json() -> String {
    format!(
        r#"{{"metadata":{{"name":"{DS}","namespace":"{NS}"}},"spec":{{"selector":{{"matchLabels":{{"k8s-app":"istio-cni-node"}}}},
           "template":{{"metadata":{{"labels":{{"k8s-app":"istio-cni-node"}}}},"spec":{{
             "nodeSelector":{{"kubernetes.io/os":"linux"}},
             "tolerations":[{{"effect":"NoSchedule","operator":"Exists"}},{{"key":"CriticalAddonsOnly","operator":"Exists"}},
                            {{"effect":"NoExecute","operator":"Exists"}}],
             "containers":[{{"name":"install-cni","image":"install-cni"}}]}}}}}}}}"#
    )
}

pub fn node_json(os: &str) -> String {
    format!(
        r#"{{"metadata":{{"name":"{NODE}","labels":{{"kubernetes.io/os":"{os}","kubernetes.io/hostname":"{NODE}"}}}},"spec":{{}}}}"#
    )
}

/// An agent pod of the DaemonSet on the node.
pub fn agent_pod_json(name: &str) -> String {
    format!(
        r#"{{"metadata":{{"name":"{name}","namespace":"{NS}","labels":{{"k8s-app":"istio-cni-node"}},
           "ownerReferences":[{{"apiVersion":"apps/v1","kind":"DaemonSet","name":"{DS}","uid":"ds-uid","controller":true,"blockOwnerDeletion":true}}]}},
           "spec":{{"nodeName":"{NODE}","containers":[{{"name":"install-cni"}}]}}}}"#
    )
}

/// A node's CNI dirs, the API double serving our DaemonSet, node and agent pods, and agents started on them.
pub struct Cluster {
    pub root: PathBuf,
    pub conf: PathBuf,
    pub bin: PathBuf,
    pub run: PathBuf,
    pub sa: PathBuf,
    pub health: u16,
    pub metrics: u16,
    pub api: Server,
    _node: super::node::Node,
}

impl Cluster {
    pub fn new(tag: &str) -> Cluster {
        // The node's dirs and ports (removed with it), with the double's CA and token as the service account.
        let node = super::node::Node::new(tag);
        let root = node.root.clone();
        let c = Cluster {
            conf: node.conf.clone(),
            bin: root.join("bin"),
            run: root.join("run"),
            sa: root.join("sa"),
            root,
            health: node.health,
            metrics: node.metrics,
            api: Server::start(Options::default()).unwrap(),
            _node: node,
        };
        fs::write(c.sa.join("ca.crt"), c.api.ca_pem()).unwrap();
        fs::write(c.sa.join("token"), c.api.token()).unwrap();
        fs::write(c.sa.join("namespace"), NS).unwrap();
        atomic_write(&c.conf.join(PRIMARY), PRIMARY_TEXT.as_bytes(), 0o644);
        c.api.add_daemonset(&daemonset_json()).unwrap();
        c.api.add_node(&node_json("linux")).unwrap();
        c
    }

    /// The service-account token the next agent reads (the kubelet mounts each pod's own).
    pub fn set_sa_token(&self, token: &str) {
        fs::write(self.sa.join("token"), token).unwrap();
    }

    /// Starts the agent of pod `pod` (added to the API) with `extra` settings.
    pub fn start(&self, pod: &str, extra: &[(&str, &str)]) -> Proc {
        self.api.add_pod(&agent_pod_json(pod)).unwrap();
        let mut env = installer_env(&InstallerDirs {
            conf: &self.conf,
            run: &self.run,
            bin: &self.bin,
            sa: &self.sa,
            health: self.health,
            metrics: self.metrics,
        });
        let addr = self.api.addr();
        set_env(
            &mut env,
            &[
                ("REPAIR_ENABLED", "false"),
                ("KUBERNETES_SERVICE_HOST", &addr.ip().to_string()),
                ("KUBERNETES_SERVICE_PORT", &addr.port().to_string()),
                ("POD_NAMESPACE", NS),
                ("POD_NAME", pod),
                ("NODE_NAME", NODE),
            ],
        );
        set_env(&mut env, extra);
        spawn_installer(&env, &[], &self.root.join(format!("{pod}.stderr")))
    }

    pub fn ready(&self) -> bool {
        super::node::get(self.health, "/readyz").is_some_and(|(c, _)| c == 200)
    }

    pub fn wait_ready(&self, p: &Proc) -> Duration {
        let t = Instant::now();
        while !self.ready() {
            assert!(t.elapsed() < LONG, "not ready:\n{}", p.stderr());
            std::thread::sleep(Duration::from_millis(2));
        }
        t.elapsed()
    }

    /// The three things an install leaves on the node: primary, binary, kubeconfig (None when absent).
    pub fn state(&self) -> [Option<Vec<u8>>; 3] {
        [
            fs::read(self.conf.join(PRIMARY)).ok(),
            fs::read(self.bin.join("istio-cni")).ok(),
            fs::read(self.run.join("istio-cni-kubeconfig")).ok(),
        ]
    }

    pub fn entries(&self) -> usize {
        conflist::count_entries(&fs::read_to_string(self.conf.join(PRIMARY)).unwrap_or_default())
    }

    /// SIGTERM; waits for the exit (success required); returns how long it took and the stderr.
    pub fn stop(&self, mut p: Proc) -> (Duration, String) {
        let t = Instant::now();
        p.signal(Signal::SIGTERM);
        let st = p.wait_exit(LONG);
        let took = t.elapsed();
        assert!(st.success(), "exit {st:?}\n{}", p.stderr());
        (took, p.stderr())
    }

    /// Asserts what the stop decided: the rule in the one decision line, kept or removed.
    pub fn assert_decision(&self, log: &str, rule: &str, kept: bool) -> String {
        let line = log
            .lines()
            .find(|l| l.contains("(rule "))
            .unwrap_or_else(|| panic!("no decision line:\n{log}"))
            .to_string();
        assert!(line.contains(&format!("(rule {rule})")), "{line}");
        let [primary, bin, kc] = self.state();
        if kept {
            assert!(line.contains("leaving the istio-cni entry"), "{line}");
            assert_eq!(self.entries(), 1, "entry gone:\n{log}");
            assert!(
                bin.is_some() && kc.is_some(),
                "binary or kubeconfig gone:\n{log}"
            );
        } else {
            assert!(line.contains("removing the istio-cni entry"), "{line}");
            assert_eq!(
                canon(&String::from_utf8(primary.unwrap()).unwrap()),
                canon(PRIMARY_TEXT)
            );
            assert!(
                bin.is_none() && kc.is_none(),
                "binary or kubeconfig left:\n{log}"
            );
        }
        line
    }
}

/// Watches the conf dir with inotify: every version of the primary seen (at each event: the file, and our
/// temp file of it before its rename) must hold our entry, and the primary must never be removed or
/// renamed away (an atomic exchange with a temp file is neither).
pub struct ConfWatch {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<(usize, Vec<String>)>>,
}

impl ConfWatch {
    pub fn start(dir: PathBuf) -> ConfWatch {
        let stop = Arc::new(AtomicBool::new(false));
        let ino = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC).unwrap();
        ino.add_watch(
            &dir,
            AddWatchFlags::IN_CLOSE_WRITE
                | AddWatchFlags::IN_MOVED_TO
                | AddWatchFlags::IN_MOVED_FROM
                | AddWatchFlags::IN_DELETE
                | AddWatchFlags::IN_CREATE
                | AddWatchFlags::IN_MODIFY,
        )
        .unwrap();
        let s = stop.clone();
        let thread = std::thread::spawn(move || {
            let (mut seen, mut bad) = (0usize, Vec::<String>::new());
            let (mut moved_away, mut exchanged) = (Vec::new(), Vec::new());
            let check =
                |what: &str, text: Option<String>, seen: &mut usize, bad: &mut Vec<String>| {
                    if let Some(t) = text {
                        *seen += 1;
                        if conflist::count_entries(&t) != 1 {
                            bad.push(format!("{what} without exactly one entry:\n{t}"));
                        }
                    }
                };
            loop {
                let done = s.load(Ordering::SeqCst);
                match ino.read_events() {
                    Ok(evs) => {
                        for e in evs {
                            let Some(name) =
                                e.name.as_ref().map(|n| n.to_string_lossy().into_owned())
                            else {
                                continue;
                            };
                            let is_primary = name == PRIMARY;
                            let is_temp = istio_cni::fsutil::temp_owner(&name) == Some(PRIMARY);
                            if is_primary && e.mask.contains(AddWatchFlags::IN_DELETE) {
                                bad.push("the primary was deleted".into());
                            }
                            // renameat2(RENAME_EXCHANGE) of a temp file with the primary shows as the
                            // primary moved to the temp's name (same cookie): never absent. Any other move
                            // away is a removal.
                            if is_primary && e.mask.contains(AddWatchFlags::IN_MOVED_FROM) {
                                moved_away.push(e.cookie);
                            }
                            if is_temp && e.mask.contains(AddWatchFlags::IN_MOVED_TO) {
                                exchanged.push(e.cookie);
                            }
                            if is_primary
                                || (is_temp && e.mask.contains(AddWatchFlags::IN_CLOSE_WRITE))
                            {
                                let text = fs::read_to_string(dir.join(&name)).ok();
                                check(&name, text, &mut seen, &mut bad);
                            }
                        }
                    }
                    Err(_) if done => {
                        for c in moved_away.iter().filter(|c| !exchanged.contains(c)) {
                            bad.push(format!("the primary was renamed away (cookie {c})"));
                        }
                        return (seen, bad);
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(1)),
                }
            }
        });
        ConfWatch {
            stop,
            thread: Some(thread),
        }
    }

    /// Stops; returns the number of versions read and the violations.
    pub fn finish(mut self) -> (usize, Vec<String>) {
        std::thread::sleep(Duration::from_millis(20));
        self.stop.store(true, Ordering::SeqCst);
        self.thread.take().unwrap().join().unwrap()
    }
}
