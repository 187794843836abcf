//! The windows other CNI writers open (issue 32), under a real containerd with upstream's chart and our
//! image. Each window is made deterministic by freezing the agent (SIGSTOP: the worst a loaded node can do
//! to its scheduling) while the other writer acts, then starting pods until containerd has loaded the new
//! state (each primary gets a subnet of its own, so a pod's IP says which file containerd used): every pod
//! that starts must be redirected, or fail closed.
//!
//! - default layout: a higher-priority primary disappears again (our entry must still be in the file the
//!   runtime falls back to), and uninstall takes our entry out of every file;
//! - owned layout (`ISTIO_OWNED_CNI_CONFIG=true`): the primary rewritten, a new primary appearing and
//!   disappearing (the owned file is re-derived: never a stale copy), no primary at all (fail closed, not
//!   ready), a stale owned file at start, a primary sorting before the owned file (our entry there too, not
//!   ready), and an uninstall whose RBAC is already gone (403) leaving no file that fails every pod.

use cri_e2e::chart::Chart;
use cri_e2e::chart_node::{primary_conflist, wait_node, ChartNode};
use cri_e2e::node::NETNS_COUNT;
use cri_e2e::util::{next_index, require_root};
use std::path::{Path, PathBuf};
use std::time::Duration;

const OWNED: &[(&str, &str)] = &[("ISTIO_OWNED_CNI_CONFIG", "true")];
const OWNED_FILE: &str = "02-istio-cni.conflist";

fn redirected(rules: &str) -> bool {
    rules.contains("-A PREROUTING -p tcp -j ISTIO_INBOUND")
        && rules.contains("-A ISTIO_REDIRECT -p tcp -j REDIRECT --to-ports 15001")
}

fn has_istio(path: &Path) -> bool {
    let Ok(text) = std::fs::read_to_string(path) else {
        return false;
    };
    let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) else {
        return false;
    };
    v["plugins"]
        .as_array()
        .is_some_and(|a| a.iter().any(|p| p["type"] == "istio-cni"))
}

