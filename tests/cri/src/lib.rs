//! A kubelet's view of a node for the end-to-end tests: a private containerd (own root, state, socket,
//! config, CNI dirs) running in a network namespace the test creates, the HTTPS API double serving the pods,
//! and a CRI client (the `k8s-cri` binding) that runs, inspects, stops and removes pod sandboxes.
//!
//! Never shipped; root only. Everything a test creates carries the process id and is removed on drop.

pub mod chart;
pub mod chart_agent;
pub mod chart_node;
pub mod chart_pods;
pub mod churn;
#[path = "../../support/cmd.rs"]
mod cmd;
pub mod containerd;
pub mod cri;
pub mod image;
pub mod node;
pub mod soak;
pub mod util;
