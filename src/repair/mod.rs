//! The repair agent: finds pods on this node that started without redirection (their `istio-validation`
//! init container keeps exiting 126) and repairs them in place, deletes them, or labels them.
//! Runs as its own applet (`istio-cni-repair`, as in 1.9: [`main`], command line in [`flags`], settings
//! in [`options`]) or inside `install-cni` ([`start_in_installer`], fed by the node's one pod watch; the
//! LIST + WATCH loop is [`crate::kube::podwatch`]).

pub mod action;
pub mod audit;
pub mod controller;
pub mod detect;
pub mod flags;
pub mod gap;
pub mod gap_end;
pub mod metrics;
pub mod options;
pub mod pod_netns;
pub mod procfs;
pub mod request;
pub mod selector;

use crate::error::{Context, Result};
use crate::kube::podwatch::{self, Fanout, Selection};
use crate::kube::Client;
use crate::settings::{self, EmptyEnv, Env, Named};
use std::path::PathBuf;

/// Everything the agent needs besides the detection options.
#[derive(Debug, Clone)]
pub struct Runtime {
    /// The host's `/proc` (for repair in place).
    pub host_proc: PathBuf,
    /// The plugin's run dir (iptables backend record), as the installer configures it.
    pub cni_agent_run_dir: String,
    /// Program nftables instead of iptables (`NATIVE_NFTABLES`).
    pub native_nftables: bool,
    /// Serve `/metrics` on this port (standalone agent only; `None` = do not serve).
    pub monitoring_port: Option<u16>,
    /// One list-and-act pass instead of a daemon.
    pub run_as_daemon: bool,
    /// The audit's interval (`AUDIT_INTERVAL`; zero: no audit).
    pub audit_interval: std::time::Duration,
    /// The plugin's `exclude_namespaces` (`EXCLUDE_NAMESPACES`), for the audit's decision.
    pub exclude_namespaces: Vec<String>,
    /// The agent's own namespace (`POD_NAMESPACE`): its own pods are never redirected, as in ADD.
    pub pod_namespace: String,
}

