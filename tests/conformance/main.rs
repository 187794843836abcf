//! The conformance vectors (`CONFORMANCE_DIR`, default `../shared/conformance`), in one test binary: the
//! iptables and nftables rules, the installer's cases and its differential against upstream's behaviour, and
//! the repair agent's decisions. Some rule cases also restore into a namespace (root). Each file in this
//! folder is one module; test names read `<file>::<test>`.

#[path = "../support/mod.rs"]
mod support;

mod conformance_nft;
mod conformance_rules;
mod install_conformance;
mod install_differential;
mod podcache_reduce;
mod repair_vectors;
