//! Finding a pod's network namespace from the host's `/proc` by the pod IP (upstream `netns_linux.go`),
//! without entering any namespace: every process's `/proc/<pid>/net/fib_trie` (IPv4 local addresses) and
//! `/proc/<pid>/net/if_inet6` (IPv6) describe the namespace that process lives in. Namespaces are
//! deduplicated by the inode of `/proc/<pid>/ns/net`, so each is read once. Unlike upstream (the oldest
//! process holding the IP wins), the IP only names candidates: the pod's own is the one whose processes are
//! in the pod's cgroup, and anything ambiguous is refused ([`pod_netns::choose`]).

use super::pod_netns::{self, Holder};
use crate::error::{Error, Result};
use std::collections::HashMap;
use std::net::IpAddr;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// IPv4 addresses marked `/32 host LOCAL` in a `fib_trie` dump.
pub fn fib_trie_local_v4(text: &str) -> Vec<std::net::Ipv4Addr> {
    let mut out = Vec::new();
    let mut last: Option<std::net::Ipv4Addr> = None;
    for line in text.lines() {
        let t = line.trim_start();
        if let Some(rest) = t.strip_prefix("|-- ") {
            last = rest.trim().parse().ok();
        } else if t.starts_with("/32 host LOCAL") {
            if let Some(a) = last {
                if !out.contains(&a) {
                    out.push(a);
                }
            }
        }
    }
    out
}

/// The addresses in an `if_inet6` dump (first column, 32 hex digits).
pub fn if_inet6_addrs(text: &str) -> Vec<std::net::Ipv6Addr> {
    text.lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|h| h.len() == 32)
        .filter_map(|h| u128::from_str_radix(h, 16).ok())
        .map(std::net::Ipv6Addr::from)
        .collect()
}

/// Field 22 (`starttime`) of a `/proc/<pid>/stat` line; the command may contain spaces and parens.
pub fn start_time(stat: &str) -> Option<u64> {
    let after = &stat[stat.rfind(')')? + 1..];
    // After the command come fields 3.. ; starttime is field 22, i.e. the 20th here.
    after.split_whitespace().nth(19)?.parse().ok()
}

/// Whether the namespace of the process whose `/proc` directory is `dir` owns `ip`.
pub fn netns_has(dir: &Path, ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => std::fs::read_to_string(dir.join("net/fib_trie"))
            .map(|t| fib_trie_local_v4(&t).contains(&v4))
            .unwrap_or(false),
        IpAddr::V6(v6) => std::fs::read_to_string(dir.join("net/if_inet6"))
            .map(|t| if_inet6_addrs(&t).contains(&v6))
            .unwrap_or(false),
    }
}

/// The distinct paths of a `/proc/<pid>/cgroup` text that can name a pod (they contain `pod`), as lines
/// [`pod_netns::cgroup_names_pod`] reads the same way: a scan keeps every process's for a whole round, and
/// a cgroup v1 host repeats one path per controller.
fn pod_paths(cgroup: &str) -> String {
    let mut out = String::new();
    for path in cgroup.lines().filter_map(|l| l.splitn(3, ':').nth(2)) {
        let line = format!("::{path}\n");
        if path.contains("pod") && !out.contains(&line) {
            out.push_str(&line);
        }
    }
    out.shrink_to_fit();
    out
}

/// One process of a [`Scan`].
struct Proc {
    pid: u32,
    ns: (u64, u64),
    start: u64,
    cgroup: String,
}

/// The host's processes and the addresses of their network namespaces, read once: the
/// [`Scan::holders`] of any IP, for any pod, from one pass over `/proc` (the audit reads it once per
/// round). Per-process errors (exited, permission) skip the process.
pub struct Scan {
    procs: Vec<Proc>,
    /// netns → its local IPv4 and IPv6 addresses.
    addrs: HashMap<(u64, u64), (Vec<std::net::Ipv4Addr>, Vec<std::net::Ipv6Addr>)>,
    /// The host's (PID 1's) and our own namespace.
    host: [Option<(u64, u64)>; 2],
}

impl Scan {
    pub fn read(proc_dir: &Path) -> Result<Scan> {
        let entries = std::fs::read_dir(proc_dir)
            .map_err(|e| Error::io(format!("read {}", proc_dir.display()), e))?;
        // Never the host's namespace nor our own. `<proc>/1` may be unreadable (then our own namespace,
        // the host's in the hostNetwork DaemonSet, still guards).
        let id = |p: &Path| std::fs::metadata(p).map(|m| (m.dev(), m.ino())).ok();
        let mut scan = Scan {
            procs: Vec::new(),
            addrs: HashMap::new(),
            host: [
                id(&proc_dir.join("1/ns/net")),
                id(Path::new("/proc/self/ns/net")),
            ],
        };
        let read = |dir: &Path, f: &str| std::fs::read_to_string(dir.join(f)).unwrap_or_default();
        for ent in entries.flatten() {
            let name = ent.file_name();
            let Some(pid) = name.to_str().and_then(|n| n.parse::<u32>().ok()) else {
                continue;
            };
            let dir = proc_dir.join(name);
            let Ok(md) = std::fs::metadata(dir.join("ns/net")) else {
                continue;
            };
            let ns = (md.dev(), md.ino());
            scan.addrs.entry(ns).or_insert_with(|| {
                (
                    fib_trie_local_v4(&read(&dir, "net/fib_trie")),
                    if_inet6_addrs(&read(&dir, "net/if_inet6")),
                )
            });
            scan.procs.push(Proc {
                pid,
                ns,
                start: start_time(&read(&dir, "stat")).unwrap_or(u64::MAX),
                cgroup: pod_paths(&read(&dir, "cgroup")),
            });
        }
        Ok(scan)
    }

