//! Which network namespace is the pod's (pure): the IP alone does not say, since any namespace can hold any
//! address (a pod with `NET_ADMIN` can put a neighbour's IP on its own `lo`). The pod's identity does: the
//! kubelet puts every process of a pod in a cgroup whose path names the pod UID, `pod<uid>` with the
//! cgroupfs driver (`/kubepods/besteffort/pod<uid>/<container>`) and `…-pod<uid with _>.slice` with the
//! systemd driver (`/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod<uid>.slice/
//! cri-containerd-<id>.scope`, `crio-<id>.scope` under CRI-O), also when seen from another cgroup namespace
//! (`/../../kubepods-…`). A process cannot leave its pod's cgroup without write access to the cgroup tree.

use crate::error::{Error, Result};
use std::net::IpAddr;

/// A network namespace holding the pod's IP, as the host's `/proc` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    /// `(st_dev, st_ino)` of its nsfs file.
    pub ns: (u64, u64),
    /// Its oldest process (start time, pid): the one entered through.
    pub start: u64,
    pub pid: u32,
    /// One of its processes is in the pod's cgroup.
    pub is_pod: bool,
    /// The host's (PID 1's) or the agent's own namespace.
    pub host: bool,
}

/// Whether a pod UID is one a cgroup path can name (pure): hex digits and dashes, like every UID the API
/// server assigns.
fn plausible_uid(uid: &str) -> bool {
    uid.len() >= 8 && uid.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-')
}

/// Whether a `/proc/<pid>/cgroup` text puts the process in the cgroup of the pod with `uid` (pure).
pub fn cgroup_names_pod(cgroup: &str, uid: &str) -> bool {
    if !plausible_uid(uid) {
        return false;
    }
    let uid = uid.to_ascii_lowercase();
    let cgroupfs = format!("pod{uid}");
    let systemd = format!("-pod{}.slice", uid.replace('-', "_"));
    cgroup.lines().any(|line| {
        // `hierarchy-ID:controllers:path`; the path may contain ':'.
        let path = line.splitn(3, ':').nth(2).unwrap_or("");
        path.split('/')
            .any(|c| c == cgroupfs || (c.starts_with("kubepods") && c.ends_with(&systemd)))
    })
}

fn describe(h: &Holder) -> String {
    format!(
        "pid {} (netns inode {}{})",
        h.pid,
        h.ns.1,
        if h.is_pod {
            ", in the pod's cgroup"
        } else {
            ""
        }
    )
}

fn list(hs: &[&Holder]) -> String {
    hs.iter()
        .map(|h| describe(h))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The pod's namespace among the `holders` of its `ip` (pure). `pod_elsewhere`: a process in the pod's
/// cgroup lives in a namespace that does not hold the IP. Refused: none; any host namespace (a hostNetwork
/// pod, or an address the node itself owns: programming it would capture the node's traffic); several
/// in the pod's cgroup; none in it while the pod's processes are elsewhere; several and none in it.
pub fn choose<'a>(
    ip: IpAddr,
    uid: &str,
    holders: &'a [Holder],
    pod_elsewhere: bool,
) -> Result<&'a Holder> {
    let all: Vec<&Holder> = holders.iter().collect();
    if all.is_empty() {
        return Err(Error::other(format!(
            "failed to find network namespace for pod IP {ip}"
        )));
    }
    if all.iter().any(|h| h.host) {
        return Err(Error::other(format!(
            "pod IP {ip} belongs to the host's (or this agent's) network namespace; refusing to program it"
        )));
    }
    let pods: Vec<&Holder> = all.iter().copied().filter(|h| h.is_pod).collect();
    match (pods.as_slice(), all.as_slice()) {
        ([one], _) => Ok(one),
        ([], [one]) if !pod_elsewhere => Ok(one),
        ([], _) if pod_elsewhere => Err(Error::other(format!(
            "pod IP {ip} is held by {} but the pod's processes (cgroup of pod {uid}) are in another \
             network namespace; refusing to program a namespace that is not the pod's",
            list(&all)
        ))),
        ([], _) => Err(Error::other(format!(
            "pod IP {ip} is held by {} network namespaces ({}) and none is in the cgroup of pod {uid}; \
             refusing to guess which is the pod's",
            all.len(),
            list(&all)
        ))),
        (several, _) => Err(Error::other(format!(
            "pod IP {ip} is held by {} network namespaces in the cgroup of pod {uid} ({}); refusing to \
             guess which is the pod's",
            several.len(),
            list(several)
        ))),
    }
}

#[cfg(test)]
#[path = "pod_netns_tests.rs"]
mod tests;
