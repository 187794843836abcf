//! The lifecycle lane's events: DaemonSet rolls (surge and not), the agent SIGKILLed and restarted in place,
//! containerd SIGKILLed and started again, a reboot with an empty run dir. Each returns a detail line, or
//! what went wrong (a finding: the agent never ready again, the runtime refusing the agent's pod).

use super::{leaks, Soak};
use crate::chart_agent::Agent;
use crate::chart_node::ChartNode;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long an agent may take to be ready (it waits for nothing but the node: generous, a loaded machine).
const READY_WITHIN: Duration = Duration::from_secs(120);
/// maxUnavailable rolls: the DaemonSet controller creates the new pod this long after the old one is gone.
const CONTROLLER_DELAY: Duration = Duration::from_millis(200);

/// Runs a blocking node call off the async workers.
pub async fn blocking<T: Send + 'static>(
    node: &Arc<ChartNode>,
    f: impl FnOnce(&ChartNode) -> T + Send + 'static,
) -> T {
    let n = node.clone();
    tokio::task::spawn_blocking(move || f(&n))
        .await
        .expect("blocking node call")
}

/// Waits until the agent's `/readyz` answers 200 (kubelet's probe).
pub async fn wait_ready(soak: &Soak, a: &Agent) -> Result<Duration, String> {
    let t = Instant::now();
    loop {
        let ip = a.ip.clone();
        if blocking(&soak.node, move |n| n.readyz(&ip)).await == "200" {
            return Ok(t.elapsed());
        }
        if t.elapsed() > READY_WITHIN {
            let log = soak.node.daemon_log(&a.name);
            let tail: Vec<&str> = log.lines().rev().take(5).collect();
            return Err(format!(
                "{} not ready within {} s; its last log lines: {:?}",
                a.name,
                READY_WITHIN.as_secs(),
                tail
            ));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until containerd answers CRI calls again (the client reconnects on its own).
pub async fn cri_ready(soak: &Soak) -> Result<(), String> {
    let t = Instant::now();
    loop {
        match soak.node.cri.list_detailed().await {
            Ok(_) => return Ok(()),
            Err(e) if t.elapsed() > Duration::from_secs(60) => {
                return Err(format!("containerd's CRI not answering: {e}"))
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// A DaemonSet pod started as the controller and kubelet would, retried while the runtime refuses it.
async fn start_agent(soak: &Soak, name: &str) -> Result<Agent, String> {
    let mut last = String::new();
    for _ in 0..100 {
        match soak.node.try_start_daemon_pod(name, &soak.env_refs()).await {
            Ok(a) => return Ok(a),
            Err(e) => last = e,
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Err(last)
}

/// A roll: `surge` starts the new agent and waits for it before ending the old one; otherwise the old one
/// ends first.
pub async fn roll(soak: &Soak, surge: bool) -> Result<String, String> {
    let old = soak.agent();
    let name = soak.next_agent_name();
    if surge {
        let new = start_agent(soak, &name).await?;
        soak.set_agent(new.clone());
        let ready = wait_ready(soak, &new).await?;
        let took = soak.node.try_end_daemon_pod(&old).await?;
        Ok(format!(
            "{} -> {name}: new ready in {:.0} ms, old stopped in {:.0} ms",
            old.name,
            ready.as_secs_f64() * 1e3,
            took.as_secs_f64() * 1e3
        ))
    } else {
        let took = soak.node.try_end_daemon_pod(&old).await?;
        tokio::time::sleep(CONTROLLER_DELAY).await;
        let new = start_agent(soak, &name).await?;
        soak.set_agent(new.clone());
        let ready = wait_ready(soak, &new).await?;
        Ok(format!(
            "{} -> {name}: old stopped in {:.0} ms, new ready in {:.0} ms",
            old.name,
            took.as_secs_f64() * 1e3,
            ready.as_secs_f64() * 1e3
        ))
    }
}

/// The agent SIGKILLed; after `restart_after`, kubelet restarts its container in place.
pub async fn agent_kill(soak: &Soak, restart_after: Duration) -> Result<String, String> {
    let a = soak.agent();
    let pid = soak
        .node
        .agent_pid(&a)
        .await
        .ok_or_else(|| format!("{}: not running", a.name))?;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .map_err(|e| format!("kill {pid}: {e}"))?;
    let t = Instant::now();
    while soak.node.agent_pid(&a).await.is_some() {
        if t.elapsed() > Duration::from_secs(30) {
            return Err(format!("{}: still running 30 s after SIGKILL", a.name));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(restart_after).await;
    let b = soak.node.restart_agent_container(&a).await?;
    soak.set_agent(b.clone());
    let ready = wait_ready(soak, &b).await?;
    Ok(format!(
        "{} (pid {pid}) killed, restarted in place after {} ms, ready {:.0} ms later",
        a.name,
        restart_after.as_millis(),
        ready.as_secs_f64() * 1e3
    ))
}

/// containerd SIGKILLed and started again; returns the instant of the kill.
pub async fn containerd_restart(soak: &Soak) -> Result<(Instant, String), String> {
    let at = Instant::now();
    let n = soak.node.clone();
    tokio::task::spawn_blocking(move || n.containerd.kill_and_restart())
        .await
        .map_err(|e| format!("containerd did not start again: {e}"))?;
    let up = at.elapsed();
    cri_ready(soak).await?;
    Ok((
        at,
        format!(
            "SIGKILL, running again after {:.0} ms, CRI answering after {:.0} ms",
            up.as_secs_f64() * 1e3,
            at.elapsed().as_secs_f64() * 1e3
        ),
    ))
}

/// A reboot (upstream issue #60668): the churn paused (kubelet is down), what the runtime left scanned,
/// every process killed (the agent without SIGTERM), every sandbox gone, `/var/run` empty (the run dir,
/// containerd's netns mounts), containerd started afresh; then pods are started again (failing closed
/// until the agent is ready) while the agent's pod starts. Returns the instant containerd was killed.
pub async fn reboot(soak: &Soak, n: usize) -> Result<(Instant, String), String> {
    soak.churn.pause().await;
    let scan = leaks::scan(soak, &format!("before reboot {n}")).await;
    super::lock(&soak.scans).push(scan);
    let node = &soak.node;
    let a = soak.agent();
    let _ = node.cri.stop_container(&a.container, 0).await;
    let mut failed = Vec::new();
    for (id, ..) in node.cri.list_detailed().await.unwrap_or_default() {
        if let Err(e) = node.cri.stop(&id).await.and(node.cri.remove(&id).await) {
            failed.push(format!("{id}: {e}"));
        }
    }
    let _ = node.srv.delete_pod("istio-system", &a.name);
    let run = node.host(&node.run_dir);
    for e in std::fs::read_dir(&run).map_err(|e| format!("{}: {e}", run.display()))? {
        let p = e.map_err(|e| e.to_string())?.path();
        let _ = std::fs::remove_file(&p).or_else(|_| std::fs::remove_dir_all(&p));
    }
    let netns_dir = node.dir.join("state/netns");
    for f in leaks::files(&netns_dir) {
        let p = netns_dir.join(&f).to_string_lossy().into_owned();
        let _ = blocking(node, move |n| n.in_node_mounts(&["umount", &p])).await;
        let _ = std::fs::remove_file(netns_dir.join(&f));
    }
    let at = Instant::now();
    let nn = node.clone();
    tokio::task::spawn_blocking(move || nn.containerd.kill_and_restart())
        .await
        .map_err(|e| format!("containerd did not start again: {e}"))?;
    cri_ready(soak).await?;
    soak.churn.resume();
    let name = soak.next_agent_name();
    let b = start_agent(soak, &name).await?;
    soak.set_agent(b.clone());
    wait_ready(soak, &b).await?;
    if !failed.is_empty() {
        return Err(format!("sandboxes not removed at the reboot: {failed:?}"));
    }
    Ok((
        at,
        format!(
            "{} killed, run dir emptied, containerd restarted; {name} ready {:.0} ms after containerd",
            a.name,
            at.elapsed().as_secs_f64() * 1e3
        ),
    ))
}
