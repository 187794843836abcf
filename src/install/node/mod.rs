//! The node's services the installer runs beside its loop: [`server`] (health and metrics), [`relay`] (the
//! plugin's log records), [`podwatch`] (the node's one pod watch feeding the pod cache and the repair agent),
//! [`plugin_metrics`] (the plugin's ADD records as metrics).

pub mod plugin_metrics;
pub mod podwatch;
pub mod relay;
pub mod server;
