//! The node's agents: the repair agent ([`crate::repair`]) and the audit ([`crate::audit`], which runs with
//! repair off too), started in one place ([`start`]) for the `istio-cni-repair` applet ([`standalone`]) and for
//! `install-cni`, whose one pod watch feeds them; their series ([`render`]) and the operators' one-shot
//! audit ([`audit_once`]). The roles below know nothing of each other's start: the audit acts through the
//! repair agent's actions, and neither imports this room.

pub mod standalone;

use crate::error::{Context, Result};
use crate::kube::podwatch::{PodSink, Selection};
use crate::kube::Client;
use crate::repair::action::Actor;
use crate::repair::controller::Runner;
use crate::repair::options::Options;
use std::path::PathBuf;

/// Everything the agents need besides the repair agent's options.
#[derive(Debug, Clone)]
pub struct Runtime {
    /// The host's `/proc` (for repair in place and the audit).
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

/// `AUDIT_INTERVAL`'s default.
pub const DEFAULT_AUDIT_INTERVAL: std::time::Duration = crate::audit::DEFAULT_INTERVAL;

impl Runtime {
    /// The plugin configuration a repaired pod is programmed with and a pod is audited against (what ADD
    /// would see from our conflist).
    pub fn net_conf(&self) -> Result<crate::cni::NetConf> {
        let mut s = String::from(
            r#"{"cniVersion":"1.0.0","name":"istio-cni","type":"istio-cni","cni_agent_run_dir":"#,
        );
        crate::json::write_string(&mut s, &self.cni_agent_run_dir);
        s.push_str(r#","pod_namespace":"#);
        crate::json::write_string(&mut s, &self.pod_namespace);
        s.push_str(r#","exclude_namespaces":["#);
        for (i, n) in self.exclude_namespaces.iter().enumerate() {
            if i > 0 {
                s.push(',');
            }
            crate::json::write_string(&mut s, n);
        }
        s.push(']');
        s.push_str(&format!(r#","native_nftables":{}}}"#, self.native_nftables));
        crate::cni::conf::parse(&s).context("repair: plugin configuration")
    }

    /// The repair actions for `opts` (the audit's too: their modes all off when repair is disabled).
    fn actor(&self, client: &Client, opts: &Options) -> Result<Actor> {
        Ok(Actor::new(
            client.clone(),
            opts,
            self.host_proc.clone(),
            self.net_conf()?,
        ))
    }
}

/// The agents for one pod watch, started.
pub struct Agents {
    /// What the pod watch feeds: the repair agent's sink, then the audit's.
    pub sinks: Vec<Box<dyn PodSink + Send>>,
    /// The repair agent's worker when [`start`] was not to spawn it, for the caller to run.
    pub worker: Option<Runner>,
    /// The repair agent runs (or its worker waits to be run).
    pub repair: bool,
    /// The audit runs (on a thread of its own).
    pub audit: bool,
}

/// Prepares the repair agent (when `opts.enabled`; its worker on a thread of its own when `spawn`) and
/// starts the audit (when `audit`), each on the sinks of one pod watch. A part that cannot start goes to
/// `failed` with its name (`repair agent`, `audit`): an `Err` from it stops here (the applet), an `Ok`
/// goes on without that part (the installer logs it).
pub fn start(
    client: &Client,
    opts: &Options,
    rt: &Runtime,
    (spawn, audit): (bool, bool),
    failed: &dyn Fn(&str, crate::Error) -> Result<()>,
) -> Result<Agents> {
    let mut agents = Agents {
        sinks: Vec::new(),
        worker: None,
        repair: false,
        audit: false,
    };
    if opts.enabled {
        let started = rt.actor(client, opts).and_then(crate::repair::start);
        match started.and_then(|(sink, r)| match spawn {
            true => r.spawn().map(|()| (sink, None)),
            false => Ok((sink, Some(r))),
        }) {
            Ok((sink, worker)) => {
                agents.sinks.push(Box::new(sink));
                agents.worker = worker;
                agents.repair = true;
            }
            Err(e) => failed("repair agent", e)?,
        }
    }
    if audit {
        match rt
            .actor(client, opts)
            .and_then(|a| crate::audit::round::start(a, rt.audit_interval))
        {
            Ok(sink) => {
                agents.sinks.push(Box::new(sink));
                agents.audit = true;
            }
            Err(e) => failed("audit", e)?,
        }
    }
    Ok(agents)
}

/// The pods the watch lists: this node's when another sink needs them all (`whole_node`: the pod cache,
/// the installer's audit), else the repair agent's label and field selectors on the server (then they
/// apply there; with the whole node they apply to each pod, in the repair agent's sink).
pub fn selection(opts: &Options, whole_node: Option<&str>) -> Selection {
    match whole_node {
        Some(node) => Selection {
            label: None,
            field: format!("spec.nodeName={node}"),
            what: "pod watch",
        },
        None => Selection {
            label: Some(opts.label_selectors.clone()).filter(|s| !s.is_empty()),
            field: opts.effective_field_selector(),
            what: "repair",
        },
    }
}

/// The agents' series: the repair agent's counters (nothing before it acts), the audit's (nothing when it
/// does not run in this process).
pub fn render(out: &mut String) {
    crate::repair::metrics::render(out);
    crate::audit::metrics::render(out);
}

/// `install-cni audit [--json] [--host-proc DIR]` ([`crate::audit::once`]): `name` is the applet's;
/// `settings` gives the agents' settings, this node's name and how to make the API client, or why not (a
/// usage error), once the arguments are read.
pub fn audit_once<C: FnOnce() -> Result<Client>>(
    name: &str,
    args: &[String],
    settings: impl FnOnce() -> std::result::Result<(Options, Runtime, String, C), String>,
) -> i32 {
    use crate::applet::{print_out, usage_error};
    use crate::audit::once;
    let me = format!("{name} audit");
    let a = match once::parse_args(args) {
        Ok(Some(a)) => a,
        Ok(None) => return print_out(name, once::HELP, 0),
        Err(e) => return usage_error(&me, &e),
    };
    let (opts, mut rt, node, client) = match settings() {
        Ok(s) => s,
        Err(e) => return usage_error(&me, &e),
    };
    crate::logging::init(log::LevelFilter::Warn);
    if let Some(p) = a.host_proc {
        rt.host_proc = p.into();
    }
    let run = || {
        let det = crate::repair::detect::Detector::new(opts)?;
        let conf = rt.net_conf()?;
        once::audit(&client()?, det, &node, &rt.host_proc, &conf)
    };
    match run() {
        Ok(v) => {
            let (text, code) = once::report(&v, a.json);
            print_out(name, &text, code)
        }
        Err(e) => {
            crate::applet::fatal(&me, module_path!(), &e);
            1
        }
    }
}
