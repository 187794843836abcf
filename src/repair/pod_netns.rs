//! Which network namespace is the pod's (pure): the IP alone does not say, since any namespace can hold any
//! address (a pod with `NET_ADMIN` can put a neighbour's IP on its own `lo`, any user can make a namespace
//! holding it with `unshare -Urn`). The pod's identity does: the kubelet puts every process of a pod in a
//! cgroup whose path names the pod UID, and a process cannot leave it without write access to the cgroup
//! tree. So the candidates are the namespaces of the processes in the pod's cgroup ([`cgroup_names_pod`],
//! the layouts in [`LAYOUTS`]) owned by the node's user namespace, never the host's own (a runtime's
//! processes sit in pod cgroups too); the IP only confirms. A pod none of whose
//! processes is in a recognised cgroup has no candidate: refused, never guessed from the IP.

use crate::error::{Error, Result};
use std::net::IpAddr;

/// The cgroup layouts a pod is recognised by (also seen from another cgroup namespace, where the path
/// begins with `/../`), cgroup v1 (`N:controllers:path`) and v2 (`0::path`) lines alike.
pub const LAYOUTS: &str = "cgroupfs driver `/kubepods[/besteffort|/burstable]/pod<uid>/<container>`; \
     systemd driver `/kubepods.slice[/kubepods-<qos>.slice]/kubepods[-<qos>]-pod<uid_>.slice/<runtime>-<id>.scope` \
     (cri-containerd, crio, docker); kind-style `kubelet-kubepods[-<qos>]-pod<uid_>.slice`";

/// A network namespace of a process in the pod's cgroup, as the host's `/proc` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    /// `(st_dev, st_ino)` of its nsfs file.
    pub ns: (u64, u64),
    /// Its oldest process in the pod's cgroup (start time, pid): the one entered through.
    pub start: u64,
    pub pid: u32,
    /// One of its processes is in the pod's cgroup (every chosen namespace's is).
    pub is_pod: bool,
    /// The host's (PID 1's) or the agent's own namespace.
    pub host: bool,
}

/// A namespace in the pod's cgroup, with what was found out about it (effects done by the caller).
#[derive(Debug, Clone)]
pub struct Candidate {
    pub holder: Holder,
    /// Owned by a user namespace other than the node's: `Some(why)` (not the pod's).
    pub foreign: Option<String>,
    /// Whether it holds the IP; `Err(why)` when that could not be read (too large, unreadable).
    pub holds: std::result::Result<bool, String>,
}

/// Whether a pod UID is one a cgroup path can name (pure): hex digits and dashes, like every UID the API
/// server assigns.
fn plausible_uid(uid: &str) -> bool {
    uid.len() >= 8 && uid.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-')
}

/// The parents a systemd pod slice can have: its name without `-pod<uid>.slice`.
const SLICE_PREFIXES: [&str; 6] = [
    "kubepods",
    "kubepods-besteffort",
    "kubepods-burstable",
    "kubelet-kubepods",
    "kubelet-kubepods-besteffort",
    "kubelet-kubepods-burstable",
];

/// Whether one cgroup path (components) is a layout of [`LAYOUTS`] naming the pod (pure). Components after
/// the pod's are its own (containers, their sub-cgroups); the ones before must be the QoS parents the
/// layout puts there, or `..` (a cgroup namespace hides them).
fn path_names_pod(path: &str, uid: &str) -> bool {
    let parts: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();
    let cgroupfs = format!("pod{uid}");
    let systemd = format!("-pod{}.slice", uid.replace('-', "_"));
    parts.iter().enumerate().any(|(i, c)| {
        let parent = |k: usize| if i >= k { Some(parts[i - k]) } else { None };
        if *c == cgroupfs {
            // `/kubepods/pod<uid>`, `/kubepods/<qos>/pod<uid>`, or a cgroup namespace's `..` above.
            return match parent(1) {
                None | Some("..") | Some("kubepods") => true,
                Some("besteffort") | Some("burstable") => {
                    matches!(parent(2), None | Some("..") | Some("kubepods"))
                }
                _ => false,
            };
        }
        let Some(prefix) = c.strip_suffix(systemd.as_str()) else {
            return false;
        };
        // systemd names a slice after its parent: `a-b-pod<uid>.slice` lives in `a-b.slice`.
        SLICE_PREFIXES.contains(&prefix)
            && match parent(1) {
                None | Some("..") => true,
                Some(p) => p.strip_suffix(".slice") == Some(prefix),
            }
    })
}

