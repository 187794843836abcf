//! Finding a pod's network namespace from the host's `/proc`, without entering any namespace: from its
//! cgroup first. One pass reads each process's `/proc/<pid>/cgroup` (small, capped) and the identity of
//! its network namespace; the namespaces of the processes in the pod's cgroup are the only candidates
//! ([`pod_netns::choose`]), each checked to be owned by the node's user namespace and confirmed to hold the
//! pod IP (`/proc/<pid>/net/fib_trie` for IPv4, `net/if_inet6` for IPv6, read up to [`MAX_NET_FILE`]
//! bytes: a larger one makes that candidate unreadable, never "not holding"). Other namespaces are never
//! read, however many routes they hold.

use super::pod_netns::{self, Candidate, Holder};
use crate::error::{Error, Result};
use std::collections::{HashMap, HashSet};
use std::io::Read;
use std::net::IpAddr;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// The most read of one namespace's address list (`fib_trie`, `if_inet6`): a pod's is a few KiB.
pub const MAX_NET_FILE: u64 = 1 << 20;
/// The most read of one process's `cgroup` file.
const MAX_CGROUP_FILE: u64 = 64 << 10;

/// Bytes of namespaces' address lists read by this process (a test hook: which namespaces were read).
static NET_BYTES_READ: AtomicU64 = AtomicU64::new(0);

/// Bytes of namespaces' address lists (`fib_trie`, `if_inet6`) this process has read so far.
pub fn net_bytes_read() -> u64 {
    NET_BYTES_READ.load(Ordering::Relaxed)
}

/// At most `cap` bytes of `path`; more is an error naming the file.
fn read_capped(path: &Path, cap: u64) -> std::result::Result<String, String> {
    let f = std::fs::File::open(path).map_err(|e| format!("read {}: {e}", path.display()))?;
    let mut text = String::new();
    f.take(cap + 1)
        .read_to_string(&mut text)
        .map_err(|e| format!("read {}: {e}", path.display()))?;
    if text.len() as u64 > cap {
        return Err(format!(
            "{} is larger than {cap} bytes (a namespace with that many addresses or routes is not \
             read)",
            path.display()
        ));
    }
    Ok(text)
}

