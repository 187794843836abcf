//! Sidecar pods started and removed continuously on a [`ChartNode`], as kubelet runs them, each one checked
//! in its own network namespace once its sandbox is up: the pod churn of the upgrade test and of the soak.
//!
//! A pod: its object added to the API double, then RunPodSandbox until one succeeds (a failed one is retried
//! as kubelet does: the pod's leftover sandboxes stopped and removed, the next attempt number), its rules read
//! in the pod's namespace (a read that fails is recorded as such, never as "not redirected"), then
//! StopPodSandbox + RemovePodSandbox (retried), then the object deleted. Every CRI call is timed, so a
//! caller can tell which calls were in flight when something happened (the soak's attribution and leaks).

use crate::chart_node::ChartNode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;

/// Our capture is in place: the iptables rules, or (native_nftables) our nf_tables table and its redirect.
pub fn redirected(rules: &str) -> bool {
    (rules.contains("-A PREROUTING -p tcp -j ISTIO_INBOUND")
        && rules.contains("-A ISTIO_REDIRECT -p tcp -j REDIRECT --to-ports 15001"))
        || (rules.contains("table inet istio-proxy-nat")
            && rules.contains("redirect to :15001")
            && rules.contains("redirect to :15006"))
}

/// How the churn runs.
#[derive(Debug, Clone)]
pub struct ChurnOptions {
    /// A new pod is started this often (when fewer than `in_flight` are being handled).
    pub every: Duration,
    pub in_flight: usize,
    /// kubelet's retry of a failed sandbox (much shorter than its real backoff, to keep the loop busy).
    pub retry_after: Duration,
    /// A pod whose sandbox has not started after this many attempts, or this long, is given up ("never
    /// started"); teardown calls are retried as many times.
    pub max_attempts: u32,
    pub give_up_after: Duration,
}

impl Default for ChurnOptions {
    fn default() -> Self {
        ChurnOptions {
            every: Duration::from_millis(50),
            in_flight: 6,
            retry_after: Duration::from_millis(100),
            max_attempts: 100,
            give_up_after: Duration::from_secs(600),
        }
    }
}

/// One CRI call: when it ran and how it ended.
#[derive(Debug, Clone)]
pub struct Call {
    pub what: &'static str,
    /// The sandbox it was about ("" for a RunPodSandbox that returned none).
    pub sandbox: String,
    pub start: Instant,
    pub end: Instant,
    pub error: Option<String>,
}

/// How one sidecar pod ended.
#[derive(Debug, Clone)]
pub struct PodEnd {
    pub name: String,
    /// Every RunPodSandbox, in order; the last one succeeded when the pod started.
    pub runs: Vec<Call>,
    /// Failed RunPodSandbox attempts before the one that counted.
    pub failures: u32,
    /// The sandbox started and had our rules (None: it never started, or its rules could not be read).
    pub redirected: Option<bool>,
    /// Why the rules could not be read (the pod counts as unchecked, never as redirected).
    pub check_error: Option<String>,
    pub first_error: Option<String>,
    /// The sandbox that started: id, IP, netns path.
    pub sandbox: Option<(String, String, String)>,
    /// StopPodSandbox / RemovePodSandbox calls: the started sandbox's, and (before a retry) those of
    /// sandboxes a failed attempt left behind.
    pub teardown: Vec<Call>,
    /// Leftover sandboxes of this pod stopped and removed before a retry (as kubelet does): the sandbox
    /// and the index in `runs` of the failed RunPodSandbox it followed.
    pub stale: Vec<(String, usize)>,
    /// A teardown that never succeeded.
    pub teardown_error: Option<String>,
}

/// Start, pause and stop for a running churn.
pub struct Control {
    stop: AtomicBool,
    paused: AtomicBool,
    slots: Arc<Semaphore>,
    in_flight: usize,
}

impl Control {
    pub fn new(in_flight: usize) -> Arc<Control> {
        Arc::new(Control {
            stop: AtomicBool::new(false),
            paused: AtomicBool::new(false),
            slots: Arc::new(Semaphore::new(in_flight)),
            in_flight,
        })
    }

    /// No new pod from now on; [`churn`] returns once the pods in flight have ended.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
    }

    /// No new pod until [`Control::resume`]; returns once every pod in flight has ended.
    pub async fn pause(&self) {
        self.paused.store(true, Ordering::SeqCst);
        let all = self
            .slots
            .acquire_many(self.in_flight as u32)
            .await
            .expect("churn slots");
        drop(all);
    }

    pub fn resume(&self) {
        self.paused.store(false, Ordering::SeqCst);
    }
}

async fn timed<T>(
    what: &'static str,
    sandbox: &str,
    f: impl std::future::Future<Output = Result<T, String>>,
) -> (Call, Result<T, String>) {
    let start = Instant::now();
    let r = f.await;
    let call = Call {
        what,
        sandbox: sandbox.to_string(),
        start,
        end: Instant::now(),
        error: r.as_ref().err().cloned(),
    };
    (call, r)
}

