//! Tests of the installer settings (flag > env > default, validation, REPAIR_* names).
use super::*;
use crate::error::Result;
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

fn env_of(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The settings resolved from these flags and this environment.
pub(in crate::install) fn resolve_with(flags: &Flags, pairs: &[(&str, &str)]) -> Result<Settings> {
    let m = env_of(pairs);
    let env = move |k: &str| m.get(k).cloned();
    resolve(flags, &env)
}

/// The settings resolved from this environment alone.
fn env(pairs: &[(&str, &str)]) -> Result<Settings> {
    resolve_with(&Flags::default(), pairs)
}

/// The error resolving `var=v` alone, which must name `var`.
fn refused(var: &str, v: &str) -> String {
    let e = env(&[(var, v)]).unwrap_err().to_string();
    assert!(e.contains(var), "{e}");
    e
}

#[test]
fn defaults_are_upstreams() {
    let s = env(&[]).unwrap();
    assert_eq!(s.mounted_cni_net_dir, PathBuf::from("/host/etc/cni/net.d"));
    assert_eq!(s.run_dir, PathBuf::from("/var/run/istio-cni"));
    assert!(s.chained && !s.conf_group_read && !s.skip_tls_verify);
    assert_eq!(
        (s.kubeconfig_mode, s.monitoring_port, s.health_port),
        (0o600, 15014, 8000)
    );
    assert_eq!(s.exclude_namespaces, None);
    assert_eq!(s.plugin_log_level, "info");
    assert!(s.update_binaries && s.agents.repair.enabled && !s.agents.repair.repair_pods);
    assert_eq!(s.agents.repair.init_exit_code, 126);
}

#[test]
fn flag_beats_env_beats_default() {
    let f = Flags {
        cni_conf_name: Some("flag.conflist".into()),
        ..Flags::default()
    };
    let s = resolve_with(
        &f,
        &[
            ("CNI_CONF_NAME", "env.conf"),
            ("CHAINED_CNI_PLUGIN", "false"),
        ],
    )
    .unwrap();
    assert_eq!(s.cni_conf_name.as_deref(), Some("flag.conflist"));
    assert!(!s.chained);
    let s = env(&[("CNI_CONF_NAME", "env.conf")]).unwrap();
    assert_eq!(s.cni_conf_name.as_deref(), Some("env.conf"));
}

#[test]
fn malformed_values_name_the_setting() {
    let e = refused("CHAINED_CNI_PLUGIN", "yes");
    assert!(e.contains("yes"), "{e}");
    refused("MONITORING_PORT", "99999");
    refused("KUBECONFIG_MODE", "rw");
    refused("REPAIR_INIT_CONTAINER_EXIT_CODE", "x");
    refused("AMBIENT_ENABLED", "true");
    assert!(env(&[("CNI_CONF_NAME", "../x")]).is_err());
}

#[test]
fn modes_and_lists() {
    // Go base-0 integers, as upstream's KUBECONFIG_MODE (differential kubeconfig-mode-decimal-420).
    let mode = |v: &str| env(&[("KUBECONFIG_MODE", v)]).map(|s| s.kubeconfig_mode);
    assert_eq!(mode("420").unwrap(), 0o644);
    assert_eq!(mode("0600").unwrap(), 0o600);
    assert_eq!(mode("0o600").unwrap(), 0o600);
    assert_eq!(mode("0x1a4").unwrap(), 0o644);
    assert_eq!(mode("").unwrap(), 0o600);
    assert!(mode("640").unwrap_err().to_string().contains("0640"));
    // Group or other write: another user could point the plugin at another API server.
    for w in ["0666", "0664", "0622", "0o602", "438"] {
        let e = mode(w).unwrap_err().to_string();
        assert!(
            e.contains("KUBECONFIG_MODE") && e.contains("rewrite"),
            "{w}: {e}"
        );
    }
    assert_eq!(mode("0640").unwrap(), 0o640);
    let s = env(&[
        ("EXCLUDE_NAMESPACES", " a, ,b "),
        ("SKIP_CNI_BINARIES", "x y,z"),
    ])
    .unwrap();
    assert_eq!(s.exclude_namespaces, Some(vec!["a".into(), "b".into()]));
    assert_eq!(s.skip_binaries, vec!["x", "y", "z"]);
    assert_eq!(
        parse_duration("d", "250ms").unwrap(),
        Duration::from_millis(250)
    );
    assert_eq!(parse_duration("d", "2m").unwrap(), Duration::from_secs(120));
    assert!(parse_duration("d", "2 weeks").is_err());
}

#[test]
fn repair_names_of_both_eras() {
    let pairs = [
        ("REPAIR_NODE-NAME", "n19"),
        ("REPAIR_DELETE_PODS", "true"),
        ("REPAIR_LABEL-PODS", "1"),
    ];
    let s = env(&pairs).unwrap();
    assert_eq!(s.agents.repair.node_name, "n19");
    assert!(s.agents.repair.delete_pods && s.agents.repair.label_pods);
    // The same values as the repair agent's own parser reads from that environment.
    let m = env_of(&pairs);
    let theirs = crate::repair::options::from_env(&|k: &str| m.get(k).cloned()).unwrap();
    assert_eq!(s.agents.repair, theirs);
    let d = env(&[]).unwrap();
    assert_eq!(d.agents.repair, crate::repair::options::Options::default());
    let s = env(&[("REPAIR_NODE-NAME", "n19"), ("REPAIR_NODE_NAME", "master")]).unwrap();
    assert_eq!(s.agents.repair.node_name, "master");
}

#[test]
fn enablement_selectors_are_read_with_ambient_off() {
    let chart = "- podSelector:\n    matchLabels:\n      istio.io/dataplane-mode: ambient\n";
    let s = env(&[
        ("AMBIENT_ENABLED", "false"),
        ("AMBIENT_ENABLEMENT_SELECTOR", chart),
    ])
    .unwrap();
    assert_eq!(s.enablement_selectors.len(), 1);
    let e = env(&[("AMBIENT_ENABLEMENT_SELECTOR", "a: [")]).unwrap_err();
    assert!(
        e.to_string()
            .contains("failed to parse ambient enablement selector"),
        "{e}"
    );
}

#[test]
fn forced_iptables_binary() {
    use crate::iptables::Backend;
    let b = |v: &str| env(&[("FORCE_IPTABLES_BINARY", v)]);
    assert_eq!(
        b("iptables-legacy").unwrap().forced_iptables_backend,
        Some(Backend::Legacy)
    );
    assert_eq!(
        b("iptables-nft").unwrap().forced_iptables_backend,
        Some(Backend::Nft)
    );
    assert_eq!(b("").unwrap().forced_iptables_backend, None);
    let e = refused("FORCE_IPTABLES_BINARY", "ebpf");
    assert!(e.contains("ebpf"), "{e}");
}

#[test]
fn iptables_node_binaries_is_off_unless_asked() {
    let b = |v: &str| env(&[("IPTABLES_NODE_BINARIES", v)]);
    assert!(!env(&[]).unwrap().iptables_node_binaries);
    assert!(!b("").unwrap().iptables_node_binaries);
    assert!(!b("false").unwrap().iptables_node_binaries);
    assert!(b("true").unwrap().iptables_node_binaries);
    assert!(b("TRUE").unwrap().iptables_node_binaries);
    let e = refused("IPTABLES_NODE_BINARIES", "yes");
    assert!(
        e.contains("IPTABLES_NODE_BINARIES") && e.contains("yes"),
        "{e}"
    );
}

#[test]
fn legacy_template_settings_are_refused_at_start() {
    for var in [
        "CNI_NETWORK_CONFIG",
        "CNI_NETWORK_CONFIG_FILE",
        "KUBECFG_FILE_NAME",
    ] {
        let e = refused(var, "x");
        assert!(e.contains("not supported"), "{e}");
        assert!(env(&[(var, "")]).is_ok());
    }
    let f = Flags {
        cni_network_config: Some("{}".into()),
        ..Flags::default()
    };
    assert!(resolve_with(&f, &[])
        .unwrap_err()
        .to_string()
        .contains("--cni-network-config"));
}

/// Item 8 of the differential issue: CHAINED_CNI_PLUGIN="" means chained (upstream's default), "yes" is
/// refused (upstream's viper reads it as false and silently goes standalone); a CNI_CONF_NAME with a
/// directory part is refused.
#[test]
fn chained_and_conf_name_deviations() {
    assert!(env(&[("CHAINED_CNI_PLUGIN", "")]).unwrap().chained);
    assert!(env(&[("CHAINED_CNI_PLUGIN", "yes")]).is_err());
    for n in [
        "sub/10-calico.conflist",
        "/etc/cni/net.d/10-calico.conflist",
        "..",
    ] {
        refused("CNI_CONF_NAME", n);
    }
}

/// Safe upgrade is on by default; DISABLE_SAFE_UPGRADE (or its flag) turns it off, upstream's ambient-mode
/// AMBIENT_DISABLE_SAFE_UPGRADE too when ours is not set; a non-boolean is refused naming the variable.
#[test]
fn safe_upgrade_setting_and_handover_names() {
    let off = |pairs: &[(&str, &str)]| env(pairs).unwrap().handover;
    assert_eq!(off(&[]), Handover::default());
    assert_eq!(
        off(&[("DISABLE_SAFE_UPGRADE", "true")])
            .disabled_by
            .as_deref(),
        Some("DISABLE_SAFE_UPGRADE=true")
    );
    assert_eq!(
        off(&[("AMBIENT_DISABLE_SAFE_UPGRADE", "1")])
            .disabled_by
            .as_deref(),
        Some("AMBIENT_DISABLE_SAFE_UPGRADE=true")
    );
    // Ours, when given, wins over upstream's name; an empty one does not count as given.
    assert_eq!(
        off(&[
            ("DISABLE_SAFE_UPGRADE", "false"),
            ("AMBIENT_DISABLE_SAFE_UPGRADE", "true")
        ])
        .disabled_by,
        None
    );
    assert!(off(&[
        ("DISABLE_SAFE_UPGRADE", ""),
        ("AMBIENT_DISABLE_SAFE_UPGRADE", "true")
    ])
    .disabled_by
    .is_some());
    let f = Flags {
        disable_safe_upgrade: Some("true".into()),
        ..Flags::default()
    };
    let s = resolve_with(&f, &[("DISABLE_SAFE_UPGRADE", "false")]).unwrap();
    assert!(s.handover.disabled_by.is_some());
    for var in ["DISABLE_SAFE_UPGRADE", "AMBIENT_DISABLE_SAFE_UPGRADE"] {
        refused(var, "yes");
    }
    // Our pod and node, as the chart's fieldRefs give them (NODE_NAME first, as upstream's chart sets it).
    // One rule for the node: the SIGTERM decision's is the pod watch's and the repair agent's.
    let node = |pairs: &[(&str, &str)]| {
        let s = env(pairs).unwrap();
        assert_eq!(s.agents.repair.node_name, s.node_name);
        s.node_name
    };
    let pairs = [
        ("POD_NAME", "istio-cni-node-abcde"),
        ("REPAIR_NODE_NAME", "r"),
        ("KUBERNETES_NODE_NAME", "k"),
        ("NODE_NAME", "n"),
    ];
    let h = off(&pairs);
    assert_eq!(
        (h.pod_name.as_str(), node(&pairs).as_str()),
        ("istio-cni-node-abcde", "n")
    );
    assert_eq!(node(&pairs[1..3]), "k");
    assert_eq!(node(&[("REPAIR_NODE_NAME", "r")]), "r");
    assert_eq!(
        node(&[("NODE_NAME", " "), ("REPAIR_NODE-NAME", "r19")]),
        "r19"
    );
    assert_eq!(node(&[]), "");
}

/// Differential round 3, item 1: ENABLE_AMBIENT_DETECTION_RETRY goes into the entry as given.
#[test]
fn ambient_detection_retry_as_given() {
    let get = |pairs: &[(&str, &str)]| env(pairs).unwrap().enable_ambient_detection_retry;
    assert!(!get(&[]));
    assert!(get(&[("ENABLE_AMBIENT_DETECTION_RETRY", "true")]));
    assert!(!get(&[("ENABLE_AMBIENT_DETECTION_RETRY", "false")]));
    assert!(!get(&[("ENABLE_AMBIENT_DETECTION_RETRY", "")]));
    refused("ENABLE_AMBIENT_DETECTION_RETRY", "yes");
}

/// Differential round 3, item 2: CHAINED_CNI_PLUGIN="" chains (upstream: standalone) and says so.
#[test]
fn empty_chained_cni_plugin_chains_with_a_warning() {
    let s = env(&[("CHAINED_CNI_PLUGIN", "")]).unwrap();
    assert!(s.chained);
    assert!(
        s.warnings
            .iter()
            .any(|w| w.contains("CHAINED_CNI_PLUGIN") && w.contains("standalone")),
        "{:?}",
        s.warnings
    );
    for v in ["true", "false"] {
        let s = env(&[("CHAINED_CNI_PLUGIN", v)]).unwrap();
        assert!(!s.warnings.iter().any(|w| w.contains("CHAINED_CNI_PLUGIN")));
    }
}
