//! The repair agent: finds pods on this node that started without redirection (their `istio-validation`
//! init container keeps exiting 126) and repairs them in place, deletes them, or labels them. Settings in
//! [`options`] (command line in [`flags`]); [`start`] prepares it, [`crate::agents`] starts it with the
//! audit, from the `istio-cni-repair` applet or inside `install-cni`, fed by one pod watch
//! ([`crate::kube::podwatch`]).

pub mod action;
pub mod controller;
pub mod detect;
pub mod flags;
pub mod gap;
pub mod gap_end;
pub mod metrics;
pub mod options;
pub mod pod_netns;
pub mod procfs;
pub mod report;
pub mod request;
pub mod selector;

use crate::error::Result;

/// What every mode checks before it starts: the detection settings parse and a node name is set.
pub fn check(opts: &options::Options) -> Result<detect::Detector> {
    let det = detect::Detector::new(opts.clone())?;
    // Upstream would then watch `spec.nodeName=` (unscheduled pods only) and silently never repair anything.
    if opts.node_name.trim().is_empty() {
        return Err(crate::Error::config(
            "repair: no node name: set REPAIR_NODE_NAME (or --repair-node-name) from the pod's spec.nodeName",
        ));
    }
    Ok(det)
}

/// The agent for `actor`'s options, after the checks every mode shares: the sink the pod watch feeds, and
/// the worker that acts on what it is fed (not yet running: the caller runs it on a thread of its choice).
pub fn start(actor: action::Actor) -> Result<(controller::RepairSink, controller::Runner)> {
    let opts = &actor.opts;
    let det = check(opts)?;
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
    let (tx, rx) = std::sync::mpsc::channel();
    Ok((
        controller::RepairSink { det, tx },
        controller::Runner::new(rx, actor),
    ))
}
