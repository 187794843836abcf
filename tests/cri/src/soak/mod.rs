//! The soak (`scripts/soak`): containerd's CRI with our image installed as upstream's chart runs it (a
//! [`ChartNode`]), sidecar pods created and removed continuously ([`crate::churn`]), and seeded chaos in
//! three lanes running side by side, one event at a time each ([`lanes`]): the agent's and the runtime's
//! lifecycle (rolls with and without surge, agent SIGKILLs, containerd SIGKILLs, a reboot with an empty run
//! dir), the configuration directory's other writers (the primary rewritten without our entry, a
//! higher-priority primary appearing and disappearing) and the API server (error bursts, outages).
//!
//! Every started pod is checked in its own network namespace; each pod is attributed to the chaos events in
//! flight around its RunPodSandbox ([`report`]); leaks are counted and told apart from what containerd
//! leaves when it is killed mid-call ([`leaks`]); the agent's RSS and descriptors are sampled
//! ([`samples`]). The same seed replays the same chaos sequence per lane (the interleaving of lanes and pods
//! follows the machine's timing).

pub mod confdir;
pub mod lanes;
pub mod leaks;
pub mod lifecycle;
pub mod options;
pub mod report;
pub mod rng;
pub mod samples;
pub mod summary;
pub mod sweep;

