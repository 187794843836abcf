//! What the runtime leaves behind, and whose it is.
//!
//! A scan lists, besides the agent's own pod: the sandboxes containerd still knows; the IPs host-local still
//! holds (each file names the container it was allocated for, its mtime is when); the network namespaces
//! under containerd's state dir (the soak's containerd mounts them there, so none is another runtime's);
//! the veths in the node's namespace (each with the pod IP its host route names). A scan is taken before
//! each reboot (which clears what the runtime left), at the end, and again after a kubelet-like garbage
//! collection (every leftover sandbox stopped and removed): what is left then has no sandbox at all.
//!
//! Each item is tied to a sandbox where it can be (the sandbox's id; an IP file's container id; a
//! namespace's or veth's IP), then classified against the churn's timed CRI calls and the instants
//! containerd was SIGKILLed ([`classify`]): **containerd's own** when a call for that sandbox (or, for a
//! sandbox whose RunPodSandbox never returned, a failed RunPodSandbox of the same pod, or of any pod when the
//! item names none, around the item's creation) was in flight when containerd was killed; otherwise
//! **unexplained** (a product or runtime defect: it fails the soak).

use super::lifecycle::blocking;
use super::{lock, Soak};
use crate::chart_node::ChartNode;
use crate::churn::{Call, PodEnd};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

/// One leftover.
#[derive(Debug, Clone)]
pub struct Item {
    /// sandbox, ip, netns, veth
    pub what: &'static str,
    /// Identity across scans (`ip:10.203.1.7`, ...).
    pub key: String,
    /// The sandbox (container id) it belongs to, when known.
    pub sandbox: Option<String>,
    /// The pod's name (a sandbox's metadata).
    pub pod: Option<String>,
    /// When it was made (ms on the soak's clock; sandbox creation, file mtime).
    pub at_ms: Option<f64>,
    pub detail: String,
}

#[derive(Debug, Clone)]
pub struct Scan {
    pub label: String,
    pub t_ms: f64,
    pub items: Vec<Item>,
}

