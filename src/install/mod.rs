//! The `install-cni` applet: puts the plugin on the node and keeps it there, takes it away cleanly.
//!
//! Rooms: [`settings`] (the command line, the settings resolved from it and the environment), [`steps`]
//! (the installer's state and what it does: binaries, kubeconfig, our configuration, the cleanup), [`run`]
//! (the loop: its decision table, its rounds, the directory watch), [`config`] (the configuration logic:
//! the runtime's choice, libcni's rules, our entry in and out), [`handover`] (the SIGTERM decision, and
//! an older agent yielding to a newer one), [`node`] (the node's services: health and metrics, the
//! plugin's log relay, the pod watch). Here: the entry [`main`] and [`cli`] (the run: signals, servers,
//! the loop, the decision at stop).
//!
//! The composition root of the DaemonSet: like upstream's `install-cni`, it runs the repair agent in-process
//! (`REPAIR_ENABLED`) and the audit, so it takes their settings and starts both through them
//! ([`crate::agents::Options`]), fed by the node's one pod watch ([`node::podwatch`]) that also fills the pod
//! cache ([`crate::podcache`]); it names three items of theirs (that, their series [`crate::agents::render`],
//! the one-shot [`crate::agents::audit_once`]), and the arrows point one way: the agents import nothing
//! from the installer (what both use, [`crate::httpd`] and [`crate::pod_rules`], sits below them).

pub mod cli;
pub mod config;
pub mod handover;
pub mod node;
pub mod run;
pub mod settings;
pub mod steps;

use crate::settings::process_env;
use settings::{flags, options};

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
    let version = |f: &flags::Flags| f.version;
    let flags = match crate::applet::parse_args(name, flags::normalize_args(args), version) {
        Ok(f) => f,
        Err(code) => return code,
    };
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
/// ([`crate::agents::audit_once`]).
fn audit_once(name: &str, args: &[String]) -> i32 {
    crate::agents::audit_once(name, args, || {
        let s = options::resolve(&flags::Flags::default(), &process_env)
            .map_err(|e| format!("invalid configuration: {e}"))?;
        if s.node_name.is_empty() {
            return Err("no node name: set NODE_NAME from the pod's spec.nodeName".into());
        }
        let conf = node::podwatch::net_conf(&s);
        Ok((s.agents.clone(), conf, s.node_name.clone(), move || {
            node::podwatch::client(&s)
        }))
    })
}