/// Whether a `/proc/<pid>/cgroup` text puts the process in the cgroup of the pod with `uid` (pure), by
/// one of the [`LAYOUTS`]; any other layout names no pod.
pub fn cgroup_names_pod(cgroup: &str, uid: &str) -> bool {
    if !plausible_uid(uid) {
        return false;
    }
    let uid = uid.to_ascii_lowercase();
    cgroup.lines().any(|line| {
        // `hierarchy-ID:controllers:path`; the path may contain ':'.
        let path = line.splitn(3, ':').nth(2).unwrap_or("");
        path.starts_with('/') && path_names_pod(path, &uid)
    })
}

fn describe(h: &Holder) -> String {
    format!("pid {} (netns inode {})", h.pid, h.ns.1)
}

fn list<'a>(hs: impl Iterator<Item = &'a Candidate>, why: impl Fn(&Candidate) -> String) -> String {
    hs.map(|c| format!("{}{}", describe(&c.holder), why(c)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The pod's namespace among the `candidates`: the namespaces of the processes in the cgroup of the pod
/// with `uid` (pure). The host's (or this agent's) namespace is never one: processes of the node's own
/// sit in a pod's cgroup (CRI-O's `conmon` with `conmon_cgroup = "pod"`, `runc init` while a container
/// starts), and programming it would capture the node's traffic. Refused: none (no process in a
/// recognised pod cgroup: the IP alone never decides); only the host's (a hostNetwork pod, or only the
/// runtime's own processes); all owned by another user namespace; none holding `ip`; several holding
/// it; one holding it while another could not be read (it might too).
pub fn choose(ip: IpAddr, uid: &str, candidates: &[Candidate]) -> Result<Holder> {
    if candidates.is_empty() {
        return Err(Error::other(format!(
            "no process is in the cgroup of pod {uid} (recognised layouts: {LAYOUTS}); its network \
             namespace cannot be told, and pod IP {ip} alone does not name it"
        )));
    }
    let (host, candidates): (Vec<&Candidate>, Vec<&Candidate>) =
        candidates.iter().partition(|c| c.holder.host);
    if candidates.is_empty() {
        return Err(Error::other(format!(
            "no process is in the cgroup of pod {uid} outside the host's (or this agent's) network \
             namespace ({}: a hostNetwork pod, or only its runtime's own processes); refusing to \
             program the host's",
            list(host.iter().copied(), |_| String::new())
        )));
    }
    let own: Vec<&Candidate> = candidates
        .iter()
        .copied()
        .filter(|c| c.foreign.is_none())
        .collect();
    if own.is_empty() {
        return Err(Error::other(format!(
            "the processes in the cgroup of pod {uid} are in network namespaces owned by another user \
             namespace than the node's ({}); refusing to program them",
            list(candidates.iter().copied(), |c| format!(
                ": {}",
                c.foreign.as_deref().unwrap_or("")
            ))
        )));
    }
    let holding: Vec<&Candidate> = own
        .iter()
        .copied()
        .filter(|c| c.holds == Ok(true))
        .collect();
    let unread: Vec<&Candidate> = own.iter().copied().filter(|c| c.holds.is_err()).collect();
    let why = |c: &Candidate| match &c.holds {
        Err(e) => format!(": {e}"),
        Ok(_) => String::new(),
    };
    match (holding.as_slice(), unread.is_empty()) {
        ([one], true) => Ok(one.holder.clone()),
        ([], true) => Err(Error::other(format!(
            "pod IP {ip} is not in the network namespace of the processes in the cgroup of pod {uid} \
             ({}); refusing to program a namespace that is not the pod's",
            list(own.iter().copied(), why)
        ))),
        (_, false) => Err(Error::other(format!(
            "the network namespace of pod {uid} cannot be told: {}",
            list(unread.iter().copied(), why)
        ))),
        (several, true) => Err(Error::other(format!(
            "pod IP {ip} is held by {} network namespaces in the cgroup of pod {uid} ({}); refusing to \
             guess which is the pod's",
            several.len(),
            list(several.iter().copied(), why)
        ))),
    }
}

#[cfg(test)]
#[path = "pod_netns_tests.rs"]
mod tests;
