//! Finding a pod's network namespace from the host's /proc (`repair::procfs`, what the audit and repair
//! in place use), against real namespaces and cgroups: a namespace is the pod's only through a process in
//! the pod's cgroup; decoys holding its IP (another user namespace, another pod, no pod at all) are never
//! chosen; an oversized unrelated namespace is never read; an oversized pod namespace is refused.

use crate::support::repair::{Pause, PodCgroup};
use crate::support::{unique_name, Netns};
use istio_cni::repair::procfs::{self, find_pod_netns, MAX_NET_FILE};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};

fn uid(n: u8) -> String {
    format!(
        "{n:02x}{:06x}-5e1f-4a0b-9c2d-{:012x}",
        std::process::id(),
        n as u64
    )
}

/// A namespace holding `ip` on `lo`, with a long-running process in it.
fn ns_with(ip: &str) -> (Netns, Pause) {
    let ns = Netns::new("pnf");
    ns.exec_ok(&["ip", "addr", "add", &format!("{ip}/32"), "dev", "lo"]);
    let pause = Pause::start(&ns);
    entered(&ns, &pause);
    (ns, pause)
}

/// Waits until `pause` (`ip netns exec … sleep`) lives in `ns`.
fn entered(ns: &Netns, pause: &Pause) {
    let want = ns_id(&ns.path());
    let inside = (0..400).any(|_| {
        let md = std::fs::metadata(format!("/proc/{}/ns/net", pause.pid()));
        md.is_ok_and(|m| (m.dev(), m.ino()) == want) || {
            std::thread::sleep(std::time::Duration::from_millis(25));
            false
        }
    });
    assert!(inside, "the process never entered {}", ns.name());
}

fn ns_id(path: &str) -> (u64, u64) {
    let md = std::fs::metadata(path).unwrap();
    (md.dev(), md.ino())
}

/// A process in a new user and network namespace (`unshare -Urn`, what any user can make) holding `ip`,
/// once it holds it.
struct Decoy(Child);

