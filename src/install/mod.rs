//! The `install-cni` applet: puts the plugin on the node and keeps it there, takes it away cleanly.
//!
//! Pure: [`config`] (settings), [`select`] (primary choice), [`conflist`] (merge/remove, byte-exact
//! output), [`check`] (validity of the installed state), [`kubeconfig`] (rendering).
//! Effects: [`binaries`], [`installer`] (the steps), [`watch`] (inotify), [`run`] (the loop), [`server`]
//! (health and metrics), [`relay`] (plugin log relay), [`cleanup`], [`cli`] (entry point).

pub mod binaries;
pub mod check;
pub mod cleanup;
pub mod cli;
pub mod config;
pub mod conflist;
pub mod flags;
pub mod installer;
pub mod kubeconfig;
pub mod legacy;
pub mod log_settings;
pub mod relay;
pub mod run;
pub mod select;
pub mod selectors;
pub mod server;
pub mod watch;

pub use config::RepairSettings;
