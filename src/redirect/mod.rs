//! Sidecar redirection, pure (no OS effects): pod facts ([`pod`], read for the [`keys`]; [`reduce`]d to them for the node's pod cache) → decision ([`decide`]) → redirect
//! configuration from annotations ([`annotations`]) → istio-iptables configuration ([`capture`]) → rules
//! and their `iptables-restore` text ([`rules`], [`restore`]). [`plan`] composes that chain once, for
//! every caller:
//!
//! ```text
//! match plan::decide_pod(&PodInfo::from_pod(&pod)?)? {
//!     PodPlan::Skip(why) => ...,
//!     PodPlan::Redirect(r) => plan::plan(&r, Addresses::Netns(&addrs), &NodeEnv::take(&env))?, // Documents
//! }
//! ```

pub mod annotations;
mod builder;
pub mod capture;
mod capture_json;
pub mod decide;
pub mod keys;
pub mod plan;
pub mod pod;
pub mod reduce;
pub mod restore;
pub mod rules;
mod rules_dns;
mod rules_steps;
pub mod values;

pub use annotations::Redirect;
pub use capture::{enable_ipv6, kernel_address_order, CaptureConfig, TproxyRoute};
pub use pod::PodInfo;
pub use rules::{render, Documents};