impl Decoy {
    fn start(ip: &str) -> Decoy {
        let script = format!("ip link set lo up && ip addr add {ip}/32 dev lo && exec sleep 3600");
        let child = Command::new("unshare")
            .args(["-Urn", "sh", "-c", &script])
            .stdin(Stdio::null())
            .spawn()
            .expect("unshare");
        let d = Decoy(child);
        let dir = format!("/proc/{}", d.0.id());
        let ready = (0..200).any(|_| {
            let up =
                std::fs::read_to_string(format!("{dir}/comm")).is_ok_and(|c| c.trim() == "sleep");
            up || {
                std::thread::sleep(std::time::Duration::from_millis(25));
                false
            }
        });
        assert!(ready, "the decoy never started");
        assert!(procfs::netns_has(Path::new(&dir), ip.parse().unwrap()));
        d
    }
    fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Decoy {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_decoy_namespace_holding_the_pod_ip_is_not_a_candidate_with_kind_style_cgroups() {
    let ip = "10.213.1.2";
    let (ns, pause) = ns_with(ip);
    let pod = uid(1);
    let cg = PodCgroup::kind(&pod);
    cg.add(pause.pid());
    let _decoy = Decoy::start(ip);
    let found = find_pod_netns(Path::new("/proc"), ip.parse().unwrap(), &pod)
        .unwrap_or_else(|e| panic!("the pod's namespace beside a decoy: {e}"));
    assert_eq!(found.holder.ns, ns_id(&ns.path()));
    assert_eq!(found.holder.pid, pause.pid());
}

#[test]
fn a_pod_without_processes_never_gets_the_namespace_holding_its_ip() {
    // Pod A runs with the IP; pod B (no process: its sandbox gone or not yet made) still shows it.
    let ip = "10.213.2.2";
    let (_ns, pause) = ns_with(ip);
    let (a, b) = (uid(2), uid(3));
    let cg = PodCgroup::new(&a);
    cg.add(pause.pid());
    assert!(find_pod_netns(Path::new("/proc"), ip.parse().unwrap(), &a).is_ok());
    let e = find_pod_netns(Path::new("/proc"), ip.parse().unwrap(), &b).unwrap_err();
    assert!(
        e.to_string().contains("no process is in the cgroup of pod"),
        "{e}"
    );
}

#[test]
fn a_namespace_owned_by_another_user_namespace_is_not_the_pod_s() {
    // Even in the pod's cgroup, a network namespace a user made (its own user namespace) is refused.
    let ip = "10.213.3.2";
    let pod = uid(4);
    let cg = PodCgroup::new(&pod);
    let decoy = Decoy::start(ip);
    cg.add(decoy.pid());
    let e = find_pod_netns(Path::new("/proc"), ip.parse().unwrap(), &pod).unwrap_err();
    assert!(e.to_string().contains("another user namespace"), "{e}");
}

/// A namespace with `n` local routes (`ip -batch`), a process in it.
fn ns_with_routes(n: u32, extra_ip: Option<&str>) -> (Netns, Pause) {
    let ns = Netns::new("pnfbig");
    let mut batch = String::new();
    for i in 0..n {
        batch.push_str(&format!(
            "route add local 10.{}.{}.{}/32 dev lo table local\n",
            100 + (i >> 16),
            (i >> 8) & 0xff,
            i & 0xff
        ));
    }
    let file = std::env::temp_dir().join(unique_name("routes"));
    std::fs::write(&file, batch).unwrap();
    ns.exec_ok(&["ip", "-batch", file.to_str().unwrap()]);
    let _ = std::fs::remove_file(&file);
    if let Some(ip) = extra_ip {
        ns.exec_ok(&["ip", "addr", "add", &format!("{ip}/32"), "dev", "lo"]);
    }
    let pause = Pause::start(&ns);
    entered(&ns, &pause);
    (ns, pause)
}

#[test]
fn an_oversized_unrelated_namespace_is_not_read_and_an_oversized_pod_namespace_is_refused() {
    let ip = "10.213.4.2";
    let (ns, pause) = ns_with(ip);
    let pod = uid(5);
    let cg = PodCgroup::new(&pod);
    cg.add(pause.pid());
    // 100k local routes, the pod's IP among them, in a namespace of no pod.
    let (_big, big_pause) = ns_with_routes(100_000, Some(ip));
    let text = std::fs::read_to_string(format!("/proc/{}/net/fib_trie", big_pause.pid())).unwrap();
    assert!(text.len() as u64 > MAX_NET_FILE, "{} bytes", text.len());
    let before = procfs::net_bytes_read();
    let found = find_pod_netns(Path::new("/proc"), ip.parse().unwrap(), &pod)
        .unwrap_or_else(|e| panic!("the pod's namespace beside an oversized one: {e}"));
    let read = procfs::net_bytes_read() - before;
    assert_eq!(found.holder.ns, ns_id(&ns.path()));
    // Only the pod's own namespace was read (other tests of this binary may read theirs meanwhile).
    assert!(
        read < MAX_NET_FILE / 2,
        "{read} bytes of address lists read"
    );
    // The oversized namespace is the pod's: refused (unverifiable), never "does not hold the IP".
    let other = uid(6);
    let cg2 = PodCgroup::new(&other);
    cg2.add(big_pause.pid());
    let e = find_pod_netns(Path::new("/proc"), ip.parse().unwrap(), &other).unwrap_err();
    assert!(e.to_string().contains("larger than"), "{e}");
}

/// A long-running process in the host's network namespace (the node's own, as CRI-O's `conmon` is).
struct HostProcess(Child);

impl HostProcess {
    fn start() -> HostProcess {
        let child = Command::new("sleep")
            .arg("3600")
            .stdin(Stdio::null())
            .spawn()
            .expect("sleep");
        HostProcess(child)
    }
    fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for HostProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_host_namespace_process_in_the_pod_s_cgroup_is_passed_over_and_a_host_only_pod_is_refused() {
    // CRI-O with `conmon_cgroup = "pod"`: conmon, in the host's namespace, in the pod's cgroup beside
    // the container's process in the pod's namespace.
    let ip = "10.213.5.2";
    let (ns, pause) = ns_with(ip);
    let pod = uid(7);
    let cg = PodCgroup::scope(&pod, "crio-0123.scope");
    let conmon_cg = PodCgroup::scope(&pod, "crio-conmon-0123.scope");
    cg.add(pause.pid());
    let conmon = HostProcess::start();
    conmon_cg.add(conmon.pid());
    let found = find_pod_netns(Path::new("/proc"), ip.parse().unwrap(), &pod)
        .unwrap_or_else(|e| panic!("the pod's namespace beside conmon: {e}"));
    assert_eq!(found.holder.ns, ns_id(&ns.path()));
    assert_eq!(found.holder.pid, pause.pid());
    // The audit's way: through a round's scan, confirmed after the read.
    let scan = procfs::Scan::read(Path::new("/proc")).unwrap();
    let (pid, held) = procfs::in_pod_netns(
        Path::new("/proc"),
        ip.parse().unwrap(),
        &pod,
        Some(&scan),
        "read",
        |n| Ok(n.holder.pid),
    )
    .unwrap_or_else(|e| panic!("the audit's lookup beside conmon: {e}"));
    assert_eq!((pid, held.holder.ns), (pause.pid(), ns_id(&ns.path())));

    // A pod whose only process is in the host's namespace (hostNetwork) is refused, whatever holds its IP
    // (127.0.0.1: the host's namespace holds it).
    let host_pod = uid(8);
    let host_cg = PodCgroup::scope(&host_pod, "crio-conmon-0456.scope");
    let host_only = HostProcess::start();
    host_cg.add(host_only.pid());
    for ip in ["127.0.0.1", "10.213.5.2"] {
        let e = find_pod_netns(Path::new("/proc"), ip.parse().unwrap(), &host_pod).unwrap_err();
        assert!(
            e.to_string().contains("outside the host's") && e.to_string().contains("refusing"),
            "{e}"
        );
    }
}

#[test]
fn a_static_pod_s_mirror_is_verified_in_the_namespace_of_the_kubelet_s_uid() {
    // The kubelet names the cgroup after its own UID; the API server's mirror has another one and carries
    // the kubelet's in `kubernetes.io/config.mirror`.
    let ip = "10.213.6.2";
    let (_ns, pause) = ns_with(ip);
    let (kubelet_uid, api_uid) = (uid(9), uid(10));
    let cg = PodCgroup::new(&kubelet_uid);
    cg.add(pause.pid());
    let mirror = istio_cni::json::parse_object(
        &format!(
            r#"{{"metadata":{{"name":"web-n1","namespace":"shop","uid":"{api_uid}","resourceVersion":"5",
            "annotations":{{"sidecar.istio.io/status":"{{}}","kubernetes.io/config.mirror":"{kubelet_uid}"}}}},
            "spec":{{"nodeName":"n1","containers":[{{"name":"app"}},{{"name":"istio-proxy","args":["proxy","sidecar"]}}]}},
            "status":{{"phase":"Running","podIP":"{ip}"}}}}"#
        ),
        "pod",
    )
    .unwrap();
    let det = istio_cni::repair::detect::Detector::new(istio_cni::repair::options::Options {
        node_name: "n1".into(),
        ..Default::default()
    })
    .unwrap();
    let run = std::env::temp_dir().join(unique_name("mirror-run"));
    let conf =
        istio_cni::cni::conf::for_agents(run.to_str().unwrap(), "istio-system", &[], true).unwrap();
    let pod = istio_cni::audit::admit(&det, &conf, &mirror).expect("the mirror is audited");
    assert_eq!(pod.facts.uid, api_uid);
    let verdict = istio_cni::audit::round::verify(&pod, Path::new("/proc"), &conf, None);
    // Its namespace was found and read: no rules there.
    assert!(
        matches!(
            verdict,
            Some(istio_cni::audit::verdict::Verdict::Missing(_))
        ),
        "{verdict:?}"
    );
}
