//! SIGTERM during a rolling update versus an uninstall, against the API double: the installer reads its own
//! pod, its DaemonSet and its node, and leaves the entry, the binary and the kubeconfig in place for the next
//! agent (which takes them over without ever writing a config that lacks our entry, watched with inotify),
//! or removes them when the DaemonSet is gone, being deleted or no longer runs on the node, when the token
//! is refused, or (upstream's default) when there is no answer. Timings are printed, never asserted; the
//! bound on the decision is asserted with a margin only a hang would break.

use crate::support::install::*;
use istio_cni::install::conflist;
use kube_double::{Fault, Options, Server};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
use nix::sys::signal::Signal;
use std::fs;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const PRIMARY: &str = "10-calico.conflist";
const NS: &str = "istio-system";
const DS: &str = "istio-cni-node";
const NODE: &str = "node-1";
const LONG: Duration = Duration::from_secs(15);

const PRIMARY_TEXT: &str = r#"{
  "name": "k8s-pod-network",
  "cniVersion": "0.3.1",
  "plugins": [
    { "type": "calico", "ipam": { "type": "calico-ipam" } },
    { "type": "portmap", "snat": true, "capabilities": { "portMappings": true } }
  ]
}
"#;

/// Upstream's chart's DaemonSet, as far as scheduling goes: Linux nodes, every taint tolerated.
fn daemonset_json() -> String {
    format!(
        r#"{{"metadata":{{"name":"{DS}","namespace":"{NS}"}},"spec":{{"selector":{{"matchLabels":{{"k8s-app":"istio-cni-node"}}}},
           "template":{{"metadata":{{"labels":{{"k8s-app":"istio-cni-node"}}}},"spec":{{
             "nodeSelector":{{"kubernetes.io/os":"linux"}},
             "tolerations":[{{"effect":"NoSchedule","operator":"Exists"}},{{"key":"CriticalAddonsOnly","operator":"Exists"}},
                            {{"effect":"NoExecute","operator":"Exists"}}],
             "containers":[{{"name":"install-cni","image":"install-cni"}}]}}}}}}}}"#
    )
}

fn node_json(os: &str) -> String {
    format!(
        r#"{{"metadata":{{"name":"{NODE}","labels":{{"kubernetes.io/os":"{os}","kubernetes.io/hostname":"{NODE}"}}}},"spec":{{}}}}"#
    )
}

/// An agent pod of the DaemonSet on the node.
fn agent_pod_json(name: &str) -> String {
    format!(
        r#"{{"metadata":{{"name":"{name}","namespace":"{NS}","labels":{{"k8s-app":"istio-cni-node"}},
           "ownerReferences":[{{"apiVersion":"apps/v1","kind":"DaemonSet","name":"{DS}","uid":"ds-uid","controller":true,"blockOwnerDeletion":true}}]}},
           "spec":{{"nodeName":"{NODE}","containers":[{{"name":"install-cni"}}]}}}}"#
    )
}

/// A node's CNI dirs, the API double serving our DaemonSet, node and agent pods, and agents started on them.
struct Cluster {
    root: PathBuf,
    conf: PathBuf,
    bin: PathBuf,
    run: PathBuf,
    sa: PathBuf,
    health: u16,
    metrics: u16,
    api: Server,
}

impl Cluster {
    fn new(tag: &str) -> Cluster {
        let root = tempdir(tag);
        let c = Cluster {
            conf: root.join("conf"),
            bin: root.join("bin"),
            run: root.join("run"),
            sa: root.join("sa"),
            root,
            health: free_port(),
            metrics: free_port(),
            api: Server::start(Options::default()).unwrap(),
        };
        for d in [&c.conf, &c.bin, &c.run, &c.sa] {
            fs::create_dir_all(d).unwrap();
        }
        fs::write(c.sa.join("ca.crt"), c.api.ca_pem()).unwrap();
        fs::write(c.sa.join("token"), c.api.token()).unwrap();
        fs::write(c.sa.join("namespace"), NS).unwrap();
        atomic_write(&c.conf.join(PRIMARY), PRIMARY_TEXT.as_bytes(), 0o644);
        c.api.add_daemonset(&daemonset_json()).unwrap();
        c.api.add_node(&node_json("linux")).unwrap();
        c
    }

