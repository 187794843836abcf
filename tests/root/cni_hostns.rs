//! Issue 11 item 3 (root): `CNI_NETNS` naming the host's network namespace — the plugin's own
//! (`/proc/self/ns/net`) or PID 1's — must be refused, for ADD and CHECK, before any rule is written; upstream
//! programs the node's own nat table there. To stay off the real host, each "host" here is a namespace the
//! test creates: the plugin runs inside namespace X (where the API double listens), and for the PID 1 case in
//! a private PID namespace whose PID 1 lives in namespace Y.

use crate::support::{run_cmd, run_plugin_in, CniEnv, Netns, PluginDir, PluginOutput, TempDir};
use kube_double::{Options, Server};

const POD: &str = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web","namespace":"default",
  "annotations":{"sidecar.istio.io/status":"{}"}},
  "spec":{"nodeName":"node1","containers":[{"name":"app"},{"name":"istio-proxy","args":["proxy","sidecar"]}]},
  "status":{"podIP":"10.30.0.2","podIPs":[{"ip":"10.30.0.2"}]}}"#;
const ARGS: &str = "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web";

struct Host {
    x: Netns,
    run: TempDir,
    plugins: PluginDir,
    _srv: Server,
}

impl Host {
    /// Namespace X with the API double listening inside it, serving the pod; a run dir with its kubeconfig.
    fn new() -> Host {
        let x = Netns::new("hostns");
        x.exec_ok(&["ip", "addr", "add", "10.30.0.2/24", "dev", "lo"]);
        // The listening socket is created in X (a socket keeps the namespace it was created in).
        let srv = istio_cni::netns::run_in(&x.path(), || {
            Server::start(Options::default())
                .map_err(|e| istio_cni::Error::io("start the API double", e))
        })
        .expect("API double in X");
        srv.add_pod(POD).unwrap();
        let run = TempDir::new("hostns-run");
        srv.write_kubeconfig(&run.join("istio-cni-kubeconfig"))
            .unwrap();
        run.write("iptables-backend", "nft\n");
        Host {
            x,
            run,
            plugins: PluginDir::new(),
            _srv: srv,
        }
    }

    fn conf(&self) -> String {
        format!(
            r#"{{"cniVersion":"1.0.0","name":"hostns","type":"istio-cni","cni_agent_run_dir":"{}",
               "pod_lookup_timeout_seconds":5,
               "prevResult":{{"cniVersion":"1.0.0","interfaces":[{{"name":"eth0"}}],
               "ips":[{{"address":"10.30.0.2/24","interface":0}}]}}}}"#,
            self.run.path().display()
        )
    }

    fn env(&self, command: &str, netns: &str) -> CniEnv {
        CniEnv::new(command, "ctr-hostns", netns, &self.plugins.cni_path()).with_args(ARGS)
    }
}

fn assert_refused(out: &PluginOutput, netns: &str) {
    let msg = out.assert_cni_error(4);
    assert!(
        msg.contains("CNI_NETNS") && msg.contains(netns),
        "the error must name CNI_NETNS and the path:\n{out}"
    );
}

fn has_istio_rules(ns: &Netns) -> bool {
    ns.saved_rules("iptables-nft-save").contains("ISTIO")
}

#[test]
fn the_plugins_own_namespace_is_refused() {
    if !crate::support::require_root() {
        return;
    }
    let h = Host::new();
    let conf = h.conf();
    for command in ["ADD", "CHECK"] {
        let env = h.env(command, "/proc/self/ns/net");
        let out = run_plugin_in(&h.x, &h.plugins.istio_cni(), &env, conf.as_bytes());
        assert_refused(&out, "/proc/self/ns/net");
        assert!(
            !has_istio_rules(&h.x),
            "{command} programmed its own namespace"
        );
    }
    // The same namespace by its bind-mount path is the same namespace (device and inode compared).
    let env = h.env("ADD", &h.x.path());
    let out = run_plugin_in(&h.x, &h.plugins.istio_cni(), &env, conf.as_bytes());
    assert_refused(&out, &h.x.path());
    assert!(!has_istio_rules(&h.x));
    // A pod namespace is still programmed from there: the refusal is about the target only.
    let pod = Netns::new("hostns-pod");
    pod.exec_ok(&["ip", "addr", "add", "10.30.1.2/24", "dev", "lo"]);
    let env = h.env("ADD", &pod.path());
    run_plugin_in(&h.x, &h.plugins.istio_cni(), &env, conf.as_bytes()).assert_success();
    assert!(has_istio_rules(&pod));
}

