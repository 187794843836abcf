//! Sidecar redirection, pure (no OS effects): pod facts ([`pod`]) → decision ([`decide`]) → redirect
//! configuration from annotations ([`annotations`]) → istio-iptables configuration ([`capture`]) → rules
//! and their `iptables-restore` text ([`rules`], [`restore`]).
//!
//! ```text
//! let info = PodInfo::from_pod(&pod)?;
//! if let Decision::Redirect = decide(&info) {
//!     let r = Redirect::from_pod(&info)?;
//!     let cfg = CaptureConfig::from_redirect(&r, &env, enable_ipv6(&addrs, r.dual_stack)?)?;
//!     let docs = render(&cfg)?; // docs.v4, docs.v6, docs.tproxy_route
//! }
//! ```

pub mod annotations;
mod builder;
pub mod capture;
mod capture_json;
pub mod decide;
pub mod pod;
pub mod restore;
pub mod rules;
mod rules_dns;
mod rules_steps;
pub mod values;

pub use annotations::{InterceptionMode, Redirect};
pub use capture::{
    enable_ipv6, kernel_address_order, pod_ips_in_kernel_order, CaptureConfig, OwnerGroups,
    TproxyRoute,
};
pub use decide::{decide, Decision};
pub use pod::{PodInfo, ProxyContainer};
pub use rules::{render, Documents, RuleSet};
