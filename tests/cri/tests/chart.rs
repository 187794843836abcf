//! Our image run exactly as upstream's Helm chart runs it (`../shared/conformance/chart/*.yaml`: command,
//! args, env, mounts, security context parsed from the rendered YAML), under a private containerd, with
//! only the image's hub and tag changed. Per scenario: ready, files where the scenario puts them, the
//! effective capabilities are exactly the chart's, a pod started before the agent was ready is handled by
//! the scenario's repair mode (repaired in place by writing the pod's tables directly: no node binary, no SYS_CHROOT),
//! a sidecar pod started afterwards is redirected, and stopping the container removes what it added.

use cri_e2e::chart::{cap_mask, Chart};
use cri_e2e::chart_node::{wait_node, ChartNode};
use cri_e2e::churn::redirected;
use cri_e2e::node::NETNS_COUNT;
use cri_e2e::util::require_root;
use std::path::PathBuf;
use std::time::{Duration, Instant};

async fn wait_for(what: &str, secs: u64, mut f: impl FnMut() -> bool) -> Duration {
    let t = Instant::now();
    while !f() {
        assert!(
            t.elapsed() < Duration::from_secs(secs),
            "{what}: not within {secs} s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    t.elapsed()
}

/// The backing file of a node path (the longest chart host path that contains it).
fn backing(node: &ChartNode, p: &str) -> PathBuf {
    let base = node
        .chart
        .host_paths()
        .into_iter()
        .filter(|h| p.starts_with(&format!("{h}/")))
        .max_by_key(|h| h.len())
        .unwrap_or_else(|| panic!("{p} is under no host path of the chart"));
    node.host(&base).join(&p[base.len() + 1..])
}

fn conf_has_istio(text: &str) -> Option<serde_json::Value> {
    let v: serde_json::Value = serde_json::from_str(text).ok()?;
    if v["type"] == "istio-cni" {
        return Some(v);
    }
    v["plugins"]
        .as_array()?
        .iter()
        .find(|p| p["type"] == "istio-cni")
        .cloned()
}

async fn scenario(name: &str) {
    if !require_root() {
        return;
    }
    let _g = NETNS_COUNT.read().await;
    let chart = Chart::load(name);
    let image = chart.image();
    assert!(
        image.ends_with("/install-cni:latest"),
        "{name}: chart image {image}"
    );
    let settings = chart.config_map("istio-cni-config");
    let setting = |k: &str| settings.get(k).cloned().unwrap_or_default();
    let chained = setting("CHAINED_CNI_PLUGIN") != "false";
    let nft = setting("NATIVE_NFTABLES") == "true";
    let repair_on = setting("REPAIR_ENABLED") == "true";
    let mode = if !repair_on {
        "off"
    } else if setting("REPAIR_REPAIR_PODS") == "true" {
        "in-place"
    } else if setting("REPAIR_DELETE_PODS") == "true" {
        "delete"
    } else if setting("REPAIR_LABEL_PODS") == "true" {
        "label"
    } else {
        "off"
    };
    let node = ChartNode::new(chart).await;
    let primary_before =
        std::fs::read_to_string(node.host(&node.conf_dir).join(&node.primary)).unwrap();

    // A pod that started before the agent was ready: not redirected (the chain has no istio-cni yet), and
    // its istio-validation init container failed as it would.
    let early = node.sidecar_pod("early");
    let (_eid, early_ns, early_ip) = node.run_pod(&early).await.expect("early pod");
    assert!(!redirected(&node.rules(&early_ns)));
    node.put_pod("early", &early.uid, &early_ip, true);

    let t0 = Instant::now();
    let (_sid, cid, ip) = node.start_agent().await;
    let ready = wait_for(&format!("{name}: /readyz 200"), 30, || {
        node.readyz(&ip) == "200"
    })
    .await;
    println!(
        "{name}: ready {:.0} ms after StartContainer ({:.0} ms incl. CreateContainer)",
        ready.as_secs_f64() * 1e3,
        t0.elapsed().as_secs_f64() * 1e3
    );

    // Exactly the chart's capabilities, not privileged.
    let (state, _, pid) = node.cri.container_state(&cid).await.unwrap();
    assert_eq!(state, 1, "install-cni not running:\n{}", node.agent_log());
    let pid = pid.expect("container pid");
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let eff = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .map(|h| u64::from_str_radix(h.trim(), 16).unwrap())
        .unwrap();
    assert_eq!(
        eff,
        cap_mask(&node.chart.added_capabilities()),
        "{name}: effective capabilities {eff:#x}"
    );

    // Plugin, configuration and kubeconfig where the scenario puts them.
    assert!(
        node.host(&node.bin_dir).join("istio-cni").is_file(),
        "no plugin in {}",
        node.bin_dir
    );
    let conf_file = if chained {
        node.host(&node.conf_dir).join(&node.primary)
    } else {
        node.host(&node.conf_dir).join(setting("CNI_CONF_NAME"))
    };
    let entry = conf_has_istio(&std::fs::read_to_string(&conf_file).unwrap_or_default())
        .unwrap_or_else(|| {
            panic!(
                "{name}: no istio-cni in {}\n{}",
                conf_file.display(),
                node.agent_log()
            )
        });
    // Upstream master: the plugin reads <cni_agent_run_dir>/istio-cni-kubeconfig unless the entry names one.
    let kc = match entry["kubernetes"]["kubeconfig"].as_str() {
        Some(k) => k.to_string(),
        None => format!(
            "{}/istio-cni-kubeconfig",
            entry["cni_agent_run_dir"]
                .as_str()
                .unwrap_or_else(|| panic!("{name}: entry {entry}"))
        ),
    };
    let kc_file = backing(&node, &kc);
    assert!(kc_file.is_file(), "{name}: no kubeconfig at {kc}");

    // The pod that started too early, per the scenario's repair mode.
    if chained {
        let early_path = "/api/v1/namespaces/default/pods/early";
        match mode {
            "in-place" => {
                let d = wait_for(
                    &format!("{name}: early pod repaired in place\n{}", node.agent_log()),
                    30,
                    || redirected(&node.rules(&early_ns)),
                )
                .await;
                println!(
                    "{name}: early pod repaired in place {:.0} ms after ready",
                    d.as_secs_f64() * 1e3
                );
            }
            "delete" => {
                wait_for(&format!("{name}: early pod deleted"), 30, || {
                    node.srv
                        .requests()
                        .iter()
                        .any(|r| r.method == "DELETE" && r.path == early_path)
                })
                .await;
            }
            "label" => {
                wait_for(&format!("{name}: early pod labeled"), 30, || {
                    node.srv.requests().iter().any(|r| {
                        r.method == "PATCH"
                            && r.path.starts_with(early_path)
                            && r.body.contains("cni.istio.io/uninitialized")
                    })
                })
                .await;
            }
            _ => {
                tokio::time::sleep(Duration::from_secs(1)).await;
                assert!(!redirected(&node.rules(&early_ns)), "repair is off");
            }
        }
    }

    // A sidecar pod started now, through the same containerd, is redirected (chained scenarios; standalone
    // files are for multus, which this containerd does not run).
    // The agent's pod cache (on under the chart) serves it: the double sees no GET of it.
    if chained {
        wait_node(&node, &format!("{name}: pod cache synced"), 30, || {
            node.agent_log().contains("pod cache: synced")
        })
        .await;
        let pod = node.sidecar_pod("later");
        match node.run_pod(&pod).await {
            Ok((_, netns, _)) => {
                let rules = node.rules(&netns);
                assert!(
                    redirected(&rules),
                    "{name}: later pod not redirected:\n{rules}"
                );
                let gets: Vec<_> = node
                    .srv
                    .requests()
                    .into_iter()
                    .filter(|r| {
                        r.method == "GET" && r.path == "/api/v1/namespaces/default/pods/later"
                    })
                    .collect();
                assert!(
                    gets.is_empty(),
                    "{name}: the plugin read the later pod from the API server: {gets:?}\n{}",
                    node.agent_log()
                );
                let log = node.agent_log();
                assert!(
                    log.lines()
                        .any(|l| l.contains("ADD default/later") && l.contains("(cache)")),
                    "{name}: no ADD from the cache in the agent log:\n{log}"
                );
                // native_nftables: our nf_tables tables over netlink, no iptables rules and no backend record.
                assert_eq!(
                    rules.contains("table inet istio-proxy-nat"),
                    nft,
                    "{name}: backend\n{rules}"
                );
                if nft {
                    assert!(!rules.contains("ISTIO_REDIRECT"), "{name}: {rules}");
                    assert!(
                        !node.host(&node.run_dir).join("iptables-backend").exists(),
                        "{name}: iptables backend recorded in nftables mode"
                    );
                }
            }
            Err(e) => panic!("{name}: RunPodSandbox: {e}\n{}", node.agent_log()),
        }
    }

    // Stopping the container removes what it added.
    node.cri
        .stop_container(&cid, 30)
        .await
        .expect("StopContainer");
    let after = std::fs::read_to_string(node.host(&node.conf_dir).join(&node.primary)).unwrap();
    assert!(
        conf_has_istio(&after).is_none(),
        "{name}: istio-cni left in the primary:\n{after}"
    );
    if chained {
        let a: serde_json::Value = serde_json::from_str(&after).unwrap();
        let b: serde_json::Value = serde_json::from_str(&primary_before).unwrap();
        assert_eq!(a, b, "{name}: primary not restored");
    } else {
        assert!(!conf_file.exists(), "{name}: standalone file left");
    }
    assert!(!kc_file.exists(), "{name}: kubeconfig left");
    assert!(
        !node.host(&node.bin_dir).join("istio-cni").exists(),
        "{name}: plugin binary left"
    );
    for f in ["log.sock", "iptables-backend", "pod-cache.sock"] {
        assert!(
            !node.host(&node.run_dir).join(f).exists(),
            "{name}: {f} left in the run dir"
        );
    }
}

macro_rules! scenarios {
    ($($f:ident => $n:literal),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $f() {
            scenario($n).await;
        }
    )*};
}

scenarios! {
    chart_default => "default",
    chart_gke => "gke",
    chart_openshift => "openshift",
    chart_repair_delete => "repair-delete",
    chart_repair_label => "repair-label",
    chart_repair_off => "repair-off",
    chart_standalone => "standalone",
    chart_aks_seed => "aks-seed",
    chart_json_logs => "json-logs",
    chart_nftables => "nftables",
    chart_custom_dirs => "custom-dirs",
}

/// Repair in place needs nothing from the node's root: with the agent pointed at a node root that does
/// not exist (so no iptables binary anywhere it could reach; before issue 40 this made repair in place
/// impossible and the agent fell back to deleting the pod), the early pod is repaired in place and never
/// deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chart_default_repairs_in_place_without_any_node_iptables() {
    if !require_root() {
        return;
    }
    let _g = NETNS_COUNT.read().await;
    let node = ChartNode::new(Chart::load("default")).await;
    let early = node.sidecar_pod("early");
    let (_eid, early_ns, early_ip) = node.run_pod(&early).await.expect("early pod");
    node.put_pod("early", &early.uid, &early_ip, true);
    assert!(
        !redirected(&node.rules(&early_ns)),
        "the early pod started redirected"
    );
    let (_sid, _cid, ip) = node
        .start_agent_with(&[("ISTIO_CNI_HOST_ROOT", "/no-such-node-root")])
        .await;
    wait_for("ready", 30, || node.readyz(&ip) == "200").await;
    wait_for(
        &format!("early pod repaired in place\n{}", node.agent_log()),
        30,
        || redirected(&node.rules(&early_ns)),
    )
    .await;
    let deleted = node
        .srv
        .requests()
        .iter()
        .any(|r| r.method == "DELETE" && r.path == "/api/v1/namespaces/default/pods/early");
    assert!(!deleted, "the early pod was deleted:\n{}", node.agent_log());
}

