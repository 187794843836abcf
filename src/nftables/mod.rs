//! Upstream's `native_nftables` mode, programmed directly over `NETLINK_NETFILTER` (spec nftables.md).
//!
//! Pure: [`model`] (typed rules), [`mod@generate`] (the same [`crate::redirect::CaptureConfig`] as iptables →
//! a transaction and its final rule set), [`mod@script`] (the knftables text of the goldens), [`expr`] (kernel
//! expressions) and [`lower`] (rules → expressions), [`encode`] / [`decode`] (the netlink codec), [`state`]
//! (comparable form, diff), [`foreign`] (foreign base chains that run before ours, walked with
//! [`crate::netfilter::bypass`]); [`conntrack`]: the little of ctnetlink repair needs, in the same codec.
//! Effects, thin: [`socket`] (one NETLINK_NETFILTER socket), [`observe`] (the bounded read-back, in one
//! generation: [`generation`]), [`apply`] (ADD and CHECK in the pod netns).

pub mod apply;
pub mod batch;
pub mod conntrack;
pub mod contention;
pub mod decode;
mod emit;
pub mod encode;
pub mod expect;
pub mod expr;
mod expr_text;
pub mod foreign;
pub mod generate;
mod generate_steps;
pub mod generation;
pub mod lower;
pub mod model;
pub mod observe;
pub mod reader;
pub mod script;
pub mod socket;
pub mod state;

pub use generate::generate;
pub use model::Ruleset;
pub use script::script;
