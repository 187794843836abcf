//! Restarts and upgrades under a real containerd, with upstream's chart (default scenario) and our image.
//!
//! `rolling_replacements_under_pod_churn`: 20 rolling replacements of the agent pod, as a DaemonSet roll
//! makes them (alternately: maxSurge, the new pod ready before the old one gets SIGTERM; maxUnavailable,
//! the old pod ended first and the new one created 200 ms later), while sidecar pods are created through
//! CRI about every 50 ms. Every pod whose sandbox started must have our rules; a sandbox that failed is
//! retried as kubelet does (that is failing closed, e.g. the old agent's token refused once its pod object
//! is gone). With safe upgrade on, no pod starts unredirected; the same loop with `DISABLE_SAFE_UPGRADE=true`
//! (upstream's sidecar-mode behaviour) must show the window (at least one unredirected pod), so the test
//! can fail. Takes about 2 minutes here (both loops).
//!
//! `reboot_with_an_empty_run_dir`: upstream issue #60668. After a reboot `/var/run` is empty while the
//! conflist still names `istio-cni`: sidecar pods fail closed, the agent's own pod still starts (the
//! plugin lets it through before reading any kubeconfig), and the agent installs in place.

use cri_e2e::chart::Chart;
use cri_e2e::chart_agent::Agent;
use cri_e2e::chart_node::ChartNode;
use cri_e2e::churn::{brief, churn, redirected, ChurnOptions, Control, PodEnd};
use cri_e2e::node::NETNS_COUNT;
use cri_e2e::util::require_root;
use std::sync::Arc;
use std::time::{Duration, Instant};

const ROLLS: usize = 20;
/// maxUnavailable rolls: the DaemonSet controller creates the new pod this long after the old one is gone.
const CONTROLLER_DELAY: Duration = Duration::from_millis(200);

