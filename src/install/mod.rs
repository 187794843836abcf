//! The `install-cni` applet: puts the plugin on the node and keeps it there, takes it away cleanly.
//!
//! Entry: [`main`]; command line: [`flags`]; settings: [`options`].
//! Pure: [`select`] (primary choice), [`libcni`] (libcni's validity rules), [`conflist`] (merge/remove, byte-exact
//! output), [`check`] (validity of the installed state), [`kubeconfig`] (rendering), [`links`] (the candidates'
//! link chains and the directories to watch for them; its `chains_of` reads the file system).
//! Effects: [`binaries`], [`installer`] (the steps), [`watch`] (inotify), [`run`] (the loop), [`server`]
//! (health and metrics), [`relay`] (plugin log relay), [`podwatch`] (the node's pod watch, pod cache and
//! repair agent), [`cleanup`], [`supersede`] (an older agent yielding to a newer one), [`cli`] (the run:
//! signals, servers, the loop).
//!
//! The composition root of the DaemonSet: like upstream's `install-cni`, it runs the repair agent in-process
//! (`REPAIR_ENABLED`), so it takes the agent's settings ([`crate::repair::options`]) and starts
//! [`crate::repair::start_in_installer`], fed by the node's one pod watch ([`podwatch`]) that also fills
//! the pod cache ([`crate::podcache`]). That is the only role-to-role import, and it points one way: the
//! repair agent imports nothing from the installer (what both use, [`crate::httpd`] and
//! [`crate::pod_rules`], sits below them).

pub mod binaries;
pub mod check;
pub mod cleanup;
pub mod cli;
pub mod conflist;
pub mod flags;
pub mod handover;
pub mod handover_lookup;
pub mod installer;
pub mod kubeconfig;
pub mod legacy;
pub mod libcni;
pub mod links;
pub mod log_settings;
pub mod options;
pub mod plugin_dir;
pub mod plugin_metrics;
pub mod podwatch;
pub mod relay;
pub mod run;
pub mod select;
pub mod selectors;
pub mod server;
pub mod supersede;
pub mod watch;

use crate::settings::process_env;

/// The `install-cni` applet's entry point; returns the exit code. Errors before logging starts (flags,
/// settings) are one plain line, later ones one log line ([`crate::applet::fatal`]).
pub fn main(name: &str, args: &[String]) -> i32 {
    use crate::applet::{print_err, usage_error};
    if args.first().is_some_and(|a| a == "audit") {
        return audit_once(name, &args[1..]);
    }
    // For istio_cni_startup_ready_seconds.
    crate::applet::mark_start();
    // First, so a SIGTERM arriving during start-up is not lost (it ends the loop at its first check).
    let sigfd = match cli::block_signals() {
        Ok(fd) => fd,
        Err(e) => {
            print_err(&format!("{name}: {e}\n"));
            return 1;
        }
    };
    let args = match flags::normalize_args(args) {
        Ok(a) => a,
        Err(e) => return usage_error(name, &e),
    };
    let flags: flags::Flags = match crate::applet::parse_args(name, &args) {
        Ok(f) => f,
        Err(code) => return code,
    };
    if flags.version {
        return crate::applet::print_version(name);
    }
    let settings = match options::resolve(&flags, &process_env) {
        Ok(s) => s,
        Err(e) => return usage_error(name, &format!("invalid configuration: {e}")),
    };
    crate::logging::init_with(&settings.log);
    for w in &settings.warnings {
        log::warn!("{w}");
    }
    match cli::serve(settings, sigfd) {
        Ok(code) => code,
        Err(e) => {
            crate::applet::fatal(name, module_path!(), &e);
            1
        }
    }
}

/// `install-cni audit [--json] [--host-proc DIR]`: the audit once, with this agent's settings (its
/// environment: the node, the backend, the run dir, the API server), for `kubectl exec` into its container
/// ([`crate::repair::audit::once`]).
fn audit_once(name: &str, args: &[String]) -> i32 {
    use crate::applet::{print_out, usage_error};
    use crate::repair::audit::once;
    let me = format!("{name} audit");
    let a = match once::parse_args(args) {
        Ok(Some(a)) => a,
        Ok(None) => return print_out(name, once::HELP, 0),
        Err(e) => return usage_error(&me, &e),
    };
    let s = match options::resolve(&flags::Flags::default(), &process_env) {
        Ok(s) => s,
        Err(e) => return usage_error(&me, &format!("invalid configuration: {e}")),
    };
    if s.node_name.is_empty() {
        return usage_error(
            &me,
            "no node name: set NODE_NAME from the pod's spec.nodeName",
        );
    }
    crate::logging::init(log::LevelFilter::Warn);
    let mut rt = podwatch::runtime(&s);
    if let Some(p) = a.host_proc {
        rt.host_proc = p.into();
    }
    let run = || -> crate::Result<Vec<(String, crate::repair::audit::verdict::Verdict)>> {
        let det = crate::repair::detect::Detector::new(s.repair.clone())?;
        let conf = crate::repair::net_conf(&rt)?;
        once::audit(
            &podwatch::client(&s)?,
            det,
            &s.node_name,
            &rt.host_proc,
            &conf,
        )
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
