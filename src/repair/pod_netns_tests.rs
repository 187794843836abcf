//! Tests of choosing the pod's namespace (pod_netns.rs).
use super::*;

const UID: &str = "6c1a2f4e-0b9d-4e55-9a3c-1f2e3d4c5b6a";

fn holder(ino: u64, pid: u32, is_pod: bool) -> Holder {
    Holder {
        ns: (4, ino),
        start: pid as u64,
        pid,
        is_pod,
        host: false,
    }
}

fn ip() -> IpAddr {
    "10.1.1.2".parse().unwrap()
}

#[test]
fn kubelet_cgroup_paths_name_the_pod() {
    // cgroupfs driver, cgroup v1 (several hierarchies) and v2.
    let v1 = format!(
        "12:memory:/kubepods/burstable/pod{UID}/0123abcd\n11:cpu,cpuacct:/kubepods/burstable/pod{UID}/0123abcd\n"
    );
    assert!(cgroup_names_pod(&v1, UID));
    assert!(cgroup_names_pod(
        &format!("0::/kubepods/pod{UID}/0123abcd\n"),
        UID
    ));
    // systemd driver: containerd and CRI-O, every QoS class, and as seen from another cgroup namespace.
    let u = UID.replace('-', "_");
    for path in [
        format!("/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{u}.slice/cri-containerd-0123.scope"),
        format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{u}.slice/crio-0123.scope"),
        format!("/kubepods.slice/kubepods-pod{u}.slice/crio-conmon-0123.scope"),
        format!("/../../kubepods-besteffort-pod{u}.slice/cri-containerd-0123.scope"),
    ] {
        assert!(cgroup_names_pod(&format!("0::{path}\n"), UID), "{path}");
        // Upper-case UIDs in the pod object are the same UID.
        assert!(cgroup_names_pod(&format!("0::{path}\n"), &UID.to_uppercase()), "{path}");
    }
    // Another pod, a container ID that merely contains the UID, no UID, a UID that is not one.
    let other = "0::/kubepods/besteffort/pod11111111-2222-3333-4444-555555555555/x\n";
    assert!(!cgroup_names_pod(other, UID));
    assert!(!cgroup_names_pod(
        &format!("0::/system.slice/x-pod{UID}y\n"),
        UID
    ));
    assert!(!cgroup_names_pod(
        &format!("0::/user.slice/evil-pod{u}.slice\n"),
        UID
    ));
    assert!(!cgroup_names_pod("0::/\n", UID));
    assert!(!cgroup_names_pod(&v1, ""));
    assert!(!cgroup_names_pod("0::/kubepods/pod*/x\n", "*"));
}

#[test]
fn the_pod_s_own_namespace_wins_over_an_older_one_holding_its_ip() {
    let hostile = holder(100, 10, false);
    let real = holder(200, 20, true);
    let hs = [hostile.clone(), real.clone()];
    assert_eq!(choose(ip(), UID, &hs, false).unwrap(), &real);
    // A single holder in the pod's cgroup; a single holder when the cgroup layout names no pod at all.
    assert_eq!(
        choose(ip(), UID, std::slice::from_ref(&real), false).unwrap(),
        &real
    );
    assert_eq!(
        choose(ip(), UID, std::slice::from_ref(&hostile), false).unwrap(),
        &hostile
    );
}

#[test]
fn ambiguity_is_refused_naming_the_candidates() {
    let a = holder(100, 10, false);
    let b = holder(200, 20, false);
    let e = choose(ip(), UID, &[a.clone(), b.clone()], false)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("held by 2 network namespaces") && e.contains("pid 10") && e.contains("pid 20"),
        "{e}"
    );
    let (pa, pb) = (holder(100, 10, true), holder(200, 20, true));
    let e = choose(ip(), UID, &[pa, pb], false).unwrap_err().to_string();
    assert!(
        e.contains("in the cgroup of pod") && e.contains("pid 20"),
        "{e}"
    );
    // The pod's processes live elsewhere: the one holder is not the pod's.
    let e = choose(ip(), UID, &[a], true).unwrap_err().to_string();
    assert!(e.contains("another network namespace"), "{e}");
    let e = choose(ip(), UID, &[], false).unwrap_err().to_string();
    assert!(
        e.contains("failed to find network namespace for pod IP 10.1.1.2"),
        "{e}"
    );
    let mut host = holder(1, 1, false);
    host.host = true;
    let e = choose(ip(), UID, &[host, holder(200, 20, true)], false)
        .unwrap_err()
        .to_string();
    assert!(e.contains("refusing to program it"), "{e}");
}