/// Writes a conf file as CNI daemons do: a temp file (not a candidate name), then a rename.
fn write_conf(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp-other");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// A subnet of its own (parallel scenarios share the host's /proc and routes), as its prefix "10.201.N.".
fn new_subnet() -> (String, String) {
    let n = 10 + next_index() % 240;
    (format!("10.201.{n}.0/24"), format!("10.201.{n}."))
}

/// The prefix of the node's own primary's subnet.
fn primary_prefix(node: &ChartNode) -> String {
    let text = std::fs::read_to_string(node.host(&node.conf_dir).join(&node.primary)).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let subnet = v["plugins"][0]["ipam"]["ranges"][0][0]["subnet"]
        .as_str()
        .unwrap()
        .to_string();
    subnet.trim_end_matches("0/24").to_string()
}

/// A ptp primary on `subnet` (its own IPAM dir).
fn other_primary(node: &ChartNode, subnet: &str) -> String {
    let ipam = node.dir.join(format!("ipam-{}", next_index()));
    std::fs::create_dir_all(&ipam).unwrap();
    primary_conflist(&ipam, subnet)
}

/// How one pod went: started (its IP, whether redirected) or failed (the runtime's error).
async fn one_pod(node: &ChartNode, name: &str) -> Result<(String, bool), String> {
    let pod = node.sidecar_pod(name);
    let r = node.cri.run_pod(&pod).await;
    let out = match r {
        Ok(id) => {
            let st = node.cri.status(&id).await.expect("status");
            let ok = redirected(&node.rules(&st.netns.expect("netns")));
            node.cri.stop(&id).await.expect("stop");
            node.cri.remove(&id).await.expect("remove");
            Ok((st.ip, ok))
        }
        Err(e) => Err(e),
    };
    let _ = node.srv.delete_pod("default", name);
    out
}

/// Starts pods until one gets an IP with `prefix` (containerd has loaded the file with that subnet);
/// every pod that starts meanwhile must be redirected when `strict` (pods may fail: that is closed).
/// Returns how many pods it took.
async fn until_subnet(node: &ChartNode, tag: &str, prefix: &str, strict: bool) -> usize {
    for i in 0..80 {
        let name = format!("{tag}-{i}");
        match one_pod(node, &name).await {
            Ok((ip, ok)) => {
                assert!(
                    ok || !strict,
                    "{tag}: pod {i} ({ip}) started UNREDIRECTED\n{}",
                    node.agent_log()
                );
                if ip.starts_with(prefix) {
                    assert!(
                        ok,
                        "{tag}: pod {i} ({ip}) started UNREDIRECTED\n{}",
                        node.agent_log()
                    );
                    return i;
                }
            }
            Err(e) if !strict => println!("{tag}: pod {i} failed: {e}"),
            Err(e) => println!("{tag}: pod {i} failed closed: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "{tag}: no pod got an address in {prefix}0/24 in 80 tries\n{}",
        node.agent_log()
    );
}

/// The agent's process stopped (SIGSTOP) until dropped.
struct Frozen(nix::unistd::Pid);

impl Frozen {
    async fn agent(node: &ChartNode, container: &str) -> Frozen {
        let (_, _, pid) = node.cri.container_state(container).await.expect("state");
        let pid = nix::unistd::Pid::from_raw(pid.expect("the agent's pid") as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP).expect("SIGSTOP");
        Frozen(pid)
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(self.0, nix::sys::signal::Signal::SIGCONT);
    }
}

/// A default-chart node with the agent (plus `env`) ready: the node, the agent's container and IP.
async fn ready(env: &[(&str, &str)]) -> (ChartNode, String, String) {
    let node = ChartNode::new(Chart::load("default")).await;
    let (_sid, cid, ip) = node.start_agent_with(env).await;
    wait_node(&node, "ready", 30, || node.readyz(&ip) == "200").await;
    (node, cid, ip)
}

fn conf(node: &ChartNode, name: &str) -> PathBuf {
    node.host(&node.conf_dir).join(name)
}

/// Default layout: a higher-priority primary appears, then disappears while the agent cannot react. The
/// runtime falls back to the older file, which must still hold our entry. Uninstall then takes our entry
/// out of both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_layout_fallback_file_keeps_our_entry() {
    if !require_root() {
        return;
    }
    let _g = NETNS_COUNT.read().await;
    let (node, cid, ip) = ready(&[]).await;
    let a = primary_prefix(&node);
    let (b_subnet, b) = new_subnet();
    let higher = conf(&node, "05-other.conflist");
    write_conf(&higher, &other_primary(&node, &b_subnet));
    wait_node(&node, "entry in 05-other", 30, || has_istio(&higher)).await;
    wait_node(&node, "ready on 05-other", 30, || node.readyz(&ip) == "200").await;
    until_subnet(&node, "moved", &b, false).await;

    let frozen = Frozen::agent(&node, &cid).await;
    std::fs::remove_file(&higher).unwrap();
    let n = until_subnet(&node, "fallback", &a, true).await;
    println!(
        "fallback: containerd back on {} after {n} pod(s), all redirected",
        node.primary
    );
    drop(frozen);
    wait_node(&node, "ready again", 30, || node.readyz(&ip) == "200").await;

    // Uninstall (a one-off pod: no DaemonSet, so SIGTERM cleans up): no entry left anywhere.
    write_conf(&higher, &other_primary(&node, &b_subnet));
    wait_node(&node, "entry in 05-other again", 30, || has_istio(&higher)).await;
    node.cri
        .stop_container(&cid, 30)
        .await
        .expect("StopContainer");
    for f in [&higher, &conf(&node, &node.primary)] {
        assert!(
            !has_istio(f),
            "{} still holds our entry after uninstall\n{}",
            f.display(),
            node.agent_log()
        );
    }
}

/// Owned layout: the primary is rewritten (another subnet, same plugin types) while the agent is frozen:
/// pods keep starting redirected through the owned file; once the agent runs, the owned file is
/// re-derived from the new primary (never a stale copy of what the primary was).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owned_layout_rederives_a_rewritten_primary() {
    if !require_root() {
        return;
    }
    let _g = NETNS_COUNT.read().await;
    let (node, cid, ip) = ready(OWNED).await;
    let owned = conf(&node, OWNED_FILE);
    assert!(has_istio(&owned));
    let primary = conf(&node, &node.primary);
    assert!(
        !has_istio(&primary),
        "the owned layout left the primary alone"
    );
    let a = primary_prefix(&node);
    until_subnet(&node, "first", &a, true).await;

    let (c_subnet, c) = new_subnet();
    let frozen = Frozen::agent(&node, &cid).await;
    write_conf(&primary, &other_primary(&node, &c_subnet));
    for i in 0..3 {
        if let Ok((_, ok)) = one_pod(&node, &format!("frozen-{i}")).await {
            assert!(ok, "pod started unredirected while the agent was frozen");
        }
    }
    drop(frozen);
    wait_node(
        &node,
        "owned file re-derived from the rewritten primary",
        30,
        || std::fs::read_to_string(&owned).is_ok_and(|t| t.contains(&c_subnet)),
    )
    .await;
    until_subnet(&node, "rewritten", &c, true).await;
    wait_node(&node, "ready", 30, || node.readyz(&ip) == "200").await;
}

/// Owned layout: a new primary appears (sorting after the owned file) and disappears again. Every pod
/// is redirected throughout (the runtime reads the owned file), and the owned file follows the runtime's
/// primary both ways.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owned_layout_follows_a_primary_appearing_and_disappearing() {
    if !require_root() {
        return;
    }
    let _g = NETNS_COUNT.read().await;
    let (node, cid, ip) = ready(OWNED).await;
    let owned = conf(&node, OWNED_FILE);
    let a = primary_prefix(&node);
    let (b_subnet, b) = new_subnet();
    let higher = conf(&node, "05-other.conflist");

    let frozen = Frozen::agent(&node, &cid).await;
    write_conf(&higher, &other_primary(&node, &b_subnet));
    for i in 0..3 {
        if let Ok((_, ok)) = one_pod(&node, &format!("frozen-{i}")).await {
            assert!(ok, "pod started unredirected while the agent was frozen");
        }
    }
    drop(frozen);
    wait_node(&node, "owned file derived from 05-other", 30, || {
        std::fs::read_to_string(&owned).is_ok_and(|t| t.contains(&b_subnet))
    })
    .await;
    until_subnet(&node, "appeared", &b, true).await;
    assert!(
        !has_istio(&higher),
        "the owned layout leaves the primaries alone"
    );

    std::fs::remove_file(&higher).unwrap();
    until_subnet(&node, "disappeared", &a, true).await;
    wait_node(&node, "ready", 30, || node.readyz(&ip) == "200").await;
}