/// Runs sidecar pods until one is redirected (containerd reloads its CNI configuration asynchronously after
/// a file changes); returns how many started before that. Fails after `max` pods.
async fn pods_until_redirected(node: &ChartNode, prefix: &str, max: usize) -> usize {
    for i in 0..max {
        let pod = node.sidecar_pod(&format!("{prefix}-{i}"));
        let (id, netns, _) = node.run_pod(&pod).await.expect("RunPodSandbox");
        let ok = redirected(&node.rules(&netns));
        node.cri.stop(&id).await.expect("stop");
        node.cri.remove(&id).await.expect("remove");
        if ok {
            return i;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "{prefix}: {max} pods in a row started unredirected\n{}",
        node.agent_log()
    );
}

/// The default chart's node with the agent ready: the node, its primary conflist's host path, that file's
/// text before the agent touched it, and the agent pod's IP.
async fn default_chart_ready() -> (ChartNode, std::path::PathBuf, String, String) {
    let node = ChartNode::new(Chart::load("default")).await;
    let primary = node.host(&node.conf_dir).join(&node.primary);
    let original = std::fs::read_to_string(&primary).unwrap();
    let (_sid, _cid, ip) = node.start_agent().await;
    wait_for("ready", 30, || node.readyz(&ip) == "200").await;
    (node, primary, original, ip)
}

/// Another CNI rewrites the primary (atomically, without our entry) while the agent runs: the entry comes
/// back, containerd reloads, and pods are redirected again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chart_default_primary_rewritten_by_another_cni() {
    if !require_root() {
        return;
    }
    let _g = NETNS_COUNT.read().await;
    let (node, primary, original, ip) = default_chart_ready().await;
    wait_node(&node, "entry", 30, || {
        conf_has_istio(&std::fs::read_to_string(&primary).unwrap_or_default()).is_some()
    })
    .await;
    assert_eq!(pods_until_redirected(&node, "first", 20).await, 0);

    // The other CNI's rewrite: temp file + rename, as CNI daemons write.
    let tmp = primary.with_extension("tmp-other");
    std::fs::write(&tmp, &original).unwrap();
    std::fs::rename(&tmp, &primary).unwrap();
    let back = wait_node(&node, "entry back after the rewrite", 30, || {
        conf_has_istio(&std::fs::read_to_string(&primary).unwrap_or_default()).is_some()
    })
    .await;
    let stale = pods_until_redirected(&node, "rewritten", 50).await;
    println!(
        "rewrite: entry back in {:.1} ms; {stale} pod(s) started unredirected meanwhile",
        back.as_secs_f64() * 1e3
    );
    assert_eq!(node.readyz(&ip), "200");
}