use crate::chart::Chart;
use crate::chart_agent::Agent;
use crate::chart_node::{ChartNode, ChartNodeOptions};
use crate::churn::{churn, ChurnOptions, Control, PodEnd};
use options::{Kind, Layout, Options};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One chaos event: what, when it began and when the node had recovered from it (the agent ready again,
/// our entry back in the file the runtime reads, the fault cleared).
#[derive(Debug, Clone)]
pub struct Event {
    pub kind: Kind,
    pub start: Instant,
    pub end: Instant,
    pub detail: String,
    /// What went wrong recovering from it (the agent never ready again, ...): a finding.
    pub error: Option<String>,
    /// Configuration writes: how long the file the runtime reads was seen without our entry.
    pub exposure_ms: Option<f64>,
    /// Configuration writes: how long until the file the runtime reads had our entry and the current
    /// primary's content (None: not within 10 s, a stale configuration).
    pub converge_ms: Option<f64>,
    /// containerd SIGKILLed at this instant (what was in flight then may leak).
    pub kill_at: Option<Instant>,
}

/// What the lanes, the churn and the sampler share.
pub struct Soak {
    pub node: Arc<ChartNode>,
    pub opts: Options,
    /// The agent's extra environment: the layout's setting, then `--agent-env`.
    pub env: Vec<(String, String)>,
    pub t0: Instant,
    /// The wall clock at `t0` (file times and the runtime's timestamps are on it).
    pub t0_wall: std::time::SystemTime,
    pub deadline: Instant,
    /// The agent the node runs now (the newest one during a surge roll).
    agent: Mutex<Agent>,
    generation: AtomicUsize,
    pub events: Mutex<Vec<Event>>,
    pub churn: Arc<Control>,
    pub samples: Mutex<Vec<samples::Sample>>,
    /// Leak scans taken before each reboot (a reboot clears what the runtime left).
    pub scans: Mutex<Vec<leaks::Scan>>,
    /// The machine's 1-minute load average, sampled with the agent: (ms, load).
    pub loads: Mutex<Vec<(f64, f64)>>,
    /// What ran where: the date the soak started (UTC), the commit, the machine's CPUs.
    pub provenance: samples::Provenance,
}

/// A lock that a panicking holder did not poison for the others.
pub fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Soak {
    pub fn agent(&self) -> Agent {
        lock(&self.agent).clone()
    }

    pub fn set_agent(&self, a: Agent) {
        *lock(&self.agent) = a;
    }

    /// The next DaemonSet pod's name.
    pub fn next_agent_name(&self) -> String {
        format!(
            "istio-cni-node-s{}",
            self.generation.fetch_add(1, Ordering::SeqCst)
        )
    }

    pub fn env_refs(&self) -> Vec<(&str, &str)> {
        self.env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect()
    }

    /// Milliseconds since the soak's start (the report's clock).
    pub fn ms(&self, t: Instant) -> f64 {
        t.saturating_duration_since(self.t0).as_secs_f64() * 1e3
    }

    pub fn record(&self, e: Event) {
        lock(&self.events).push(e);
    }
}

/// Runs the soak; returns the process exit code (0 pass, 1 a finding that fails it).
pub async fn run(opts: Options) -> i32 {
    println!(
        "soak: layout {}, seed {}, {} s, kinds {} (replay: scripts/soak {} --seed {} --layout {}{}{})",
        opts.layout.name(),
        opts.seed,
        opts.seconds,
        opts.kinds
            .iter()
            .map(|k| k.name())
            .collect::<Vec<_>>()
            .join(","),
        opts.seconds,
        opts.seed,
        opts.layout.name(),
        if opts.kinds.len() == Kind::ALL.len() {
            String::new()
        } else {
            format!(
                " --kinds {}",
                opts.kinds
                    .iter()
                    .map(|k| k.name())
                    .collect::<Vec<_>>()
                    .join(",")
            )
        },
        opts.agent_env
            .iter()
            .map(|(k, v)| format!(" --agent-env {k}={v}"))
            .collect::<String>(),
    );
    let node = Arc::new(
        ChartNode::new_with(
            Chart::load("default"),
            ChartNodeOptions {
                netns_under_state: true,
            },
        )
        .await,
    );
    node.serve_daemonset_and_node();
    confdir::write_initial_primary(&node, opts.seed);
    let mut env = vec![(
        "ISTIO_OWNED_CNI_CONFIG".to_string(),
        (opts.layout == Layout::Owned).to_string(),
    )];
    env.extend(opts.agent_env.iter().cloned());
    let churn_opts = ChurnOptions {
        in_flight: opts.in_flight,
        // kubelet gives up on nothing; a pod not started after two minutes of retries is reported.
        max_attempts: u32::MAX,
        give_up_after: Duration::from_secs(120),
        ..ChurnOptions::default()
    };
    let refs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let first = node
        .try_start_daemon_pod("istio-cni-node-s0", &refs)
        .await
        .unwrap_or_else(|e| panic!("the first agent: {e}"));
    let now = Instant::now();
    let soak = Arc::new(Soak {
        node: node.clone(),
        env: env.clone(),
        t0: now,
        t0_wall: std::time::SystemTime::now(),
        deadline: now + Duration::from_secs(opts.seconds),
        agent: Mutex::new(first.clone()),
        generation: AtomicUsize::new(1),
        events: Mutex::new(Vec::new()),
        churn: Control::new(churn_opts.in_flight),
        samples: Mutex::new(Vec::new()),
        scans: Mutex::new(Vec::new()),
        loads: Mutex::new(Vec::new()),
        provenance: samples::Provenance::now(),
        opts,
    });
    if let Err(e) = lifecycle::wait_ready(&soak, &first).await {
        panic!("the first agent: {e}");
    }
    confdir::wait_entry(&soak).await;
    let started = Instant::now();
    println!(
        "soak: node up, agent ready; churn and chaos for {} s",
        soak.opts.seconds
    );

    let pods = tokio::spawn(churn(
        node.clone(),
        "soak".into(),
        churn_opts,
        soak.churn.clone(),
    ));
    let sampler = tokio::spawn(samples::sample(soak.clone()));
    let mut lane_tasks = Vec::new();
    for lane in [
        options::Lane::Lifecycle,
        options::Lane::ConfDir,
        options::Lane::Api,
    ] {
        lane_tasks.push(tokio::spawn(lanes::lane(soak.clone(), lane)));
    }
    let mut incidents = Vec::new();
    for t in lane_tasks {
        if let Err(e) = t.await {
            incidents.push(format!("a chaos lane panicked: {e}"));
        }
    }
    soak.churn.stop();
    let ends: Vec<PodEnd> = pods.await.unwrap_or_else(|e| {
        incidents.push(format!("the churn panicked: {e}"));
        Vec::new()
    });
    sampler.abort();
    let chaos_secs = started.elapsed().as_secs_f64();
    // The agent must still answer for the node at the end.
    if let Err(e) = lifecycle::wait_ready(&soak, &soak.agent()).await {
        incidents.push(format!("at the end: {e}"));
    }
    let end_scans = leaks::final_scans(&soak).await;
    let r = report::Report::build(&soak, &ends, end_scans, incidents, chaos_secs);
    let path = summary::write_json(&soak, &r, &ends);
    r.print(&soak, &path);
    if r.failed() {
        1
    } else {
        0
    }
}