#[test]
fn pid_1s_namespace_is_refused() {
    if !crate::support::require_root() {
        return;
    }
    let h = Host::new();
    let y = Netns::new("hostns-pid1");
    // In a new PID namespace entered from Y, `sh` is PID 1 (so /proc/1/ns/net is Y); it runs the plugin in X,
    // where the API double is, and does not exec it (the plugin must not become PID 1 itself).
    let mut cmd = std::process::Command::new("ip");
    cmd.args([
        "netns",
        "exec",
        y.name(),
        "unshare",
        "--pid",
        "--fork",
        "--mount-proc",
    ])
    .args(["sh", "-c", r#"nsenter --net="$1" "$2"; exit $?"#, "sh"])
    .arg(h.x.path())
    .arg(h.plugins.istio_cni());
    let out = run_cmd(cmd, &h.env("ADD", "/proc/1/ns/net"), h.conf().as_bytes());
    assert_refused(&out, "/proc/1/ns/net");
    assert!(!has_istio_rules(&y), "ADD programmed PID 1's namespace");
    assert!(!has_istio_rules(&h.x));
}

/// The other forms a runtime gives `CNI_NETNS` in: a process's `/proc/<pid>/ns/net` (dockershim, older
/// runtimes) and a symlink to a bind mount are programmed in the namespace they name; a symlink whose target
/// is the plugin's own namespace (`/proc/self/ns/net`, read in the plugin) is refused like the path itself.
#[test]
fn proc_pid_and_symlinked_paths_name_the_namespace_they_point_to() {
    if !crate::support::require_root() {
        return;
    }
    let h = Host::new();
    let conf = h.conf();

    let by_pid = Netns::new("hostns-pid");
    by_pid.exec_ok(&["ip", "addr", "add", "10.30.2.2/24", "dev", "lo"]);
    let mut holder = std::process::Command::new("ip")
        .args(["netns", "exec", by_pid.name(), "sleep", "60"])
        .spawn()
        .unwrap();
    // `ip netns exec` execs sleep in place: its pid is the holder's, once it is in the namespace.
    let path = format!("/proc/{}/ns/net", holder.id());
    let target = std::fs::metadata(by_pid.path()).unwrap();
    let start = std::time::Instant::now();
    while !std::fs::metadata(&path).is_ok_and(|m| {
        use std::os::unix::fs::MetadataExt;
        (m.dev(), m.ino()) == (target.dev(), target.ino())
    }) {
        assert!(
            start.elapsed().as_secs() < 30,
            "the holder never entered {}",
            by_pid.name()
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let out = run_plugin_in(
        &h.x,
        &h.plugins.istio_cni(),
        &h.env("ADD", &path),
        conf.as_bytes(),
    );
    let _ = holder.kill();
    let _ = holder.wait();
    out.assert_success();
    assert!(has_istio_rules(&by_pid), "ADD through {path}:\n{out}");
    assert!(!has_istio_rules(&h.x));

    let links = TempDir::new("hostns-links");
    let pod = Netns::new("hostns-link");
    pod.exec_ok(&["ip", "addr", "add", "10.30.3.2/24", "dev", "lo"]);
    let to_pod = links.join("pod");
    std::os::unix::fs::symlink(pod.path(), &to_pod).unwrap();
    let to_pod = to_pod.display().to_string();
    let out = run_plugin_in(
        &h.x,
        &h.plugins.istio_cni(),
        &h.env("ADD", &to_pod),
        conf.as_bytes(),
    );
    out.assert_success();
    assert!(has_istio_rules(&pod), "ADD through {to_pod}:\n{out}");

    let to_self = links.join("self");
    std::os::unix::fs::symlink("/proc/self/ns/net", &to_self).unwrap();
    let to_self = to_self.display().to_string();
    let out = run_plugin_in(
        &h.x,
        &h.plugins.istio_cni(),
        &h.env("ADD", &to_self),
        conf.as_bytes(),
    );
    assert_refused(&out, &to_self);
    assert!(
        !has_istio_rules(&h.x),
        "ADD through {to_self} programmed the plugin's namespace"
    );
}
