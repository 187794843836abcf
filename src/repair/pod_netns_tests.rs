//! Tests of choosing the pod's namespace (pod_netns.rs).
use super::*;

const UID: &str = "6c1a2f4e-0b9d-4e55-9a3c-1f2e3d4c5b6a";
const U_: &str = "6c1a2f4e_0b9d_4e55_9a3c_1f2e3d4c5b6a";

fn holder(ino: u64, pid: u32) -> Holder {
    Holder {
        ns: (4, ino),
        start: pid as u64,
        pid,
        is_pod: true,
        host: false,
    }
}

fn cand(ino: u64, pid: u32, holds: std::result::Result<bool, String>) -> Candidate {
    Candidate {
        holder: holder(ino, pid),
        foreign: None,
        holds,
    }
}

fn ip() -> IpAddr {
    "10.1.1.2".parse().unwrap()
}

/// Every recognised layout (`{U}`: the UID, `{U_}`: with underscores), as the host sees it and as a
/// cgroup namespace shows it.
const RECOGNISED: &[&str] = &[
    // cgroupfs driver: guaranteed, burstable, besteffort; containerd/docker ids, CRI-O.
    "/kubepods/pod{U}/0123abcd",
    "/kubepods/burstable/pod{U}/0123abcd",
    "/kubepods/besteffort/pod{U}/crio-0123abcd",
    "/kubepods/besteffort/pod{U}",
    // kind-style cgroupfs root (`--cgroup-root=/kubelet`).
    "/kubelet/kubepods/besteffort/pod{U}/0123abcd",
    // Seen from another cgroup namespace.
    "/../../../besteffort/pod{U}/0123abcd",
    "/../../pod{U}/0123abcd",
    // systemd driver: containerd, CRI-O, docker (cri-dockerd); every QoS class.
    "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{U_}.slice/cri-containerd-0123.scope",
    "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{U_}.slice/crio-0123.scope",
    "/kubepods.slice/kubepods-pod{U_}.slice/crio-conmon-0123.scope",
    "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{U_}.slice/docker-0123.scope",
    // kind-style systemd slices.
    "/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod{U_}.slice/cri-containerd-0123.scope",
    "/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-pod{U_}.slice/cri-containerd-0123.scope",
    // Seen from another cgroup namespace.
    "/../../kubepods-besteffort-pod{U_}.slice/cri-containerd-0123.scope",
    "/../../../kubelet-kubepods-burstable-pod{U_}.slice/cri-containerd-0123.scope",
];

/// Layouts that must name no pod: unrecognised ones refuse, they never fall back.
const REFUSED: &[&str] = &[
    // Another pod.
    "/kubepods/besteffort/pod11111111-2222-3333-4444-555555555555/x",
    "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod11111111_2222_3333_4444_555555555555.slice/x.scope",
    // The UID outside a kubelet layout.
    "/system.slice/x-pod{U}y",
    "/user.slice/pod{U}/x",
    "/user.slice/evil-pod{U_}.slice",
    "/user.slice/kubepods-besteffort-pod{U_}.slice/x.scope",
    "/kubepods/guaranteed/pod{U}/x",
    "/other/besteffort/pod{U}/x",
    // A slice whose parent is not the one its name says.
    "/kubepods.slice/kubepods-burstable.slice/kubepods-besteffort-pod{U_}.slice/x.scope",
    "/kubepods.slice/kubepods-besteffort-pod{U}.slice/x.scope",
    // The UID in a container's name only; a runtime's own path layout; no pod.
    "/kubepods/besteffort/podother/pod{U}-x",
    "/system.slice/containerd.service/kubepods-besteffort-pod{U_}.slice:cri-containerd:0123",
    "/",
];

fn expand(t: &str) -> String {
    t.replace("{U_}", U_).replace("{U}", UID)
}

#[test]
fn every_recognised_cgroup_layout_names_the_pod_in_v1_and_v2_lines() {
    for t in RECOGNISED {
        let path = expand(t);
        for text in [
            format!("0::{path}\n"),
            format!("12:memory:{path}\n11:cpu,cpuacct:{path}\n1:name=systemd:/init.scope\n"),
        ] {
            assert!(cgroup_names_pod(&text, UID), "{text}");
            // Upper-case UIDs in the pod object are the same UID.
            assert!(cgroup_names_pod(&text, &UID.to_uppercase()), "{text}");
            assert!(
                !cgroup_names_pod(&text, "11111111-2222-3333-4444-555555555555"),
                "{text}"
            );
        }
    }
}

