//! istio-cni-node: one static binary replacing the Istio CNI node component.
//!
//! Pure logic (no OS effects): [`cni`] (protocol), [`redirect`] (pod decision, annotations, rule text),
//! [`install::config::conflist`] and friends, [`kube::request`], [`repair::detect`].
//! Effects, kept thin: [`netns`], [`iptables`], [`nftables`], [`xtables`] (over one [`netfilter`]
//! vocabulary), [`kube::transport`], [`fsutil`].
//! Below the roles: [`pod_rules`] (the sidecar path ADD, CHECK and repair share) over [`backend`], [`httpd`]
//! and [`podcache`] over one connection server ([`serve`]).
//! Roles: [`plugin`] (`istio-cni`), [`install`] (`install-cni`), [`agents`] (`istio-cni-repair`: [`repair`] and
//! [`audit`]).

pub mod addrecord;
pub mod agents;
pub mod applet;
pub mod arena;
pub mod audit;
pub mod backend;
pub mod cli;
pub mod cni;
pub mod error;
pub mod fsutil;
pub mod httpd;
pub mod install;
pub mod iptables;
pub mod json;
pub mod kube;
pub mod logging;
pub mod metrics;
pub mod netfilter;
pub mod netlink;
pub mod netns;
pub mod nftables;
pub mod plugin;
pub mod pod_rules;
pub mod podcache;
pub mod redirect;
pub mod repair;
pub mod rundir;
pub mod serve;
pub mod settings;
pub mod validation;
pub mod xtables;

pub use error::{Error, Result};