/// IPv4 addresses marked `/32 host LOCAL` in a `fib_trie` dump, each once.
pub fn fib_trie_local_v4(text: &str) -> Vec<std::net::Ipv4Addr> {
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    let mut last: Option<std::net::Ipv4Addr> = None;
    for line in text.lines() {
        let t = line.trim_start();
        if let Some(rest) = t.strip_prefix("|-- ") {
            last = rest.trim().parse().ok();
        } else if t.starts_with("/32 host LOCAL") {
            if let Some(a) = last {
                if seen.insert(a) {
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

/// Whether the namespace of the process whose `/proc` directory is `dir` owns `ip`; `Err` when its
/// address list cannot be read or is larger than [`MAX_NET_FILE`].
pub fn netns_holds(dir: &Path, ip: IpAddr) -> std::result::Result<bool, String> {
    let file = match ip {
        IpAddr::V4(_) => "net/fib_trie",
        IpAddr::V6(_) => "net/if_inet6",
    };
    let text = read_capped(&dir.join(file), MAX_NET_FILE)?;
    NET_BYTES_READ.fetch_add(text.len() as u64, Ordering::Relaxed);
    Ok(match ip {
        IpAddr::V4(v4) => fib_trie_local_v4(&text).contains(&v4),
        IpAddr::V6(v6) => if_inet6_addrs(&text).contains(&v6),
    })
}

/// Whether the namespace of the process whose `/proc` directory is `dir` owns `ip` (unreadable: no).
pub fn netns_has(dir: &Path, ip: IpAddr) -> bool {
    netns_holds(dir, ip) == Ok(true)
}

/// `(st_dev, st_ino)` of the user namespace owning the network namespace open as `netns`
/// (`NS_GET_USERNS`).
fn netns_owner(netns: &std::fs::File) -> std::io::Result<(u64, u64)> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    nix::ioctl_none!(ns_get_userns, 0xb7, 0x1);
    // SAFETY: NS_GET_USERNS takes no argument and only reads the descriptor, which `netns` keeps open for
    // the call; on success it returns a new descriptor that nothing else owns, so `OwnedFd` may close it.
    let fd = unsafe { ns_get_userns(netns.as_raw_fd()) }.map_err(std::io::Error::from)?;
    // SAFETY: see above: `fd` is a fresh descriptor owned by no one else.
    let owner = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    owner.metadata().map(|m| (m.dev(), m.ino()))
}

/// Why the network namespace of `h`'s process is not owned by the user namespace `node` (`None`: it is).
fn foreign(proc_dir: &Path, h: &Holder, node: Option<(u64, u64)>) -> Option<String> {
    let path = proc_dir.join(h.pid.to_string()).join("ns/net");
    let owner = std::fs::File::open(&path).and_then(|f| {
        let md = f.metadata()?;
        if (md.dev(), md.ino()) != h.ns {
            return Err(std::io::Error::other("the process left it"));
        }
        netns_owner(&f)
    });
    match (owner, node) {
        (Ok(o), Some(n)) if o == n => None,
        (Ok(_), Some(_)) => Some("owned by another user namespace than the node's".into()),
        (Ok(_), None) => Some("the node's user namespace could not be read".into()),
        (Err(e), _) => Some(format!("its owning user namespace could not be read: {e}")),
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

/// One process of a [`Scan`] whose cgroup can name a pod.
struct Proc {
    pid: u32,
    ns: (u64, u64),
    start: u64,
    cgroup: String,
}

/// The host's processes that can be in a pod's cgroup, and their network namespaces, read once: the
/// [`Scan::candidates`] of any pod from one pass over `/proc` (the audit reads it once per round). No
/// namespace's addresses are read here. Per-process errors (exited, permission) skip the process.
pub struct Scan {
    procs: Vec<Proc>,
    /// The host's (PID 1's) and our own network namespace.
    host: [Option<(u64, u64)>; 2],
    /// The node's user namespace (PID 1's, else ours).
    user: Option<(u64, u64)>,
}

impl Scan {
    pub fn read(proc_dir: &Path) -> Result<Scan> {
        let entries = std::fs::read_dir(proc_dir)
            .map_err(|e| Error::io(format!("read {}", proc_dir.display()), e))?;
        // Never the host's namespace nor our own. `<proc>/1` may be unreadable (no SYS_PTRACE; an AppArmor
        // profile such as containerd's default denies ptrace access to unconfined processes like the
        // host's PID 1, while the pods' processes share the agent's profile and stay readable). Then only
        // our own namespace guards, and it is the host's only in a hostNetwork DaemonSet (ours is not):
        // a hostNetwork pod's processes are not told from a pod's here. Repair in place therefore refuses
        // a pod by its `spec.hostNetwork` before looking ([`super::action`]), and the audit never admits one.
        let id = |p: &Path| std::fs::metadata(p).map(|m| (m.dev(), m.ino())).ok();
        let mut scan = Scan {
            procs: Vec::new(),
            host: [
                id(&proc_dir.join("1/ns/net")),
                id(Path::new("/proc/self/ns/net")),
            ],
            user: id(&proc_dir.join("1/ns/user")).or_else(|| id(Path::new("/proc/self/ns/user"))),
        };
        for ent in entries.flatten() {
            let name = ent.file_name();
            let Some(pid) = name.to_str().and_then(|n| n.parse::<u32>().ok()) else {
                continue;
            };
            let dir = proc_dir.join(name);
            let Ok(cgroup) = read_capped(&dir.join("cgroup"), MAX_CGROUP_FILE) else {
                continue;
            };
            let cgroup = pod_paths(&cgroup);
            if cgroup.is_empty() {
                continue;
            }
            let Ok(md) = std::fs::metadata(dir.join("ns/net")) else {
                continue;
            };
            let stat = std::fs::read_to_string(dir.join("stat")).unwrap_or_default();
            scan.procs.push(Proc {
                pid,
                ns: (md.dev(), md.ino()),
                start: start_time(&stat).unwrap_or(u64::MAX),
                cgroup,
            });
        }
        Ok(scan)
    }

    /// The network namespaces of the processes in the cgroup of the pod with `uid` (each with its oldest
    /// such process), whether each is owned by the node's user namespace, and whether each holds `ip`:
    /// the only namespaces whose addresses are read.
    pub fn candidates(&self, proc_dir: &Path, ip: IpAddr, uid: &str) -> Vec<Candidate> {
        let mut by_ns: HashMap<(u64, u64), Holder> = HashMap::new();
        for p in self
            .procs
            .iter()
            .filter(|p| pod_netns::cgroup_names_pod(&p.cgroup, uid))
        {
            let h = by_ns.entry(p.ns).or_insert_with(|| Holder {
                ns: p.ns,
                start: p.start,
                pid: p.pid,
                is_pod: true,
                host: self.host.contains(&Some(p.ns)),
            });
            if (p.start, p.pid) < (h.start, h.pid) {
                (h.start, h.pid) = (p.start, p.pid);
            }
        }
        let mut holders: Vec<Holder> = by_ns.into_values().collect();
        holders.sort_by_key(|h| (h.start, h.pid));
        holders
            .into_iter()
            .map(|holder| {
                // The host's namespace is refused whatever it holds; a foreign one is not the pod's.
                let foreign = (!holder.host)
                    .then(|| foreign(proc_dir, &holder, self.user))
                    .flatten();
                let holds = if holder.host || foreign.is_some() {
                    Ok(false)
                } else {
                    netns_holds(&proc_dir.join(holder.pid.to_string()), ip)
                };
                Candidate {
                    holder,
                    foreign,
                    holds,
                }
            })
            .collect()
    }
}

/// Whether `h`'s process still lives in its namespace, is still in the cgroup of the pod with `uid`,
/// and that namespace still holds `ip`.
pub fn still_holds(proc_dir: &Path, h: &Holder, ip: IpAddr, uid: &str) -> bool {
    let dir = proc_dir.join(h.pid.to_string());
    let same = std::fs::metadata(dir.join("ns/net")).is_ok_and(|m| (m.dev(), m.ino()) == h.ns);
    let pod = read_capped(&dir.join("cgroup"), MAX_CGROUP_FILE)
        .is_ok_and(|c| pod_netns::cgroup_names_pod(&c, uid));
    same && pod && netns_has(&dir, ip)
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
/// [`Scan::candidates`] of the pod (a fresh scan), and opened.
pub fn find_pod_netns(proc_dir: &Path, ip: IpAddr, uid: &str) -> Result<PodNetns> {
    let scan = Scan::read(proc_dir)?;
    let holder = pod_netns::choose(ip, uid, &scan.candidates(proc_dir, ip, uid))?;
    open(proc_dir, ip, holder)
}

/// The one way into a pod's namespace: finds it (through `scan`, a round's one pass over `proc_dir`, when
/// that settles it, else by a fresh lookup, [`find_pod_netns`]), runs `run` in it, then confirms that it
/// is still the pod's: on the pod's own process ([`still_holds`]) when a scan found it, else (or when that
/// fails) by a fresh lookup that must choose the same namespace. `Err` when it cannot be found or
/// confirmed, or `run` failed: nothing `run` did counts then (fail closed). `doing` names what `run` does
/// ("read", "programmed") in the error when the namespace changed meanwhile.
pub fn in_pod_netns<T>(
    proc_dir: &Path,
    ip: IpAddr,
    uid: &str,
    scan: Option<&Scan>,
    doing: &str,
    run: impl FnOnce(&PodNetns) -> Result<T>,
) -> Result<(T, PodNetns)> {
    let seen = |s: &Scan| pod_netns::choose(ip, uid, &s.candidates(proc_dir, ip, uid)).ok();
    let found = scan.and_then(seen).and_then(|h| open(proc_dir, ip, h).ok());
    // As the scan saw it only if its process is still there as seen.
    let found = found.filter(|ns| still_holds(proc_dir, &ns.holder, ip, uid));
    let ns = found.map_or_else(|| find_pod_netns(proc_dir, ip, uid), Ok)?;
    let done = run(&ns)?;
    if scan.is_some() && still_holds(proc_dir, &ns.holder, ip, uid) {
        return Ok((done, ns));
    }
    let again = find_pod_netns(proc_dir, ip, uid)?;
    if again.holder.ns != ns.holder.ns {
        return Err(Error::other(format!(
            "pod IP {ip} moved to the netns of pid {} while the netns of pid {} was {doing}",
            again.holder.pid, ns.holder.pid
        )));
    }
    Ok((done, ns))
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
#[path = "procfs_tests.rs"]
mod tests;