#[test]
fn unrecognised_cgroup_layouts_name_no_pod() {
    for t in REFUSED {
        let path = expand(t);
        assert!(!cgroup_names_pod(&format!("0::{path}\n"), UID), "{path}");
        assert!(
            !cgroup_names_pod(&format!("5:pids:{path}\n"), UID),
            "{path}"
        );
    }
    let v1 = format!("12:memory:/kubepods/burstable/pod{UID}/0123abcd\n");
    assert!(!cgroup_names_pod(&v1, ""));
    assert!(!cgroup_names_pod("0::/kubepods/pod*/x\n", "*"));
}

#[test]
fn a_namespace_is_the_pod_s_only_through_its_cgroup_never_by_the_ip_alone() {
    // No process in the pod's cgroup: whatever holds the IP, nothing is chosen.
    let e = choose(ip(), UID, &[]).unwrap_err().to_string();
    assert!(
        e.contains("no process is in the cgroup of pod") && e.contains("kubelet-kubepods"),
        "{e}"
    );
    let real = cand(200, 20, Ok(true));
    assert_eq!(
        choose(ip(), UID, std::slice::from_ref(&real)).unwrap(),
        real.holder
    );
    // The pod's processes are in a namespace without its IP (its sandbox recreated, the API's IP old).
    let e = choose(ip(), UID, &[cand(200, 20, Ok(false))])
        .unwrap_err()
        .to_string();
    assert!(e.contains("is not in the network namespace"), "{e}");
    // A namespace in the pod's cgroup without the IP beside the one with it: the one with it.
    let other = cand(300, 30, Ok(false));
    assert_eq!(
        choose(ip(), UID, &[other, real.clone()]).unwrap(),
        real.holder
    );
}

#[test]
fn foreign_unreadable_and_ambiguous_candidates_are_refused_naming_them() {
    let mut foreign = cand(100, 10, Ok(true));
    foreign.foreign = Some("owned by another user namespace than the node's".into());
    let e = choose(ip(), UID, &[foreign.clone()])
        .unwrap_err()
        .to_string();
    assert!(e.contains("another user") && e.contains("pid 10"), "{e}");
    // A foreign namespace is no candidate: the node's wins.
    let real = cand(200, 20, Ok(true));
    assert_eq!(
        choose(ip(), UID, &[foreign, real.clone()]).unwrap(),
        real.holder
    );
    // One that could not be read might hold the IP too: refused, never taken as not holding it.
    let big = cand(300, 30, Err("fib_trie is larger than 1048576 bytes".into()));
    for cs in [vec![big.clone()], vec![real.clone(), big]] {
        let e = choose(ip(), UID, &cs).unwrap_err().to_string();
        assert!(
            e.contains("cannot be told") && e.contains("larger than"),
            "{e}"
        );
    }
    let e = choose(ip(), UID, &[real.clone(), cand(400, 40, Ok(true))])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("held by 2 network namespaces") && e.contains("pid 20") && e.contains("pid 40"),
        "{e}"
    );
}

fn host_cand(holds: std::result::Result<bool, String>) -> Candidate {
    let mut host = cand(1, 1, holds);
    host.holder.host = true;
    host
}

#[test]
fn a_pod_whose_only_processes_are_in_the_host_namespace_is_refused() {
    // A hostNetwork pod: every process of its cgroup in the host's namespace, which holds every node IP.
    for holds in [Ok(true), Ok(false)] {
        let e = choose(ip(), UID, &[host_cand(holds)])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("outside the host's")
                && e.contains("refusing to program")
                && e.contains("pid 1"),
            "{e}"
        );
    }
}

#[test]
fn a_host_namespace_process_in_the_pod_cgroup_is_no_candidate_the_pod_s_namespace_is_chosen() {
    // CRI-O's conmon (`conmon_cgroup = "pod"`) or `runc init` in the pod's cgroup, in the host's
    // namespace, beside the pause process in the pod's.
    let pause = cand(200, 20, Ok(true));
    for host in [host_cand(Ok(false)), host_cand(Ok(true))] {
        for cs in [
            vec![host.clone(), pause.clone()],
            vec![pause.clone(), host.clone()],
        ] {
            assert_eq!(choose(ip(), UID, &cs).unwrap(), pause.holder);
        }
        // Beside it the rest of the choice is unchanged: the pod's namespace must still hold the IP.
        let e = choose(ip(), UID, &[host.clone(), cand(200, 20, Ok(false))])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("is not in the network namespace") && !e.contains("pid 1 "),
            "{e}"
        );
    }
}