async fn wait_ready(node: &ChartNode, a: &Agent) -> Duration {
    let t = Instant::now();
    loop {
        let n = node.readyz(&a.ip);
        if n == "200" {
            return t.elapsed();
        }
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "{} not ready:\n{}",
            a.name,
            node.daemon_log(&a.name)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The old agent's decision line.
fn decision(node: &ChartNode, name: &str) -> String {
    let log = node.daemon_log(name);
    log.lines()
        .find(|l| l.contains("(rule "))
        .unwrap_or_else(|| panic!("{name}: no decision line:\n{log}"))
        .to_string()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn stats(v: &mut [f64]) -> String {
    v.sort_by(f64::total_cmp);
    let median = v[v.len() / 2];
    format!(
        "median {median:.0} ms, min {:.0}, max {:.0}",
        v[0],
        v[v.len() - 1]
    )
}

/// One loop of `ROLLS` replacements under pod churn; returns the pods' ends and each old agent's rule.
async fn roll(extra_env: &[(&str, &str)], label: &str) -> (Vec<PodEnd>, Vec<String>) {
    let node = Arc::new(ChartNode::new(Chart::load("default")).await);
    node.serve_daemonset_and_node();
    let mut agent = node.start_daemon_pod("istio-cni-node-r0", extra_env).await;
    wait_ready(&node, &agent).await;

    let opts = ChurnOptions::default();
    let ctl = Control::new(opts.in_flight);
    let prefix = format!("{}-pod", label.replace(' ', "-"));
    let pods = tokio::spawn(churn(node.clone(), prefix, opts, ctl.clone()));
    let t0 = Instant::now();
    let (mut exits, mut readies, mut decided) = (Vec::new(), Vec::new(), Vec::new());
    let mut rules = Vec::new();
    for k in 1..=ROLLS {
        let name = format!("istio-cni-node-r{k}");
        let old = agent.clone();
        let surge = k % 2 == 1;
        if surge {
            let t = Instant::now();
            agent = node.start_daemon_pod(&name, extra_env).await;
            wait_ready(&node, &agent).await;
            readies.push(ms(t.elapsed()));
            exits.push(ms(node.end_daemon_pod(&old).await));
        } else {
            exits.push(ms(node.end_daemon_pod(&old).await));
            tokio::time::sleep(CONTROLLER_DELAY).await;
            let t = Instant::now();
            agent = node.start_daemon_pod(&name, extra_env).await;
            wait_ready(&node, &agent).await;
            readies.push(ms(t.elapsed()));
        }
        let line = decision(&node, &old.name);
        if let Some(d) = line
            .split("[decided in ")
            .nth(1)
            .and_then(|r| r.split(' ').next())
            .and_then(|n| n.parse::<f64>().ok())
        {
            decided.push(d);
        }
        rules.push(
            line.split("(rule ")
                .nth(1)
                .unwrap_or("")
                .trim_end_matches(|c| c != ')')
                .trim_end_matches(')')
                .to_string(),
        );
    }
    // A last stretch of pods against the final agent.
    tokio::time::sleep(Duration::from_millis(500)).await;
    ctl.stop();
    let ends = pods.await.expect("churn");
    let took = t0.elapsed();

    let first = ends
        .iter()
        .filter(|e| e.failures == 0 && e.redirected == Some(true))
        .count();
    let closed = ends
        .iter()
        .filter(|e| e.failures > 0 && e.redirected == Some(true))
        .count();
    let open = ends.iter().filter(|e| e.redirected == Some(false)).count();
    let never = ends.iter().filter(|e| e.redirected.is_none()).count();
    let mut errors: Vec<String> = ends
        .iter()
        .filter_map(|e| e.first_error.as_deref())
        .map(brief)
        .collect();
    errors.sort();
    errors.dedup_by(|a, b| a.get(..70) == b.get(..70));
    println!(
        "{label}: {ROLLS} rolls in {:.1} s, {} pods: {first} redirected at once, {closed} redirected after \
         their sandbox failed and was retried, {open} started UNREDIRECTED, {never} never started\n  \
         SIGTERM -> exit (StopContainer): {}\n  decision: {}\n  new pod start -> ready: {}\n  \
         rules: {:?}\n  first errors seen: {errors:#?}",
        took.as_secs_f64(),
        ends.len(),
        stats(&mut exits),
        if decided.is_empty() {
            "-".to_string()
        } else {
            stats(&mut decided)
        },
        stats(&mut readies),
        {
            let mut r = rules.clone();
            r.dedup();
            r
        },
    );
    assert!(ends.len() >= 2 * ROLLS, "{label}: only {} pods", ends.len());
    assert_eq!(never, 0, "{label}: pods never started or unchecked");
    for e in &ends {
        assert!(
            e.check_error.is_none(),
            "{label}: {}: {:?}",
            e.name,
            e.check_error
        );
        assert!(
            e.teardown_error.is_none(),
            "{label}: {}: {:?}",
            e.name,
            e.teardown_error
        );
    }
    (ends, rules)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolling_replacements_under_pod_churn() {
    if !require_root() {
        return;
    }
    let _g = NETNS_COUNT.read().await;
    // Odd rolls surge (the new agent is up before the old one stops): the old agent is superseded and keeps
    // everything whatever its rule; even rolls stop the old agent first.
    let expect = |stopped_first: &str| -> Vec<String> {
        (1..=ROLLS)
            .map(|k| {
                if k % 2 == 1 {
                    "superseded"
                } else {
                    stopped_first
                }
                .to_string()
            })
            .collect()
    };
    let (on, rules) = roll(&[], "safe upgrade").await;
    assert_eq!(rules, expect("replacement"));
    let open = on.iter().filter(|e| e.redirected == Some(false)).count();
    assert_eq!(open, 0, "pods started unredirected with safe upgrade on");

    let (off, rules) = roll(&[("DISABLE_SAFE_UPGRADE", "true")], "turned off").await;
    assert_eq!(rules, expect("disabled"));
    let open = off.iter().filter(|e| e.redirected == Some(false)).count();
    assert!(
        open > 0,
        "with safe upgrade off the window must show (the test could not fail otherwise)"
    );
}

/// Upstream issue #60668: a reboot empties `/var/run` while the conflist still names `istio-cni` and the
/// plugin binary is still on disk.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reboot_with_an_empty_run_dir() {
    if !require_root() {
        return;
    }
    let _g = NETNS_COUNT.read().await;
    let mut node = ChartNode::new(Chart::load("default")).await;
    node.serve_daemonset_and_node();
    let a = node.start_daemon_pod("istio-cni-node-boot0", &[]).await;
    wait_ready(&node, &a).await;
    let primary = node.host(&node.conf_dir).join(&node.primary);
    let installed = std::fs::read(&primary).unwrap();
    assert!(String::from_utf8_lossy(&installed).contains("istio-cni"));
    let pod = node.sidecar_pod("before-reboot");
    let (id, netns, _) = node.run_pod(&pod).await.expect("RunPodSandbox");
    assert!(redirected(&node.rules(&netns)));
    node.cri.stop(&id).await.unwrap();
    node.cri.remove(&id).await.unwrap();

    // The reboot: every process killed without a SIGTERM, the pods' sandboxes gone, /var/run empty,
    // containerd started afresh.
    node.cri
        .stop_container(&a.container, 0)
        .await
        .expect("kill the agent");
    for id in node.cri.list().await {
        node.cri.stop(&id).await.unwrap();
        node.cri.remove(&id).await.unwrap();
    }
    let _ = node.srv.delete_pod("istio-system", &a.name);
    let run = node.host(&node.run_dir);
    for e in std::fs::read_dir(&run).unwrap() {
        std::fs::remove_file(e.unwrap().path()).unwrap();
    }
    node.containerd.restart();
    node.cri = cri_e2e::cri::Cri::connect(&node.containerd.socket()).await;
    assert_eq!(
        std::fs::read(&primary).unwrap(),
        installed,
        "the conflist still names istio-cni"
    );
    assert!(node.host(&node.bin_dir).join("istio-cni").is_file());

    // A sidecar pod now fails closed (no kubeconfig), leaving no sandbox behind.
    let pod = node.sidecar_pod("after-reboot");
    let e = node
        .cri
        .run_pod(&pod)
        .await
        .expect_err("a sidecar pod must not start before the agent is ready");
    assert!(e.contains("kubeconfig"), "{e}");
    assert!(node.cri.list().await.is_empty(), "a sandbox was left");

    // The agent's own pod starts through the same chain, and installs in place.
    let b = node.start_daemon_pod("istio-cni-node-boot1", &[]).await;
    let ready = wait_ready(&node, &b).await;
    assert_eq!(
        std::fs::read(&primary).unwrap(),
        installed,
        "installed in place: nothing to rewrite"
    );
    assert!(run.join("istio-cni-kubeconfig").is_file());
    let (_, netns, _) = node
        .run_pod(&pod)
        .await
        .expect("RunPodSandbox after the agent is ready");
    assert!(
        redirected(&node.rules(&netns)),
        "{}",
        node.daemon_log(&b.name)
    );
    println!(
        "reboot: the agent's pod started with the run dir empty, ready {:.0} ms after StartContainer; \
         sidecar pods failed closed until then: {}",
        ms(ready),
        e.chars().take(200).collect::<String>()
    );
}
