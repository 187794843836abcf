//! The integration tests that need no root, in one test binary: the CLI and the CNI protocol over our binary,
//! the installer run as a process against temp dirs, the kube client against the HTTPS API double, and the
//! repair agent against it. Each file in this folder is one module; test names read `<file>::<test>`.

#[path = "../support/mod.rs"]
mod support;

mod cli;
mod cli_help;
mod cli_output;
mod cli_start;
mod cni_protocol;
mod install_conf_dir;
mod install_conf_dir_recreated;
mod install_e2e;
mod install_go_json;
mod install_handover;
mod install_in_place;
mod install_invariant;
mod install_links;
mod install_lost_update;
mod install_overlap;
mod install_owned;
mod install_process;
mod install_restore;
mod install_select_process;
mod install_settings;
mod install_supersede;
mod kube_api;
mod kube_client;
mod kube_contract;
mod kube_lookup_deadline;
mod kube_podwatch;
mod monitoring_dashboard;
mod monitoring_rules;
mod podcache_agent;
mod podcache_by_name;
mod repair_oneshot;
mod repair_rss;
mod repair_watch;
mod repair_watch_pace;
mod serve_rules;