/// The plugin configuration a repaired pod is programmed with (what ADD would see from our conflist).
pub fn net_conf(rt: &Runtime) -> Result<crate::cni::NetConf> {
    let mut s = String::from(
        r#"{"cniVersion":"1.0.0","name":"istio-cni","type":"istio-cni","cni_agent_run_dir":"#,
    );
    crate::json::write_string(&mut s, &rt.cni_agent_run_dir);
    s.push_str(r#","pod_namespace":"#);
    crate::json::write_string(&mut s, &rt.pod_namespace);
    s.push_str(r#","exclude_namespaces":["#);
    for (i, n) in rt.exclude_namespaces.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        crate::json::write_string(&mut s, n);
    }
    s.push(']');
    s.push_str(&format!(r#","native_nftables":{}}}"#, rt.native_nftables));
    crate::cni::conf::parse(&s).context("repair: plugin configuration")
}

/// The `istio-cni-repair` applet's entry point. Bad flags or settings: one plain line, exit 2; once
/// logging runs, an error is one log line ([`crate::applet::fatal`]), exit 1.
pub fn main(name: &str, args: &[String]) -> i32 {
    use crate::applet::usage_error;
    let version = |f: &flags::Flags| f.version;
    let flags = match crate::applet::parse_args(name, flags::normalize(args), version) {
        Ok(f) => f,
        Err(code) => return code,
    };
    let env = |k: &str| std::env::var(k).ok();
    let (opts, rt) = match settings_of(&flags, &env) {
        Ok(s) => s,
        Err(e) => return usage_error(name, &e.to_string()),
    };
    let level = flags
        .log_level
        .as_deref()
        .and_then(crate::logging::parse_level)
        .unwrap_or(log::LevelFilter::Info);
    crate::logging::init(level);
    match standalone(name, &flags, opts, &rt) {
        Ok(0) => 0,
        Ok(n) => {
            log::error!("{n} broken pod(s) could not be handled");
            1
        }
        Err(e) => {
            crate::applet::fatal(name, module_path!(), &e);
            1
        }
    }
}

/// The standalone agent's settings from the command line and env, every one checked (the selectors
/// parsed, a node name required) before anything runs.
fn settings_of(flags: &flags::Flags, env: Env<'_>) -> Result<(options::Options, Runtime)> {
    let (opts, daemon) = options::resolve(&|n| flags.get(n), env)?;
    // The agent reads env as release-1.9's viper: an empty variable is unset.
    let r = Named {
        env,
        empty: EmptyEnv::Unset,
    };
    let monitoring_port = r.typed(
        &flags.monitoring_port,
        "MONITORING_PORT",
        options::DEFAULT_MONITORING_PORT,
        settings::parse_port,
    )?;
    let run_dir = r.text(
        &flags.cni_agent_run_dir,
        "CNI_AGENT_RUN_DIR",
        crate::rundir::DEFAULT,
    );
    let rt = Runtime {
        host_proc: flags
            .host_proc
            .clone()
            .unwrap_or_else(|| options::DEFAULT_HOST_PROC.into())
            .into(),
        cni_agent_run_dir: run_dir,
        native_nftables: r.bool(&None, "NATIVE_NFTABLES", false)?,
        monitoring_port: (monitoring_port != 0).then_some(monitoring_port),
        run_as_daemon: daemon,
        audit_interval: r.typed(
            &flags.audit_interval,
            "AUDIT_INTERVAL",
            audit::DEFAULT_INTERVAL,
            settings::parse_duration,
        )?,
        exclude_namespaces: r
            .text(&None, "EXCLUDE_NAMESPACES", "")
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect(),
        pod_namespace: r.text(&None, "POD_NAMESPACE", ""),
    };
    if opts.enabled {
        check(&opts)?;
    }
    Ok((opts, rt))
}

/// The standalone agent: its own client and metrics server.
fn standalone(
    name: &str,
    flags: &flags::Flags,
    opts: options::Options,
    rt: &Runtime,
) -> Result<u32> {
    if !opts.enabled {
        log::info!("disabled (repair-enabled=false); nothing to do");
        return Ok(0);
    }
    let client = match &flags.kubeconfig {
        Some(p) => Client::from_kubeconfig(std::path::Path::new(p))?,
        None => Client::from_env().map_err(|e| {
            if std::env::var_os("KUBECONFIG").is_some() {
                return e;
            }
            crate::Error::config(format!(
                "{e} (outside a pod, give it a kubeconfig: --kubeconfig or KUBECONFIG)"
            ))
        })?,
    };
    if let (Some(port), true) = (rt.monitoring_port, rt.run_as_daemon) {
        let addr = metrics::serve(port)?;
        log::info!("metrics on http://{addr}/metrics");
    }
    let failed = run(client, opts, rt)?;
    // One-shot mode: the counters are the pass's summary, for scripts and tests.
    crate::applet::print_out(name, &crate::metrics::text(metrics::render), 0);
    Ok(failed)
}

/// What every mode checks before it starts: the detection settings parse and a node name is set.
fn check(opts: &options::Options) -> Result<detect::Detector> {
    let det = detect::Detector::new(opts.clone())?;
    // Upstream would then watch `spec.nodeName=` (unscheduled pods only) and silently never repair anything.
    if opts.node_name.trim().is_empty() {
        return Err(crate::Error::config(
            "repair: no node name: set REPAIR_NODE_NAME (or --repair-node-name) from the pod's spec.nodeName",
        ));
    }
    Ok(det)
}

/// The detector and the actor for `opts`, after the checks every mode shares.
fn prepare(
    client: &Client,
    opts: &options::Options,
    rt: &Runtime,
) -> Result<(detect::Detector, action::Actor)> {
    let det = check(opts)?;
    let actor = action::Actor::new(client.clone(), opts, rt)?;
    if !opts.any_mode() {
        log::warn!(
            "no mode enabled (repair-pods, delete-pods, label-pods): broken pods are only logged"
        );
    }
    log::info!(
        "pods with fieldSelector {:?} labelSelector {:?}; modes: repair={} delete={} label={}",
        opts.effective_field_selector(),
        opts.label_selectors,
        opts.repair_pods,
        opts.delete_pods,
        opts.label_pods
    );
    Ok((det, actor))
}

/// Runs the agent with `opts` until the process ends (daemon) or after one pass. Returns the number of
/// pods that could not be acted on (one-shot mode).
pub fn run(client: Client, opts: options::Options, rt: &Runtime) -> Result<u32> {
    let (det, actor) = prepare(&client, &opts, rt)?;
    let (tx, rx) = std::sync::mpsc::channel();
    let mut worker = controller::Worker::default();
    let sel = selection(&opts);
    let mut sinks: Vec<Box<dyn podwatch::PodSink + Send>> =
        vec![Box::new(controller::RepairSink { det, tx })];
    if rt.run_as_daemon && !rt.audit_interval.is_zero() {
        sinks.push(Box::new(audit::start(client.clone(), &opts, rt)?));
    }
    let mut sink = Fanout::new(sinks);
    if !rt.run_as_daemon {
        let mut timing = podwatch::timing::Timing::start();
        podwatch::list_all(&client, &sel, &mut sink, &mut timing).context("repair: list pods")?;
        drop(sink);
        worker.run(&rx, &actor);
        return Ok(worker.failed);
    }
    std::thread::Builder::new()
        .name("repair-watch".into())
        .spawn(move || podwatch::watch_forever(&client, &sel, sink))
        .map_err(|e| crate::Error::io("repair: spawn the watcher", e))?;
    worker.run(&rx, &actor);
    Err(crate::Error::other("repair: the pod watcher stopped"))
}

/// The standalone agent's pods: its label and field selectors (and the node) on the server.
pub fn selection(opts: &options::Options) -> Selection {
    Selection {
        label: Some(opts.label_selectors.clone()).filter(|s| !s.is_empty()),
        field: opts.effective_field_selector(),
        what: "repair",
    }
}

/// The in-installer mode (`install-cni` with `REPAIR_ENABLED=true`): starts the worker on a background
/// thread with the installer's API client and returns the sink that feeds it. The installer's one pod
/// watch of the node feeds it (and the pod cache), so the label and field selectors apply here, on each
/// pod, not on the server. Metrics go to the process-wide counters the installer's `/metrics` renders via
/// [`metrics::render`].
pub fn start_in_installer(
    client: Client,
    opts: options::Options,
    rt: Runtime,
) -> Result<controller::RepairSink> {
    let rt = Runtime {
        run_as_daemon: true,
        monitoring_port: None,
        ..rt
    };
    let (det, actor) = prepare(&client, &opts, &rt)?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("repair".into())
        .spawn(move || {
            controller::Worker::default().run(&rx, &actor);
            log::error!("repair agent stopped: the pod watch ended");
        })
        .map_err(|e| crate::Error::io("repair: spawn the agent", e))?;
    Ok(controller::RepairSink { det, tx })
}
