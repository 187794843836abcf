//! ADD and CHECK: decide whether the pod gets redirection and, if so, program it in the pod's netns.

use crate::cni::{result, CmdEnv, K8sArgs, NetConf};
use crate::error::{Context, Error, Result};
use crate::json::{Object, Value};
use crate::kube;
use crate::pod_rules;
use crate::podcache::{self, Miss, Source};
use std::path::Path;
use std::time::{Duration, Instant};

use crate::addrecord::{AddRecord, Backend, Outcome};
use crate::redirect::plan::{refuse_ambient, shortcut};

/// What an ADD did, for the record the plugin relays ([`crate::addrecord`]).
#[derive(Debug)]
pub struct Report {
    started: Instant,
    /// The configured backend (the one a failed ADD was due to program) is nftables.
    nftables: bool,
    /// Where the pod object came from (`None`: not read).
    pub source: Option<Source>,
    pub redirected: bool,
    /// The ADD's decision line, logged with its record ([`crate::logging::log_with_record`]).
    pub line: Option<String>,
}

impl Report {
    /// An ADD starting now.
    pub fn new(nftables: bool) -> Report {
        Report {
            started: Instant::now(),
            nftables,
            source: None,
            redirected: false,
            line: None,
        }
    }

    /// The record of this ADD, ending now, succeeded (`ok`) or not.
    pub fn record(&self, ok: bool) -> AddRecord {
        let configured = if self.nftables {
            Backend::Nftables
        } else {
            Backend::Iptables
        };
        let (backend, outcome) = match (ok, self.redirected) {
            (true, true) => (configured, Outcome::Redirected),
            (true, false) => (Backend::None, Outcome::Skipped),
            (false, _) if self.source.is_some() => (configured, Outcome::Failed),
            (false, _) => (Backend::None, Outcome::Failed),
        };
        AddRecord {
            seconds: self.started.elapsed().as_secs_f64(),
            backend,
            outcome,
            source: self.source,
        }
    }
}

/// The pod object: from the installer's pod cache when it has it (and the configuration does not turn it
/// off, and the runtime gave the pod's UID: [`Miss::NoUid`]), else from the API server exactly as without
/// a cache, with the whole lookup deadline. `report` learns where the pod came from, even when the lookup
/// fails.
fn pod_lookup(
    conf: &NetConf,
    args: &K8sArgs,
    report: &mut Report,
) -> Result<(Object, Duration, Source)> {
    let t = Instant::now();
    let miss = if !conf.pod_cache {
        Miss::Disabled
    } else if args.pod_uid.is_empty() {
        Miss::NoUid
    } else {
        let req = podcache::proto::Request {
            namespace: args.pod_namespace.clone(),
            name: args.pod_name.clone(),
            uid: args.pod_uid.clone(),
        };
        match podcache::client::lookup(&conf.run_dir().pod_cache_socket(), &req) {
            Ok(pod) => {
                report.source = Some(Source::Cache);
                return Ok((pod, t.elapsed(), Source::Cache));
            }
            Err(m) => m,
        }
    };
    // Counted as an API lookup even when the GET fails.
    report.source = Some(Source::Api(miss));
    let path = conf.kubeconfig_path();
    // No TCP keepalive: the one request has its own deadline (pod_lookup_deadline), so probes could never
    // end anything sooner; the ADD path keeps its four setsockopt calls.
    let timeouts = kube::Timeouts {
        keepalive: None,
        ..kube::Timeouts::default()
    };
    let client = kube::Config::from_trusted_kubeconfig(Path::new(&path))
        .and_then(|c| kube::Client::with_timeouts(c, timeouts))
        .with_context(|| format!("create the kubernetes client from {path}"))?;
    let pod = kube::get_pod_with_retry(
        &client,
        &args.pod_namespace,
        &args.pod_name,
        &args.pod_uid,
        conf.pod_lookup_deadline,
    );
    let pod = match miss {
        Miss::Disabled => pod?,
        m => pod.with_context(|| format!("pod cache: {}; API server", m.name()))?,
    };
    Ok((pod, t.elapsed(), Source::Api(miss)))
}

/// ADD, with `node_env` the plugin process's environment (read by the plan); `report` learns where the
/// pod came from and whether rules were programmed.
pub fn add(
    conf: &NetConf,
    env: &CmdEnv,
    node_env: &dyn Fn(&str) -> Option<String>,
    report: &mut Report,
) -> Result<String> {
    let args = K8sArgs::parse(&env.args).context("failed to load args")?;
    if matches!(
        conf.raw.get(crate::cni::conf::NO_PRIMARY_KEY),
        Some(Value::Bool(true))
    ) {
        return Err(Error::config(format!(
            "no primary CNI configuration on this node: istio-cni's own file holds no network to chain \
             onto, so pod {}/{} is refused (it starts once the node's CNI writes its configuration)",
            args.pod_namespace, args.pod_name
        )));
    }
    // Parse prevResult first: a result we cannot pass on fails ADD before anything is programmed.
    let output = result::passthrough(conf.prev_result.as_ref(), &conf.cni_version)?;
    let who = format!(
        "ADD {}/{} ({})",
        args.pod_namespace, args.pod_name, env.container_id
    );
    if let Some(s) = shortcut(conf, &args) {
        report.line = Some(format!("{who}: no redirection: {}", s.reason()));
        return Ok(output);
    }
    refuse_ambient(conf, &args)?;
    let (pod, lookup, source) = pod_lookup(conf, &args, report).with_context(|| {
        format!(
            "pod {}/{} may need a sidecar, refusing to start it unredirected",
            args.pod_namespace, args.pod_name
        )
    })?;
    let msg = pod_rules::program_pod(&pod, &env.netns, conf, node_env)
        .with_context(|| format!("pod {}/{}", args.pod_namespace, args.pod_name))?;
    report.redirected = msg.redirected;
    report.line = Some(format!(
        "{who}: {msg}; pod lookup {:.1} ms ({source})",
        lookup.as_secs_f64() * 1000.0
    ));
    Ok(output)
}

/// CHECK: the pod's rules are all present (upstream's CHECK checks nothing).
pub fn check(
    conf: &NetConf,
    env: &CmdEnv,
    node_env: &dyn Fn(&str) -> Option<String>,
) -> Result<()> {
    let args = K8sArgs::parse(&env.args).context("failed to load args")?;
    // The previous result must be readable, but it does not decide anything: IPv6 is decided from the
    // namespace's own addresses, as ADD does.
    if let Some(p) = &conf.prev_result {
        result::parse_prev(p, &conf.cni_version)?;
    }
    if shortcut(conf, &args).is_some() {
        return Ok(());
    }
    let (pod, _, _) = pod_lookup(conf, &args, &mut Report::new(conf.native_nftables))?;
    pod_rules::check_pod(&pod, &env.netns, conf, node_env)
        .with_context(|| format!("CHECK pod {}/{}", args.pod_namespace, args.pod_name))
}
