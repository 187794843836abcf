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

fn resolve_with(flags: &Flags, pairs: &[(&str, &str)]) -> Result<Settings> {
    let m = env_of(pairs);
    let env = move |k: &str| m.get(k).cloned();
    resolve(flags, &env)
}

#[test]
fn defaults_are_upstreams() {
    let s = resolve_with(&Flags::default(), &[]).unwrap();
    assert_eq!(s.mounted_cni_net_dir, PathBuf::from("/host/etc/cni/net.d"));
    assert_eq!(s.run_dir, PathBuf::from("/var/run/istio-cni"));
    assert!(s.chained && !s.conf_group_read && !s.skip_tls_verify);
    assert_eq!(
        (s.kubeconfig_mode, s.monitoring_port, s.health_port),
        (0o600, 15014, 8000)
    );
    assert_eq!(s.exclude_namespaces, None);
    assert_eq!(s.plugin_log_level, "info");
    assert!(s.update_binaries && s.repair.enabled && !s.repair.repair_pods);
    assert_eq!(s.repair.init_container_exit_code, 126);
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
    let s = resolve_with(&Flags::default(), &[("CNI_CONF_NAME", "env.conf")]).unwrap();
    assert_eq!(s.cni_conf_name.as_deref(), Some("env.conf"));
}

#[test]
fn malformed_values_name_the_setting() {
    let e = resolve_with(&Flags::default(), &[("CHAINED_CNI_PLUGIN", "yes")]).unwrap_err();
    assert!(
        e.to_string().contains("CHAINED_CNI_PLUGIN") && e.to_string().contains("yes"),
        "{e}"
    );
    let e = resolve_with(&Flags::default(), &[("MONITORING_PORT", "99999")]).unwrap_err();
    assert!(e.to_string().contains("MONITORING_PORT"), "{e}");
    let e = resolve_with(&Flags::default(), &[("KUBECONFIG_MODE", "rw")]).unwrap_err();
    assert!(e.to_string().contains("KUBECONFIG_MODE"), "{e}");
    let e = resolve_with(
        &Flags::default(),
        &[("REPAIR_INIT_CONTAINER_EXIT_CODE", "x")],
    )
    .unwrap_err();
    assert!(
        e.to_string().contains("REPAIR_INIT_CONTAINER_EXIT_CODE"),
        "{e}"
    );
    let e = resolve_with(&Flags::default(), &[("AMBIENT_ENABLED", "true")]).unwrap_err();
    assert!(e.to_string().contains("AMBIENT_ENABLED"), "{e}");
    assert!(resolve_with(&Flags::default(), &[("CNI_CONF_NAME", "../x")]).is_err());
    assert!(resolve_with(&Flags::default(), &[("LOG_LEVEL", "loud")]).is_err());
}

#[test]
fn modes_and_lists() {
    assert_eq!(parse_mode("m", "0600").unwrap(), 0o600);
    assert_eq!(parse_mode("m", "640").unwrap(), 0o640);
    assert_eq!(parse_mode("m", "0o644").unwrap(), 0o644);
    assert_eq!(parse_mode("m", "384").unwrap(), 0o600);
    let s = resolve_with(
        &Flags::default(),
        &[
            ("EXCLUDE_NAMESPACES", " a, ,b "),
            ("SKIP_CNI_BINARIES", "x y,z"),
        ],
    )
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
    let s = resolve_with(
        &Flags::default(),
        &[
            ("REPAIR_NODE-NAME", "n19"),
            ("REPAIR_DELETE_PODS", "true"),
            ("REPAIR_LABEL-PODS", "1"),
        ],
    )
    .unwrap();
    assert_eq!(s.repair.node_name, "n19");
    assert!(s.repair.delete_pods && s.repair.label_pods);
    // The same values as the repair agent's own parser reads from that environment.
    let m = env_of(&[
        ("REPAIR_NODE-NAME", "n19"),
        ("REPAIR_DELETE_PODS", "true"),
        ("REPAIR_LABEL-PODS", "1"),
    ]);
    let theirs = crate::repair::options::from_env(&|k: &str| m.get(k).cloned()).unwrap();
    assert_eq!(s.repair.to_options(), theirs);
    let d = resolve_with(&Flags::default(), &[]).unwrap();
    assert_eq!(
        d.repair.to_options(),
        crate::repair::options::Options::default()
    );
    let s = resolve_with(
        &Flags::default(),
        &[("REPAIR_NODE-NAME", "n19"), ("REPAIR_NODE_NAME", "master")],
    )
    .unwrap();
    assert_eq!(s.repair.node_name, "master");
}

#[test]
fn scopes_and_equals_args() {
    let a = normalize_args(&[
        "--log_output_level=default:info,cni-plugin:debug".into(),
        "--once".into(),
    ]);
    assert_eq!(
        a,
        vec![
            "--log-output-level",
            "default:info,cni-plugin:debug",
            "--once"
        ]
    );
    let f = Flags {
        log_output_level: Some("default:info,cni-plugin:debug".into()),
        ..Flags::default()
    };
    assert_eq!(resolve_with(&f, &[]).unwrap().plugin_log_level, "debug");
}