    /// Starts the agent of pod `pod` (added to the API) with `extra` settings.
    fn start(&self, pod: &str, extra: &[(&str, &str)]) -> Proc {
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

    fn ready(&self) -> bool {
        node::get(self.health, "/readyz").is_some_and(|(c, _)| c == 200)
    }

    fn wait_ready(&self, p: &Proc) -> Duration {
        let t = Instant::now();
        while !self.ready() {
            assert!(t.elapsed() < LONG, "not ready:\n{}", p.stderr());
            std::thread::sleep(Duration::from_millis(2));
        }
        t.elapsed()
    }

    /// The three things an install leaves on the node: primary, binary, kubeconfig (None when absent).
    fn state(&self) -> [Option<Vec<u8>>; 3] {
        [
            fs::read(self.conf.join(PRIMARY)).ok(),
            fs::read(self.bin.join("istio-cni")).ok(),
            fs::read(self.run.join("istio-cni-kubeconfig")).ok(),
        ]
    }

    fn entries(&self) -> usize {
        conflist::count_entries(&fs::read_to_string(self.conf.join(PRIMARY)).unwrap_or_default())
    }

    /// SIGTERM; waits for the exit (success required); returns how long it took and the stderr.
    fn stop(&self, mut p: Proc) -> (Duration, String) {
        let t = Instant::now();
        p.signal(Signal::SIGTERM);
        let st = p.wait_exit(LONG);
        let took = t.elapsed();
        assert!(st.success(), "exit {st:?}\n{}", p.stderr());
        (took, p.stderr())
    }

    /// Asserts what the stop decided: the rule in the one decision line, kept or removed.
    fn assert_decision(&self, log: &str, rule: &str, kept: bool) -> String {
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

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.root);
    }
}

/// Watches the conf dir with inotify: every version of the primary seen (at each event: the file, and our
/// temp file of it before its rename) must hold our entry, and the primary must never be removed or
/// renamed away (an atomic exchange with a temp file is neither).
struct ConfWatch {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<(usize, Vec<String>)>>,
}