/// A higher-priority primary appears (sorts first, as libcni and containerd choose): the agent must move
/// into it, and a pod whose start began once our entry was in it and the agent said ready is redirected.
/// A pod that started before (the new file without our entry: the default layout's inherent window, see
/// the README's "CNI configuration layouts") is counted and printed, not asserted: whether the runtime read
/// the file before we merged into it is a race the default layout cannot close (the owned layout does:
/// tests/cri/tests/windows.rs). Readiness is sampled before the start, not after: a pod that started in the
/// window while the agent was still merging is no evidence against a later 200.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chart_default_higher_priority_primary_appears() {
    if !require_root() {
        return;
    }
    let _g = NETNS_COUNT.read().await;
    let (node, _, original, ip) = default_chart_ready().await;
    assert_eq!(pods_until_redirected(&node, "first", 20).await, 0);

    let higher = node.host(&node.conf_dir).join("05-other.conflist");
    let tmp = higher.with_extension("tmp");
    std::fs::write(
        &tmp,
        original.replace("\"name\": \"e2e\"", "\"name\": \"other\""),
    )
    .unwrap();
    std::fs::rename(&tmp, &higher).unwrap();
    let t = Instant::now();
    let mut in_window = 0;
    for i in 0..50 {
        let pod = node.sidecar_pod(&format!("higher-{i}"));
        let entry = conf_has_istio(&std::fs::read_to_string(&higher).unwrap_or_default()).is_some();
        let ready = node.readyz(&ip) == "200";
        let (id, netns, _) = node.run_pod(&pod).await.expect("RunPodSandbox");
        let ok = redirected(&node.rules(&netns));
        node.cri.stop(&id).await.expect("stop");
        node.cri.remove(&id).await.expect("remove");
        assert!(
            ok || !(entry && ready),
            "pod {i} started unredirected although its start began with our entry in the new primary and the agent ready ({:.0} ms after the new primary)\n{}",
            t.elapsed().as_secs_f64() * 1e3,
            node.agent_log()
        );
        if !ok {
            in_window += 1;
        }
        if ok && entry {
            println!(
                "higher-priority primary: redirected again after {i} pod(s), {in_window} started in the window"
            );
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "the agent never moved into the higher-priority primary\n{}",
        node.agent_log()
    );
}
