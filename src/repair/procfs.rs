//! Finding a pod's network namespace from the host's `/proc` by the pod IP (upstream `netns_linux.go`),
//! without entering any namespace: every process's `/proc/<pid>/net/fib_trie` (IPv4 local addresses) and
//! `/proc/<pid>/net/if_inet6` (IPv6) describe the namespace that process lives in. Namespaces are
//! deduplicated by the inode of `/proc/<pid>/ns/net`, so each is read once; among the processes of the
//! matching namespace the oldest (smallest start time, field 22 of `stat`) wins, normally the pause
//! process. Per-process errors (exited, permission) are skipped.

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

fn netns_has(proc_dir: &Path, pid: &str, ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => std::fs::read_to_string(proc_dir.join(pid).join("net/fib_trie"))
            .map(|t| fib_trie_local_v4(&t).contains(&v4))
            .unwrap_or(false),
        IpAddr::V6(v6) => std::fs::read_to_string(proc_dir.join(pid).join("net/if_inet6"))
            .map(|t| if_inet6_addrs(&t).contains(&v6))
            .unwrap_or(false),
    }
}

/// The path `<proc>/<pid>/ns/net` of the oldest process whose network namespace owns `ip`.
pub fn find_netns_by_ip(proc_dir: &Path, ip: IpAddr) -> Result<String> {
    let entries = std::fs::read_dir(proc_dir)
        .map_err(|e| Error::io(format!("read {}", proc_dir.display()), e))?;
    // netns inode → whether it owns the address (each namespace read once).
    let mut owns: HashMap<(u64, u64), bool> = HashMap::new();
    // (start time or u64::MAX when unreadable, pid)
    let mut best: Option<(u64, String)> = None;
    for ent in entries.flatten() {
        let name = ent.file_name();
        let Some(pid) = name
            .to_str()
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        let Ok(md) = std::fs::metadata(proc_dir.join(pid).join("ns/net")) else {
            continue;
        };
        let key = (md.dev(), md.ino());
        let hit = *owns
            .entry(key)
            .or_insert_with(|| netns_has(proc_dir, pid, ip));
        if !hit {
            continue;
        }
        let start = std::fs::read_to_string(proc_dir.join(pid).join("stat"))
            .ok()
            .and_then(|s| start_time(&s))
            .unwrap_or(u64::MAX);
        if best.as_ref().map_or(true, |(s, _)| start < *s) {
            best = Some((start, pid.to_string()));
        }
    }
    // Never the host's namespace nor our own (a hostNetwork pod, or an address the node itself owns):
    // programming pod redirection there would capture the node's traffic. `<proc>/1` may be unreadable
    // (then our own namespace, the host's in the hostNetwork DaemonSet, still guards).
    let id = |p: &Path| std::fs::metadata(p).map(|m| (m.dev(), m.ino())).ok();
    let forbidden = [
        id(&proc_dir.join("1/ns/net")),
        id(Path::new("/proc/self/ns/net")),
    ];
    if let Some((_, pid)) = &best {
        let theirs = id(&proc_dir.join(pid).join("ns/net"));
        if theirs.is_some() && forbidden.contains(&theirs) {
            return Err(Error::other(format!(
                "pod IP {ip} belongs to the host's (or this agent's) network namespace; refusing to program it"
            )));
        }
    }
    match best {
        Some((_, pid)) => Ok(proc_dir.join(pid).join("ns/net").display().to_string()),
        None => Err(Error::other(format!(
            "failed to find network namespace for pod IP {ip} in {}",
            proc_dir.display()
        ))),
    }
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
    fn never_returns_the_host_namespace() {
        // 127.0.0.1 is local in every namespace; the oldest owner is pid 1, the host: refused.
        let e = find_netns_by_ip(Path::new("/proc"), "127.0.0.1".parse().unwrap()).unwrap_err();
        assert!(e.to_string().contains("network namespace; refusing"), "{e}");
        let e = find_netns_by_ip(Path::new("/proc"), "203.0.113.77".parse().unwrap()).unwrap_err();
        assert!(e.to_string().contains("203.0.113.77"), "{e}");
    }
}
