//! The node's agents: the repair agent ([`crate::repair`]) and the audit ([`crate::audit`], which runs with
//! repair off too), started in one place ([`Options::start`]) for the `istio-cni-repair` applet
//! ([`standalone`]) and for `install-cni`, whose one pod watch feeds them; their series ([`render`]) and the
//! operators' one-shot audit ([`audit_once`]). The roles below know nothing of each other's start: the
//! audit acts through the repair agent's actions, and neither imports this room.

pub mod standalone;

use crate::audit::DEFAULT_INTERVAL;
use crate::cni::NetConf;
use crate::error::Result;
use crate::kube::podwatch::{PodSink, Selection};
use crate::kube::Client;
use crate::repair::action::Actor;
use crate::repair::controller::Runner;
use crate::settings::{parse_duration, Named};
use std::path::PathBuf;
use std::time::Duration;

/// The agents' settings: the repair agent's, the audit's round, the host's `/proc`.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// The repair agent's (`REPAIR_*`).
    pub repair: crate::repair::options::Options,
    /// `AUDIT_INTERVAL` (default 60s; zero: no audit).
    pub audit_interval: Duration,
    /// The host's `/proc` (for repair in place and the audit).
    pub host_proc: PathBuf,
}

impl Options {
    /// The in-installer agents' settings, read as the installer reads its own (`r`): `REPAIR_*` by the
    /// repair agent's reader ([`crate::repair::options::from_installer_env`]), `AUDIT_INTERVAL` (`flag`
    /// its `--audit-interval`); the host's `/proc` is the DaemonSet's mount.
    pub fn from_installer(r: &Named<'_>, flag: &Option<String>) -> Result<Options> {
        Ok(Options {
            repair: crate::repair::options::from_installer_env(r.env)?,
            audit_interval: r.typed(flag, "AUDIT_INTERVAL", DEFAULT_INTERVAL, parse_duration)?,
            host_proc: crate::repair::options::DEFAULT_HOST_PROC.into(),
        })
    }

    /// Prepares the repair agent (when `repair.enabled`; its worker on a thread of its own when `spawn`)
    /// and starts the audit (when `audit`), each on the sinks of one pod watch, acting with the plugin's
    /// configuration `conf` ([`crate::cni::conf::for_agents`]). A part that cannot start goes to `failed`
    /// with its name (`repair agent`, `audit`): an `Err` from it stops here (the applet), an `Ok` goes on
    /// without that part (the installer logs it).
    pub fn start(
        &self,
        client: &Client,
        conf: &NetConf,
        (spawn, audit): (bool, bool),
        failed: &dyn Fn(&str, crate::Error) -> Result<()>,
    ) -> Result<Agents> {
        let mut agents = Agents::default();
        if self.repair.enabled {
            let started = crate::repair::start(self.actor(client, conf));
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
            match crate::audit::round::start(self.actor(client, conf), self.audit_interval) {
                Ok(sink) => {
                    agents.sinks.push(Box::new(sink));
                    agents.audit = true;
                }
                Err(e) => failed("audit", e)?,
            }
        }
        Ok(agents)
    }

    /// The repair actions (the audit's too: their modes all off when repair is disabled).
    fn actor(&self, client: &Client, conf: &NetConf) -> Actor {
        Actor::new(
            client.clone(),
            &self.repair,
            self.host_proc.clone(),
            conf.clone(),
        )
    }
}

/// The agents for one pod watch, started.
#[derive(Default)]
pub struct Agents {
    /// What the pod watch feeds: the repair agent's sink, then the audit's.
    pub sinks: Vec<Box<dyn PodSink + Send>>,
    /// The repair agent's worker when [`Options::start`] was not to spawn it, for the caller to run.
    pub worker: Option<Runner>,
    /// The repair agent runs (or its worker waits to be run).
    pub repair: bool,
    /// The audit runs (on a thread of its own).
    pub audit: bool,
}

impl Agents {
    /// The pods the node's one watch lists (pure): the whole node (`node`) when the pod cache (`cache`) or
    /// the audit runs (the repair agent's selectors then apply to each pod, in its sink), else the repair
    /// agent's selectors on the server; `None` when nothing runs.
    pub fn selection(&self, opts: &Options, node: &str, cache: bool) -> Option<Selection> {
        let whole_node = (cache || self.audit).then_some(node);
        (whole_node.is_some() || self.repair).then(|| selection(&opts.repair, whole_node))
    }
}

/// The pods the watch lists: this node's when another sink needs them all (`whole_node`: the pod cache,
/// the installer's audit), else the repair agent's label and field selectors on the server (then they
/// apply there; with the whole node they apply to each pod, in the repair agent's sink).
fn selection(opts: &crate::repair::options::Options, whole_node: Option<&str>) -> Selection {
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
/// `settings` gives the agents' settings, the plugin's configuration, this node's name and how to make the
/// API client, or why not (a usage error), once the arguments are read.
pub fn audit_once<C: FnOnce() -> Result<Client>>(
    name: &str,
    args: &[String],
    settings: impl FnOnce() -> std::result::Result<(Options, Result<NetConf>, String, C), String>,
) -> i32 {
    use crate::applet::{print_out, usage_error};
    use crate::audit::once;
    let me = format!("{name} audit");
    let a = match once::parse_args(args) {
        Ok(Some(a)) => a,
        Ok(None) => return print_out(name, once::HELP, 0),
        Err(e) => return usage_error(&me, &e),
    };
    let (mut opts, conf, node, client) = match settings() {
        Ok(s) => s,
        Err(e) => return usage_error(&me, &e),
    };
    crate::logging::init(log::LevelFilter::Warn);
    if let Some(p) = a.host_proc {
        opts.host_proc = p.into();
    }
    let run = || {
        let det = crate::repair::detect::Detector::new(opts.repair)?;
        let conf = conf?;
        once::audit(&client()?, det, &node, &opts.host_proc, &conf)
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
