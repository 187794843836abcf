//! The node's services the installer runs beside its loop: [`server`] (health and metrics), [`relay`] (the
//! plugin's log records), [`podwatch`] (the node's one pod watch feeding the pod cache and the repair agent),
//! [`plugin_metrics`] (the plugin's ADD records as metrics).

pub mod plugin_metrics;
pub mod podwatch;
pub mod relay;
pub mod server;

/// What install-cni's `/metrics` shows after its own series, in order: the node's agents' (nothing when
/// they never acted or do not run), the pod cache's (nothing when it is off), the watches' start-up
/// timings, the plugin's ADDs.
pub const METRICS: &[server::Render] = &[
    crate::agents::render,
    crate::podcache::metrics::render,
    crate::kube::podwatch::timing::render,
    plugin_metrics::render,
];
