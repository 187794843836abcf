//! Kubernetes API client: configuration, pure request building, a thin ureq+rustls transport.
//!
//! - [`config`]: kubeconfig (JSON or the plain YAML kubeconfig writers produce) and in-cluster settings,
//!   with refusals for anything we will not do (no server, `exec`/`auth-provider`, unreadable CA); the
//!   in-cluster settings in `incluster`, the PEM bundles in `pem`.
//! - [`request`]: pure builders (path, escaped query, body).
//! - [`transport`]: ureq 3 + rustls (ring), the cluster CA as the only root, connect and total timeouts.
//! - [`proxy`]: which proxy carries the connections, from the environment as client-go reads it.
//! - [`status`]: API `Status` decoding and error classification ([`ApiErrorExt`]).
//! - [`watch`]: watch event decoding and the [`WatchStream`] iterator.
//! - [`ca`]: a CA file re-read when it changes (rotation under a running agent).
//! - [`client`]: the [`Client`] the roles use; [`retry`]: [`get_pod_with_retry`] and [`Backoff`].
//! - [`scheduling`]: would the DaemonSet controller run a template's pod on a node (pure).
//! - [`pod`]: the facts the agents and the pod cache read from a pod object, each by one rule ([`PodView`]).
//! - [`podwatch`]: the node's pod LIST + WATCH loop (paced, relist bookkeeping, its timings
//!   on `/metrics`) feeding [`podwatch::PodSink`]s: the pod cache, the repair agent, or both.

pub mod ca;
pub mod client;
pub mod config;
mod failure;
mod incluster;
mod pem;
pub mod pod;
pub mod podwatch;
pub mod proxy;
pub mod request;
pub mod retry;
pub mod scheduling;
pub mod status;
pub mod tcp;
pub mod token;
pub mod transport;
pub mod watch;
pub(crate) mod yaml;

pub use client::{Client, PodSource};
pub use config::Config;
pub use pod::PodView;
pub use request::{ListParams, WatchParams};
pub use retry::{get_pod_with_retry, Backoff};
pub use status::ApiErrorExt;
pub use transport::Timeouts;
pub use watch::{EventKind, WatchEvent, WatchStream};
