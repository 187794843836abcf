//! Upstream's `native_nftables` mode, programmed directly over `NETLINK_NETFILTER` (spec nftables.md).
//!
//! Pure: [`model`] (typed rules), [`generate`] (the same [`crate::redirect::CaptureConfig`] as iptables →
//! a transaction and its final rule set), [`script`] (the knftables text of the goldens).

pub mod generate;
pub mod model;
pub mod script;

pub use generate::{generate, Transaction};
pub use model::Ruleset;
pub use script::script;