/// Runs one sidecar pod to its end.
pub async fn one_pod(node: Arc<ChartNode>, name: String, opts: &ChurnOptions) -> PodEnd {
    let mut pod = node.sidecar_pod(&name);
    let mut end = PodEnd {
        name: name.clone(),
        runs: Vec::new(),
        failures: 0,
        redirected: None,
        check_error: None,
        first_error: None,
        sandbox: None,
        teardown: Vec::new(),
        stale: Vec::new(),
        teardown_error: None,
    };
    let t0 = Instant::now();
    while end.failures < opts.max_attempts && t0.elapsed() < opts.give_up_after {
        let (mut call, r) = timed("RunPodSandbox", "", node.cri.run_pod(&pod)).await;
        let started = match r {
            Ok(id) => {
                call.sandbox = id.clone();
                match node.cri.status(&id).await {
                    Ok(st) if st.ready && st.netns.is_some() => {
                        Ok((id, st.ip, st.netns.unwrap_or_default()))
                    }
                    Ok(st) => Err((
                        Some(id),
                        format!("sandbox not ready after RunPodSandbox: {st:?}"),
                    )),
                    Err(e) => Err((Some(id), format!("PodSandboxStatus: {e}"))),
                }
            }
            Err(e) => Err((None, e)),
        };
        end.runs.push(call);
        match started {
            Ok((id, ip, netns)) => {
                let n = node.clone();
                let ns = netns.clone();
                match tokio::task::spawn_blocking(move || n.try_rules(&ns))
                    .await
                    .expect("rules reader")
                {
                    Ok(rules) => end.redirected = Some(redirected(&rules)),
                    Err(e) => end.check_error = Some(e),
                }
                end.sandbox = Some((id.clone(), ip, netns));
                tear_down(&node, &id, opts, &mut end).await;
                break;
            }
            Err((id, e)) => {
                end.failures += 1;
                end.first_error.get_or_insert(e);
                tokio::time::sleep(opts.retry_after).await;
                // kubelet, before it makes the pod's sandbox again: the pod's sandboxes stopped (and later
                // collected), the next attempt number.
                let mut stale = node.cri.list_for_uid(&pod.uid).await.unwrap_or_default();
                if let Some(id) = id {
                    if !stale.contains(&id) {
                        stale.push(id);
                    }
                }
                for id in stale {
                    end.stale.push((id.clone(), end.runs.len() - 1));
                    tear_down(&node, &id, opts, &mut end).await;
                }
                pod.attempt += 1;
            }
        }
    }
    let _ = node.srv.delete_pod("default", &name);
    end
}

/// Stops and removes a sandbox, retrying as kubelet does (with safe upgrade off, a teardown between the old
/// agent's cleanup and the new agent's install fails, "failed to find plugin istio-cni", as upstream's
/// does; a containerd restart cuts calls off).
async fn tear_down(node: &ChartNode, id: &str, opts: &ChurnOptions, end: &mut PodEnd) {
    let mut last = String::new();
    for _ in 0..opts.max_attempts {
        let (call, stopped) = timed("StopPodSandbox", id, node.cri.stop(id)).await;
        end.teardown.push(call);
        let r = match stopped {
            Ok(()) => {
                let (call, r) = timed("RemovePodSandbox", id, node.cri.remove(id)).await;
                end.teardown.push(call);
                r
            }
            Err(e) => Err(e),
        };
        match r {
            Ok(()) => return,
            // Removed by an earlier attempt that reported a failure afterwards.
            Err(e) if e.contains("not found") => return,
            Err(e) => last = e,
        }
        tokio::time::sleep(opts.retry_after).await;
    }
    end.teardown_error = Some(format!("sandbox {id} could not be removed: {last}"));
}

/// Starts sidecar pods named `<prefix>-<n>` until `ctl` stops it; returns how each ended.
pub async fn churn(
    node: Arc<ChartNode>,
    prefix: String,
    opts: ChurnOptions,
    ctl: Arc<Control>,
) -> Vec<PodEnd> {
    let opts = Arc::new(opts);
    let mut tasks = tokio::task::JoinSet::new();
    let mut tick = tokio::time::interval(opts.every);
    let mut i = 0;
    while !ctl.stop.load(Ordering::SeqCst) {
        tick.tick().await;
        if ctl.paused.load(Ordering::SeqCst) {
            continue;
        }
        let Ok(slot) = ctl.slots.clone().try_acquire_owned() else {
            continue;
        };
        i += 1;
        let (n, name, o) = (node.clone(), format!("{prefix}-{i}"), opts.clone());
        tasks.spawn(async move {
            let end = one_pod(n, name, &o).await;
            drop(slot);
            end
        });
    }
    let mut ends = Vec::new();
    while let Some(r) = tasks.join_next().await {
        ends.push(r.expect("pod task"));
    }
    ends
}

/// A runtime error shortened to the cause (no sandbox id, no pod name), for a summary.
pub fn brief(e: &str) -> String {
    let e = [
        "kubernetes API answered",
        "failed (add): ",
        "failed (delete): ",
    ]
    .iter()
    .find_map(|m| e.find(m).map(|i| &e[i..]))
    .unwrap_or(e);
    e.chars().take(160).collect()
}