    /// Every network namespace holding `ip` (its oldest process, whether a process of it is in the cgroup
    /// of the pod with `uid`), and whether a process in the pod's cgroup lives in a namespace that does not
    /// hold it.
    pub fn holders(&self, ip: IpAddr, uid: &str) -> (Vec<Holder>, bool) {
        let mut found: Vec<Holder> = Vec::new();
        let mut pod_elsewhere = false;
        for p in &self.procs {
            let hit = self.addrs.get(&p.ns).is_some_and(|(v4, v6)| match ip {
                IpAddr::V4(a) => v4.contains(&a),
                IpAddr::V6(a) => v6.contains(&a),
            });
            let is_pod = pod_netns::cgroup_names_pod(&p.cgroup, uid);
            if !hit {
                pod_elsewhere |= is_pod;
                continue;
            }
            match found.iter_mut().find(|h| h.ns == p.ns) {
                Some(h) => {
                    h.is_pod |= is_pod;
                    if (p.start, p.pid) < (h.start, h.pid) {
                        (h.start, h.pid) = (p.start, p.pid);
                    }
                }
                None => found.push(Holder {
                    ns: p.ns,
                    start: p.start,
                    pid: p.pid,
                    is_pod,
                    host: self.host.contains(&Some(p.ns)),
                }),
            }
        }
        (found, pod_elsewhere)
    }

    /// The namespace of the pod with `uid` and `ip` as this scan saw it, opened, if its process is still
    /// there as seen ([`still_holds`]).
    pub fn pod_netns(&self, proc_dir: &Path, ip: IpAddr, uid: &str) -> Result<PodNetns> {
        let (found, pod_elsewhere) = self.holders(ip, uid);
        let holder = pod_netns::choose(ip, uid, &found, pod_elsewhere)?.clone();
        let ns = open(proc_dir, ip, holder)?;
        if !still_holds(proc_dir, &ns.holder, ip, uid) {
            return Err(Error::other(format!(
                "process {} no longer holds pod IP {ip} in the pod's cgroup",
                ns.holder.pid
            )));
        }
        Ok(ns)
    }
}

/// Whether `h`'s process still lives in its namespace, that namespace still holds `ip`, and (when it was
/// in the cgroup of the pod with `uid`) it still is.
pub fn still_holds(proc_dir: &Path, h: &Holder, ip: IpAddr, uid: &str) -> bool {
    let dir = proc_dir.join(h.pid.to_string());
    let same = std::fs::metadata(dir.join("ns/net")).is_ok_and(|m| (m.dev(), m.ino()) == h.ns);
    let pod = std::fs::read_to_string(dir.join("cgroup"))
        .is_ok_and(|c| pod_netns::cgroup_names_pod(&c, uid));
    same && (pod || !h.is_pod) && netns_has(&dir, ip)
}

/// The pod's network namespace, held open so that the one chosen is the one programmed (a pid can be
/// reused once its process exits).
#[derive(Debug)]
pub struct PodNetns {
    file: std::fs::File,
    pub holder: Holder,
}

impl PodNetns {
    /// A path naming the held namespace (`/proc/self/fd/<n>`), for [`crate::netns::run_in`].
    pub fn path(&self) -> String {
        use std::os::fd::AsRawFd;
        format!("/proc/self/fd/{}", self.file.as_raw_fd())
    }
}

/// The network namespace of the pod with `uid` and `ip`, chosen by [`pod_netns::choose`] among the
/// [`Scan::holders`] of the IP (a fresh scan), and opened.
pub fn find_pod_netns(proc_dir: &Path, ip: IpAddr, uid: &str) -> Result<PodNetns> {
    let (found, pod_elsewhere) = Scan::read(proc_dir)?.holders(ip, uid);
    let holder = pod_netns::choose(ip, uid, &found, pod_elsewhere)?.clone();
    open(proc_dir, ip, holder)
}

/// `holder`'s namespace, opened, if its process still lives in it.
fn open(proc_dir: &Path, ip: IpAddr, holder: Holder) -> Result<PodNetns> {
    let path = proc_dir.join(holder.pid.to_string()).join("ns/net");
    let file =
        std::fs::File::open(&path).map_err(|e| Error::io(format!("open {}", path.display()), e))?;
    let md = file
        .metadata()
        .map_err(|e| Error::io(format!("stat {}", path.display()), e))?;
    if (md.dev(), md.ino()) != holder.ns {
        return Err(Error::other(format!(
            "process {} left the network namespace holding pod IP {ip} while it was being chosen",
            holder.pid
        )));
    }
    Ok(PodNetns { file, holder })
}

#[cfg(test)]
mod tests {
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
    fn never_returns_the_host_namespace() {
        // 127.0.0.1 is local in every namespace, the host's among them: refused.
        let uid = "6c1a2f4e-0b9d-4e55-9a3c-1f2e3d4c5b6a";
        let e = find_pod_netns(Path::new("/proc"), "127.0.0.1".parse().unwrap(), uid).unwrap_err();
        assert!(e.to_string().contains("network namespace; refusing"), "{e}");
        let e =
            find_pod_netns(Path::new("/proc"), "203.0.113.77".parse().unwrap(), uid).unwrap_err();
        assert!(e.to_string().contains("203.0.113.77"), "{e}");
    }
}