/// A directory's entry names, sorted ("" when it cannot be read).
pub fn files(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

fn wall_ms(soak: &Soak, t: SystemTime) -> f64 {
    match t.duration_since(soak.t0_wall) {
        Ok(d) => d.as_secs_f64() * 1e3,
        Err(e) => -e.duration().as_secs_f64() * 1e3,
    }
}

fn mtime_ms(soak: &Soak, p: &Path) -> Option<f64> {
    std::fs::metadata(p)
        .and_then(|m| m.modified())
        .ok()
        .map(|t| wall_ms(soak, t))
}

/// The IPv4 address in a netns (through the node's mount view), if any.
fn netns_ip(node: &ChartNode, path: &str) -> Option<String> {
    let out = node.in_pod_netns(path, &["ip", "-4", "-o", "addr", "show", "scope", "global"]);
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .skip_while(|w| *w != "inet")
        .nth(1)
        .map(|c| c.split('/').next().unwrap_or("").to_string())
}

pub async fn scan(soak: &Soak, label: &str) -> Scan {
    let node = &soak.node;
    let agent = soak.agent();
    let mut items = Vec::new();
    for (id, name, ready, created) in node.cri.list_detailed().await.unwrap_or_default() {
        if id == agent.sandbox {
            continue;
        }
        let at = SystemTime::UNIX_EPOCH + Duration::from_nanos(created.max(0) as u64);
        items.push(Item {
            what: "sandbox",
            key: format!("sandbox:{id}"),
            sandbox: Some(id.clone()),
            pod: Some(name.clone()),
            at_ms: Some(wall_ms(soak, at)),
            detail: format!("{name} ({})", if ready { "ready" } else { "not ready" }),
        });
    }
    // host-local: <dataDir>/<network>/<ip>, content "<container id>\n<ifname>".
    let ipam = node.dir.join("ipam");
    let mut owner_of_ip: HashMap<String, String> = HashMap::new();
    for net in files(&ipam) {
        for f in files(&ipam.join(&net)) {
            if f.parse::<std::net::IpAddr>().is_err() {
                continue;
            }
            let p = ipam.join(&net).join(&f);
            let owner = std::fs::read_to_string(&p)
                .unwrap_or_default()
                .lines()
                .next()
                .unwrap_or("")
                .trim()
                .to_string();
            owner_of_ip.insert(f.clone(), owner.clone());
            if owner == agent.sandbox {
                continue;
            }
            items.push(Item {
                what: "ip",
                key: format!("ip:{f}"),
                sandbox: Some(owner.clone()).filter(|o| !o.is_empty()),
                pod: None,
                at_ms: mtime_ms(soak, &p),
                detail: format!("{f} in {net}"),
            });
        }
    }
    let agent_netns = node
        .cri
        .status(&agent.sandbox)
        .await
        .ok()
        .and_then(|s| s.netns);
    let nsdir = node.dir.join("state/netns");
    for f in files(&nsdir) {
        let path = nsdir.join(&f).to_string_lossy().into_owned();
        if agent_netns.as_deref() == Some(path.as_str()) {
            continue;
        }
        let at = mtime_ms(soak, &nsdir.join(&f));
        let p = path.clone();
        let ip = blocking(&soak.node, move |n| netns_ip(n, &p)).await;
        let sandbox = ip.as_ref().and_then(|i| owner_of_ip.get(i).cloned());
        items.push(Item {
            what: "netns",
            key: format!("netns:{f}"),
            sandbox,
            pod: None,
            at_ms: at,
            detail: format!("{f} (address {})", ip.as_deref().unwrap_or("none")),
        });
    }
    // ptp's host side: a veth per pod and a host route to the pod's IP through it.
    let routes = node.ns.exec_ok(&["ip", "-4", "-o", "route", "show"]);
    let mut ip_of_veth: HashMap<String, String> = HashMap::new();
    for l in routes.lines() {
        let w: Vec<&str> = l.split_whitespace().collect();
        if let Some(i) = w.iter().position(|x| *x == "dev") {
            if let (Some(dst), Some(dev)) = (w.first(), w.get(i + 1)) {
                ip_of_veth.insert(dev.to_string(), dst.to_string());
            }
        }
    }
    let links = node
        .ns
        .exec_ok(&["ip", "-o", "link", "show", "type", "veth"]);
    for l in links.lines() {
        let Some(name) = l
            .split(": ")
            .nth(1)
            .map(|n| n.split('@').next().unwrap_or(n))
        else {
            continue;
        };
        let ip = ip_of_veth.get(name).cloned();
        if ip.as_deref().is_some_and(|i| i == agent.ip) {
            continue;
        }
        items.push(Item {
            what: "veth",
            key: format!("veth:{name}"),
            sandbox: ip.as_ref().and_then(|i| owner_of_ip.get(i).cloned()),
            pod: None,
            at_ms: None,
            detail: format!("{name} (route to {})", ip.as_deref().unwrap_or("none")),
        });
    }
    Scan {
        label: label.into(),
        t_ms: soak.ms(Instant::now()),
        items,
    }
}

/// At the end: a scan once the last pods are gone, then kubelet's garbage collection (every leftover
/// sandbox stopped and removed), then a scan of what is left without any sandbox.
pub async fn final_scans(soak: &Soak) -> Vec<Scan> {
    tokio::time::sleep(Duration::from_secs(2)).await;
    let end = scan(soak, "end").await;
    for it in end.items.iter().filter(|i| i.what == "sandbox") {
        if let Some(id) = &it.sandbox {
            let _ = soak.node.cri.stop(id).await;
            let _ = soak.node.cri.remove(id).await;
        }
    }
    let after = scan(soak, "after GC").await;
    let mut all = lock(&soak.scans).clone();
    all.push(end);
    all.push(after);
    all
}

/// Whose an item is: ("containerd", why) or ("unexplained", why).
pub fn classify(
    item: &Item,
    pods: &[PodEnd],
    kills: &[f64],
    ms: &dyn Fn(Instant) -> f64,
) -> (&'static str, String) {
    let in_flight = |c: &Call| {
        let (s, e) = (ms(c.start), ms(c.end));
        kills.iter().any(|k| *k >= s && *k <= e)
    };
    if let Some(id) = &item.sandbox {
        if let Some(p) = pods
            .iter()
            .find(|p| p.runs.iter().any(|c| &c.sandbox == id))
        {
            if let Some(c) = p.teardown.iter().find(|c| &c.sandbox == id && in_flight(c)) {
                return (
                    "containerd",
                    format!(
                        "{} of {} ({}) was in flight when containerd was killed",
                        c.what,
                        p.name,
                        short(id)
                    ),
                );
            }
            return match &p.teardown_error {
                Some(e) => ("unexplained", format!("{}: teardown failed: {e}", p.name)),
                None => (
                    "unexplained",
                    format!(
                        "{}: its sandbox {} was stopped and removed without error",
                        p.name,
                        short(id)
                    ),
                ),
            };
        }
        if item
            .pod
            .as_deref()
            .is_some_and(|n| n.starts_with("istio-cni-node-"))
        {
            return (
                "unexplained",
                format!("an agent pod left behind: {}", item.detail),
            );
        }
    }
    // A sandbox whose RunPodSandbox never returned: a failed RunPodSandbox around its creation, cut off by a
    // kill (of the same pod, when the item names it).
    let at = item.at_ms;
    let cut = pods
        .iter()
        .filter(|p| item.pod.as_deref().is_none_or(|n| n == p.name))
        .flat_map(|p| p.runs.iter().map(move |c| (p, c)))
        .find(|(_, c)| {
            c.error.is_some()
                && in_flight(c)
                && at.is_none_or(|t| t >= ms(c.start) - 1_000.0 && t <= ms(c.end) + 1_000.0)
        });
    match cut {
        Some((p, c)) => (
            "containerd",
            format!(
                "RunPodSandbox of {} ({:.0}-{:.0} ms) was in flight when containerd was killed",
                p.name,
                ms(c.start),
                ms(c.end)
            ),
        ),
        None => (
            "unexplained",
            format!(
                "no CRI call cut off by a containerd kill around it (made at {})",
                at.map(|t| format!("{t:.0} ms"))
                    .unwrap_or_else(|| "?".into())
            ),
        ),
    }
}

fn short(id: &str) -> &str {
    &id[..id.len().min(12)]
}

/// Distinct items over all scans (first sighting), by kind.
pub fn distinct(scans: &[Scan]) -> BTreeMap<String, (String, Item)> {
    let mut m = BTreeMap::new();
    for s in scans {
        for i in &s.items {
            m.entry(i.key.clone())
                .or_insert_with(|| (s.label.clone(), i.clone()));
        }
    }
    m
}

#[cfg(test)]
#[path = "leaks_tests.rs"]
mod tests;
