//! The integration tests that need root, in one test binary: network namespaces they create, real
//! iptables/nftables, Debian's CNI plugins, end-to-end traffic and repair. Not root, they fail unless
//! `ISTIO_CNI_SKIP_ROOT_TESTS=1`. Each file in this folder is one module; test names read `<file>::<test>`.

#[path = "../support/mod.rs"]
mod support;

mod after_ours_e2e;
mod apply_netns;
mod audit_e2e;
mod audit_gap_e2e;
mod audit_restart_e2e;
mod audit_verdicts_e2e;
mod backend_detect;
mod cni_chain;
mod cni_hostns;
mod expectation_e2e;
mod fresh_add_e2e;
mod handover_gap;
mod install_bind_mount;
mod install_metrics;
mod install_server;
mod install_server_flood;
mod kube_keepalive;
mod monitoring_e2e;
mod nft_limits;
mod nft_netns;
mod no_exec;
mod node_binaries_e2e;
mod node_binaries_plain_e2e;
mod node_binaries_targets_e2e;
mod pod_netns_find;
mod podcache_e2e;
mod podcache_wall;
mod prefix_edges;
mod read_generation_e2e;
mod redirect_bypass_e2e;
mod redirect_e2e;
mod redirect_rules_e2e;
mod relay_burst;
mod repair_e2e;
mod tproxy_marks_e2e;
mod validation_e2e;
mod xt_hooks_e2e;
mod xt_legacy_netns;
mod xt_nft_netns;
mod xt_spec;
mod xt_traffic;
