//! istio-cni-node: one static binary replacing the Istio CNI node component.
//!
//! Pure logic (no OS effects): [`cni`] (protocol), [`redirect`] (pod decision, annotations, rule text),
//! [`install::conflist`] and friends, [`kube::request`], [`repair::detect`].
//! Effects, kept thin: [`netns`], [`iptables`], [`kube::transport`], [`fsutil`].
//! Roles: [`plugin`] (`istio-cni`), [`install`] (`install-cni`), [`repair`] (`istio-cni-repair`).

pub mod cli;
pub mod cni;
pub mod error;
pub mod json;
pub mod logging;
pub mod plugin;

pub use error::{Error, Result};
