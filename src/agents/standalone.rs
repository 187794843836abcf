//! The standalone agents (the `istio-cni-repair` applet, as in 1.9): the repair agent and the audit on a
//! pod watch of their own, with their own API client and `/metrics` ([`serve`]); command line in
//! [`crate::repair::flags`], settings in [`crate::repair::options`] and here.

use super::Options;
use crate::cni::NetConf;
use crate::error::{Context, Result};
use crate::kube::podwatch::{self, Fanout};
use crate::kube::Client;
use crate::repair::{flags, options};
use crate::settings::{self, EmptyEnv, Env, Named};
use std::net::SocketAddr;

/// The `istio-cni-repair` applet's entry point. Bad flags or settings: one plain line, exit 2; once logging runs, an error is
/// one log line ([`crate::applet::fatal`]), exit 1.
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
    match with_client(name, &flags, opts, &rt) {
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
fn settings_of(flags: &flags::Flags, env: Env<'_>) -> Result<(Options, Runtime)> {
    let (repair, daemon) = options::resolve(&|n| flags.get(n), env)?;
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
    let nft = r.bool(&None, "NATIVE_NFTABLES", false)?;
    let opts = Options {
        repair,
        host_proc: flags
            .host_proc
            .clone()
            .unwrap_or_else(|| options::DEFAULT_HOST_PROC.into())
            .into(),
        audit_interval: r.typed(
            &flags.audit_interval,
            "AUDIT_INTERVAL",
            crate::audit::DEFAULT_INTERVAL,
            settings::parse_duration,
        )?,
    };
    let excluded: Vec<String> = r
        .text(&None, "EXCLUDE_NAMESPACES", "")
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect();
    let pod_ns = r.text(&None, "POD_NAMESPACE", "");
    let rt = Runtime {
        conf: crate::cni::conf::for_agents(&run_dir, &pod_ns, &excluded, nft)?,
        monitoring_port: (monitoring_port != 0).then_some(monitoring_port),
        run_as_daemon: daemon,
    };
    if opts.repair.enabled {
        crate::repair::check(&opts.repair)?;
    }
    Ok((opts, rt))
}

/// The standalone agent: its own client and metrics server.
fn with_client(name: &str, flags: &flags::Flags, opts: Options, rt: &Runtime) -> Result<u32> {
    if !opts.repair.enabled {
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
        let addr = serve(port)?;
        log::info!("metrics on http://{addr}/metrics");
    }
    let failed = run(client, opts, rt)?;
    // One-shot mode: the counters are the pass's summary, for scripts and tests.
    let summary = crate::metrics::text(crate::repair::metrics::render);
    crate::applet::print_out(name, &summary, 0);
    Ok(failed)
}

/// Runs the agents with `opts` until the process ends (daemon: the repair agent and the audit) or after
/// one pass (the repair agent alone). Returns the number of pods that could not be acted on (one-shot).
fn run(client: Client, opts: Options, rt: &Runtime) -> Result<u32> {
    let audit = rt.run_as_daemon && !opts.audit_interval.is_zero();
    let agents = opts.start(&client, &rt.conf, (false, audit), &|_, e| Err(e))?;
    let runner = agents
        .worker
        .ok_or_else(|| crate::Error::other("repair: the agent is disabled"))?;
    let sel = super::selection(&opts.repair, None);
    let mut sink = Fanout::new(agents.sinks);
    if !rt.run_as_daemon {
        let mut timing = podwatch::timing::Timing::start();
        podwatch::list_all(&client, &sel, &mut sink, &mut timing).context("repair: list pods")?;
        drop(sink);
        return Ok(runner.run());
    }
    std::thread::Builder::new()
        .name("repair-watch".into())
        .spawn(move || podwatch::watch_forever(&client, &sel, sink))
        .map_err(|e| crate::Error::io("repair: spawn the watcher", e))?;
    runner.run();
    Err(crate::Error::other("repair: the pod watcher stopped"))
}

/// How the standalone agent runs: with the plugin's configuration `conf` (its run dir, `NATIVE_NFTABLES`,
/// `EXCLUDE_NAMESPACES`, `POD_NAMESPACE`), `/metrics` on `monitoring_port` (`None`: not served), as a
/// daemon or one list-and-act pass.
struct Runtime {
    conf: NetConf,
    monitoring_port: Option<u16>,
    run_as_daemon: bool,
}

/// Serves the standalone agent's `GET /metrics` on `port` ([`crate::httpd::serve`]: dual-stack, every
/// connection independently, as the installer): the agents' series and its watch's timings. Returns the
/// bound address.
pub fn serve(port: u16) -> Result<SocketAddr> {
    crate::httpd::serve(port, "repair-metrics", |path| match path {
        "/metrics" => (
            200,
            crate::metrics::CONTENT_TYPE,
            crate::metrics::text(|s| {
                super::render(s);
                podwatch::timing::render(s);
            }),
        ),
        _ => (404, "text/plain", "Not Found\n".into()),
    })
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};

    #[test]
    fn the_agents_series_are_served() {
        crate::repair::metrics::inc("label", "skip");
        let addr = super::serve(0).unwrap();
        let mut c = std::net::TcpStream::connect(("127.0.0.1", addr.port())).unwrap();
        c.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut s = String::new();
        c.read_to_string(&mut s).unwrap();
        assert!(
            s.starts_with("HTTP/1.1 200 OK") && s.contains("type=\"label\""),
            "{s}"
        );
    }
}