impl ConfWatch {
    fn start(dir: PathBuf) -> ConfWatch {
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
    fn finish(mut self) -> (usize, Vec<String>) {
        std::thread::sleep(Duration::from_millis(20));
        self.stop.store(true, Ordering::SeqCst);
        self.thread.take().unwrap().join().unwrap()
    }
}

#[test]
fn a_rolling_update_keeps_everything_and_the_next_agent_takes_over() {
    let c = Cluster::new("handover");
    let a = c.start("istio-cni-node-aaaaa", &[]);
    let ready_a = c.wait_ready(&a);
    let before = c.state();
    assert!(before.iter().all(Option::is_some) && c.entries() == 1);

    let watch = ConfWatch::start(c.conf.clone());
    let (exit_a, log_a) = c.stop(a);
    let line = c.assert_decision(&log_a, "replacement", true);
    assert_eq!(
        c.state(),
        before,
        "primary, binary and kubeconfig byte for byte"
    );
    assert!(
        line.contains(&format!("{NS}/{DS}")) && line.contains(NODE),
        "{line}"
    );
    // Three GETs: our pod, the DaemonSet, the node (its template asks for a Linux node).
    let paths: Vec<String> = c.api.requests().iter().map(|r| r.path.clone()).collect();
    for p in [
        format!("/api/v1/namespaces/{NS}/pods/istio-cni-node-aaaaa"),
        format!("/apis/apps/v1/namespaces/{NS}/daemonsets/{DS}"),
        format!("/api/v1/nodes/{NODE}"),
    ] {
        assert!(paths.contains(&p), "{p} not asked: {paths:?}");
    }

    // The next agent takes over the kept state: a changed setting, so it rewrites the entry (in place).
    c.api.delete_pod(NS, "istio-cni-node-aaaaa").unwrap();
    let t = Instant::now();
    let b = c.start(
        "istio-cni-node-bbbbb",
        &[("EXCLUDE_NAMESPACES", "kube-system")],
    );
    let ready_b = c.wait_ready(&b);
    let start_to_ready = t.elapsed();
    let (versions, bad) = watch.finish();
    assert!(bad.is_empty(), "{}\n{}", bad.join("\n"), b.stderr());
    assert!(versions >= 1, "the new entry was written");
    let text = fs::read_to_string(c.conf.join(PRIMARY)).unwrap();
    assert!(
        text.contains("\"kube-system\"") && c.entries() == 1,
        "{text}"
    );
    println!(
        "handover: agent A ready in {:.1} ms; SIGTERM -> exit {:.1} ms; agent B start -> ready {:.1} ms \
         (/readyz polled from {:.1} ms); {versions} primary version(s) seen, all with the entry",
        ready_a.as_secs_f64() * 1e3,
        exit_a.as_secs_f64() * 1e3,
        start_to_ready.as_secs_f64() * 1e3,
        ready_b.as_secs_f64() * 1e3
    );

    // The same settings again: nothing to rewrite at all.
    let (_, log_b) = c.stop(b);
    c.assert_decision(&log_b, "replacement", true);
    let kept = c.state();
    let watch = ConfWatch::start(c.conf.clone());
    let b2 = c.start(
        "istio-cni-node-ccccc",
        &[("EXCLUDE_NAMESPACES", "kube-system")],
    );
    c.wait_ready(&b2);
    let (versions, bad) = watch.finish();
    assert!(
        bad.is_empty() && versions == 0,
        "{versions} writes: {bad:?}"
    );
    assert_eq!(c.state(), kept);

    // The DaemonSet is deleted (uninstall): the agent removes everything.
    assert!(c.api.delete_daemonset(NS, DS));
    let (exit, log) = c.stop(b2);
    c.assert_decision(&log, "daemonset-gone", false);
    println!(
        "uninstall: SIGTERM -> exit {:.1} ms",
        exit.as_secs_f64() * 1e3
    );
}

#[test]
fn a_daemonset_being_deleted_or_no_longer_here_is_an_uninstall() {
    let c = Cluster::new("handover-gone");
    let p = c.start("istio-cni-node-aaaaa", &[]);
    c.wait_ready(&p);
    assert!(c.api.mark_daemonset_deleting(NS, DS));
    let (_, log) = c.stop(p);
    c.assert_decision(&log, "daemonset-deleting", false);

    // The node is relabelled so the template's nodeSelector no longer matches.
    c.api.add_daemonset(&daemonset_json()).unwrap();
    let p = c.start("istio-cni-node-bbbbb", &[]);
    c.wait_ready(&p);
    c.api.add_node(&node_json("windows")).unwrap();
    let (_, log) = c.stop(p);
    let line = c.assert_decision(&log, "not-scheduled-here", false);
    assert!(line.contains("kubernetes.io/os=linux"), "{line}");

    // The node object is gone.
    c.api.add_node(&node_json("linux")).unwrap();
    let p = c.start("istio-cni-node-ccccc", &[]);
    c.wait_ready(&p);
    assert!(c.api.delete_node(NODE));
    let (_, log) = c.stop(p);
    c.assert_decision(&log, "node-gone", false);
}

#[test]
fn a_refused_token_is_an_uninstall() {
    let c = Cluster::new("handover-401");
    let p = c.start("istio-cni-node-aaaaa", &[]);
    c.wait_ready(&p);
    c.api.set_token("another-token");
    let (_, log) = c.stop(p);
    c.assert_decision(&log, "unauthorized", false);
}

/// Upstream's chart grants no `get` on daemonsets in sidecar mode: 403, today's cleanup, and a log line
/// that names the grant to add.
#[test]
fn forbidden_daemonsets_clean_up_naming_the_missing_grant() {
    let c = Cluster::new("handover-403");
    let p = c.start("istio-cni-node-aaaaa", &[]);
    c.wait_ready(&p);
    c.api
        .set_resource_fault("daemonsets", Fault::Status(403), None);
    let (took, log) = c.stop(p);
    let line = c.assert_decision(&log, "no-answer", false);
    assert!(
        line.contains("403") && line.contains("get daemonsets.apps in namespace istio-system"),
        "{line}"
    );
    let asked = c
        .api
        .requests()
        .iter()
        .filter(|r| r.path.contains("/daemonsets/"))
        .count();
    assert!(
        (1..=3).contains(&asked),
        "a 403 is asked at most 3 times: {asked}"
    );
    println!(
        "403: SIGTERM -> exit {:.1} ms, {asked} DaemonSet GET(s)",
        took.as_secs_f64() * 1e3
    );
}

/// An API server that accepts and never answers: the decision is bounded (4 s of lookups, 5 s at most),
/// then upstream's default: cleanup, or keep with ISTIO_OWNED_CNI_CONFIG.
#[test]
fn a_hung_api_is_bounded_then_takes_upstreams_default() {
    for (owned, kept) in [("false", false), ("true", true)] {
        let c = Cluster::new("handover-hang");
        let p = c.start("istio-cni-node-aaaaa", &[("ISTIO_OWNED_CNI_CONFIG", owned)]);
        c.wait_ready(&p);
        let before = c.state();
        c.api.set_resource_fault("daemonsets", Fault::Stall, None);
        let (took, log) = c.stop(p);
        c.api.clear_resource_fault("daemonsets");
        println!(
            "hung API (owned={owned}): SIGTERM -> exit {:.1} ms",
            took.as_secs_f64() * 1e3
        );
        assert!(took < Duration::from_secs(10), "took {took:?}:\n{log}");
        let line = log
            .lines()
            .find(|l| l.contains("(rule "))
            .unwrap_or_default();
        assert!(line.contains("(rule no-answer)"), "{log}");
        if kept {
            assert!(line.contains("ISTIO_OWNED_CNI_CONFIG"), "{line}");
            assert_eq!(c.state(), before);
        } else {
            assert!(line.contains("removing"), "{line}");
            assert!(c.state()[1].is_none());
        }
    }
}

#[test]
fn turned_off_it_cleans_up_as_upstreams_sidecar_mode_does() {
    for var in ["DISABLE_SAFE_UPGRADE", "AMBIENT_DISABLE_SAFE_UPGRADE"] {
        let c = Cluster::new("handover-off");
        let p = c.start("istio-cni-node-aaaaa", &[(var, "true")]);
        c.wait_ready(&p);
        c.api.clear_requests();
        let (_, log) = c.stop(p);
        let line = c.assert_decision(&log, "disabled", false);
        assert!(line.contains(&format!("{var}=true")), "{line}");
        assert!(c.api.requests().is_empty(), "no API call when turned off");
    }
}

/// Without POD_NAME, or with our pod unreadable, upstream's DaemonSet name in POD_NAMESPACE is used.
#[test]
fn upstreams_daemonset_name_is_the_fallback() {
    let c = Cluster::new("handover-name");
    let p = c.start("istio-cni-node-aaaaa", &[("POD_NAME", "")]);
    c.wait_ready(&p);
    let (_, log) = c.stop(p);
    let line = c.assert_decision(&log, "replacement", true);
    assert!(line.contains("upstream's default name"), "{line}");

    c.api.set_resource_fault("pods", Fault::Status(403), None);
    let p = c.start("istio-cni-node-bbbbb", &[]);
    c.wait_ready(&p);
    let (_, log) = c.stop(p);
    let line = c.assert_decision(&log, "replacement", true);
    assert!(line.contains("our pod could not be read"), "{line}");
}
