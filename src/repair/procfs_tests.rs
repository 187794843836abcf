use super::*;

const FIB: &str = "Main:
  +-- 0.0.0.0/0 3 0 5
     |-- 0.0.0.0
        /0 universe UNICAST
     +-- 10.1.1.0/24 2 0 2
        +-- 10.1.1.0/30 2 0 2
           |-- 10.1.1.0
              /24 link UNICAST
           |-- 10.1.1.2
              /32 host LOCAL
        |-- 10.1.1.255
           /32 link BROADCAST
     +-- 127.0.0.0/8 2 0 2
        |-- 127.0.0.1
           /32 host LOCAL
Local:
  +-- 0.0.0.0/0 3 0 5
           |-- 10.1.1.2
              /32 host LOCAL
";

#[test]
fn parses_proc_files() {
    let v4 = fib_trie_local_v4(FIB);
    assert_eq!(
        v4,
        vec![
            "10.1.1.2".parse::<std::net::Ipv4Addr>().unwrap(),
            "127.0.0.1".parse().unwrap()
        ]
    );
    let v6 = if_inet6_addrs(
            "fd000000000000000000000000000002 02 40 00 80     eth0\n00000000000000000000000000000001 01 80 10 80       lo\n",
        );
    assert_eq!(
        v6,
        vec![
            "fd00::2".parse::<std::net::Ipv6Addr>().unwrap(),
            "::1".parse().unwrap()
        ]
    );
    let stat = "42 (a b) c) S 1 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10";
    assert_eq!(start_time(stat), Some(987654));
    assert_eq!(start_time("garbage"), None);
}

#[test]
fn a_scan_keeps_the_cgroup_paths_that_can_name_a_pod() {
    let uid = "6c1a2f4e-0b9d-4e55-9a3c-1f2e3d4c5b6a";
    let slice = "/kubepods.slice/kubepods-besteffort.slice/\
                     kubepods-besteffort-pod6c1a2f4e_0b9d_4e55_9a3c_1f2e3d4c5b6a.slice/cri-containerd-1.scope";
    let v1 = format!("12:pids:{slice}\n11:memory:{slice}\n1:name=systemd:/user.slice\n0::/\n");
    let kept = pod_paths(&v1);
    assert_eq!(kept, format!("::{slice}\n"));
    assert!(pod_netns::cgroup_names_pod(&v1, uid));
    assert!(pod_netns::cgroup_names_pod(&kept, uid));
    let cgroupfs = format!("5:cpu:/kubepods/besteffort/pod{uid}/abc\n");
    assert!(pod_netns::cgroup_names_pod(&pod_paths(&cgroupfs), uid));
    assert_eq!(pod_paths("0::/system.slice/ssh.service\n"), "");
}

#[test]
fn nothing_is_found_for_a_pod_without_processes_whatever_holds_its_ip() {
    // 127.0.0.1 is local in every namespace, the host's among them: no process is in the pod's cgroup.
    let uid = "6c1a2f4e-0b9d-4e55-9a3c-1f2e3d4c5b6a";
    for ip in ["127.0.0.1", "203.0.113.77"] {
        let e = find_pod_netns(Path::new("/proc"), ip.parse().unwrap(), uid).unwrap_err();
        assert!(
            e.to_string().contains("no process is in the cgroup of pod"),
            "{e}"
        );
    }
}

#[test]
fn an_address_list_over_the_cap_is_an_error_not_an_absence() {
    let dir = std::env::temp_dir().join(format!("procfs-cap-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("net")).unwrap();
    let mut big = FIB.to_string();
    while (big.len() as u64) <= MAX_NET_FILE {
        big.push_str("           |-- 10.9.9.9\n              /32 host LOCAL\n");
    }
    std::fs::write(dir.join("net/fib_trie"), &big).unwrap();
    let e = netns_holds(&dir, "10.1.1.3".parse().unwrap()).unwrap_err();
    assert!(e.contains("larger than"), "{e}");
    assert!(!netns_has(&dir, "10.1.1.2".parse().unwrap()));
    std::fs::write(dir.join("net/fib_trie"), FIB).unwrap();
    assert_eq!(netns_holds(&dir, "10.1.1.2".parse().unwrap()), Ok(true));
    assert_eq!(netns_holds(&dir, "10.1.1.3".parse().unwrap()), Ok(false));
    let _ = std::fs::remove_dir_all(&dir);
}