/// Owned layout: the primary is removed. The owned file must not go on serving a copy of it: it fails
/// every pod closed (our message) and the agent is not ready; the primary back, all is well again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owned_layout_without_a_primary_fails_closed() {
    if !require_root() {
        return;
    }
    let _g = NETNS_COUNT.read().await;
    let (node, _cid, ip) = ready(OWNED).await;
    let owned = conf(&node, OWNED_FILE);
    let primary = conf(&node, &node.primary);
    let text = std::fs::read_to_string(&primary).unwrap();
    std::fs::remove_file(&primary).unwrap();
    wait_node(&node, "no stale copy of the removed primary", 30, || {
        std::fs::read_to_string(&owned).is_ok_and(|t| !t.contains("\"ptp\""))
    })
    .await;
    wait_node(&node, "not ready", 30, || node.readyz(&ip) == "503").await;
    let e = one_pod(&node, "no-primary")
        .await
        .expect_err("a pod started without a primary CNI configuration");
    assert!(e.contains("no primary CNI"), "{e}");
    assert_eq!(node.readyz(&ip), "503");

    write_conf(&primary, &text);
    wait_node(&node, "ready with the primary back", 30, || {
        node.readyz(&ip) == "200"
    })
    .await;
    until_subnet(&node, "back", &primary_prefix(&node), true).await;
}

/// Owned layout: the owned file an earlier agent left (a copy of a primary since removed, with our entry)
/// is there when the agent starts. It is re-derived before ready: with no primary, to the fail-closed
/// file; with a new primary, from it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owned_stale_file_at_start_is_rederived() {
    if !require_root() {
        return;
    }
    let _g = NETNS_COUNT.read().await;
    // An agent installs, then dies without cleaning up (SIGKILL), and its pod is removed: its owned file,
    // binary and kubeconfig stay. Then the primary goes.
    let (node, cid, _ip) = ready(OWNED).await;
    let owned = conf(&node, OWNED_FILE);
    let primary = conf(&node, &node.primary);
    let (_, _, pid) = node.cri.container_state(&cid).await.expect("state");
    let pid = nix::unistd::Pid::from_raw(pid.expect("the agent's pid") as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL).expect("SIGKILL");
    let sandbox = node.cri.list().await;
    for id in sandbox {
        node.cri.stop(&id).await.expect("stop the agent's sandbox");
        node.cri
            .remove(&id)
            .await
            .expect("remove the agent's sandbox");
    }
    assert!(has_istio(&owned), "the killed agent's owned file stays");
    std::fs::remove_file(&primary).unwrap();

    // The next agent starts through the stale copy (its plugins still work) and must not serve it.
    let (_sid, _cid, ip) = node.start_agent_with(OWNED).await;
    wait_node(&node, "the stale copy replaced", 30, || {
        std::fs::read_to_string(&owned).is_ok_and(|t| !t.contains("\"ptp\""))
    })
    .await;
    let e = one_pod(&node, "stale")
        .await
        .expect_err("a pod started through a stale copy of a removed primary");
    assert!(e.contains("no primary CNI"), "{e}");
    assert_ne!(node.readyz(&ip), "200");

    let (c_subnet, c) = new_subnet();
    write_conf(&primary, &other_primary(&node, &c_subnet));
    wait_node(&node, "ready on the new primary", 30, || {
        node.readyz(&ip) == "200"
    })
    .await;
    assert!(std::fs::read_to_string(&owned).unwrap().contains(&c_subnet));
    until_subnet(&node, "new", &c, true).await;
}

/// Owned layout: a primary that sorts before the owned file. The runtime would use it: our entry goes
/// into it too (fail closed), the agent says why and is not ready while it is there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owned_layout_primary_sorting_first_gets_our_entry_and_not_ready() {
    if !require_root() {
        return;
    }
    let _g = NETNS_COUNT.read().await;
    let (node, _cid, ip) = ready(OWNED).await;
    let (b_subnet, b) = new_subnet();
    let first = conf(&node, "01-first.conflist");
    write_conf(&first, &other_primary(&node, &b_subnet));
    wait_node(&node, "our entry in 01-first", 30, || has_istio(&first)).await;
    wait_node(&node, "not ready", 30, || node.readyz(&ip) == "503").await;
    until_subnet(&node, "first", &b, false).await;
    // From now on the runtime's file holds our entry: every pod is redirected.
    for i in 0..3 {
        let (ip, ok) = one_pod(&node, &format!("after-{i}")).await.expect("pod");
        assert!(ok && ip.starts_with(&b), "{ip} {ok}");
    }
    assert!(
        node.agent_log().contains("01-first.conflist"),
        "the log names the file\n{}",
        node.agent_log()
    );
    std::fs::remove_file(&first).unwrap();
    wait_node(&node, "ready again", 30, || node.readyz(&ip) == "200").await;
    until_subnet(&node, "owned", &primary_prefix(&node), true).await;
}

/// Owned layout, uninstall: the RBAC is deleted before the pod stops (403 on our own pod, the DaemonSet
/// and the node). Keeping the owned file would fail every pod on the node once our token is gone: the
/// agent removes it, the binary and the kubeconfig.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owned_uninstall_with_rbac_gone_removes_everything() {
    if !require_root() {
        return;
    }
    let _g = NETNS_COUNT.read().await;
    let node = ChartNode::new(Chart::load("default")).await;
    node.serve_daemonset_and_node();
    let a = node.start_daemon_pod("istio-cni-node-rbac", OWNED).await;
    wait_node(&node, "ready", 30, || node.readyz(&a.ip) == "200").await;
    let owned = conf(&node, OWNED_FILE);
    assert!(has_istio(&owned));
    for r in ["pods", "daemonsets", "nodes"] {
        node.srv
            .set_resource_fault(r, kube_double::Fault::Status(403), None);
    }
    node.end_daemon_pod(&a).await;
    let log = node.daemon_log(&a.name);
    assert!(!owned.exists(), "owned file left behind\n{log}");
    assert!(
        !node.host(&node.bin_dir).join("istio-cni").exists(),
        "binary left behind\n{log}"
    );
    assert!(!has_istio(&conf(&node, &node.primary)));
    for r in ["pods", "daemonsets", "nodes"] {
        node.srv.clear_resource_fault(r);
    }
    // Uninstalled: pods start (through the primary alone).
    one_pod(&node, "after-uninstall")
        .await
        .expect("a pod after the uninstall");
}
