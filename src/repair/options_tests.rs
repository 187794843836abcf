//! Tests of the repair settings: both eras' names, precedence, the two readers' empty-env rules.
use super::*;
use crate::settings::tests::env_of;

#[test]
fn defaults() {
    let (o, daemon) = resolve(&|_| None, &|_| None).unwrap();
    assert_eq!(o, Options::default());
    assert!(daemon && o.enabled && !o.any_mode());
    assert_eq!(o.init_exit_code, 126);
    assert_eq!(o.effective_field_selector(), "spec.nodeName=");
}

#[test]
fn both_eras_env_and_precedence() {
    let env = env_of(&[
        ("REPAIR_LABEL-PODS", "true"),
        ("REPAIR_DELETE_PODS", "1"),
        ("REPAIR_NODE_NAME", "n1"),
        ("REPAIR_NODE-NAME", "ignored"),
        ("REPAIR_INIT-CONTAINER-EXIT-CODE", "55"),
        ("REPAIR_RUN-AS-DAEMON", "false"),
        ("REPAIR_FIELD_SELECTORS", "status.phase=Pending"),
        ("REPAIR_REPAIR_PODS", ""),
    ]);
    let flags = env_of(&[
        ("label-pods", "false"),
        ("repair-broken-pod-label-key", "k"),
    ]);
    let (o, daemon) = resolve(&flags, &env).unwrap();
    assert!(!o.label_pods, "flag beats env");
    assert!(o.delete_pods && !o.repair_pods);
    assert_eq!(o.node_name, "n1");
    assert_eq!(o.init_exit_code, 55);
    assert_eq!(o.label_key, "k");
    assert!(!daemon);
    assert_eq!(
        o.effective_field_selector(),
        "status.phase=Pending,spec.nodeName=n1"
    );
}

#[test]
fn bad_values_name_the_source() {
    let env = env_of(&[("REPAIR_LABEL_PODS", "yes")]);
    let e = from_env(&env).unwrap_err().to_string();
    assert!(
        e.contains("REPAIR_LABEL_PODS") && e.contains("\"yes\""),
        "{e}"
    );
    let flags = env_of(&[("init-container-exit-code", "x1")]);
    let e = resolve(&flags, &|_| None).unwrap_err().to_string();
    assert!(e.contains("--init-container-exit-code"), "{e}");
}

#[test]
fn bool_flags() {
    assert!(is_bool_flag("label-pods") && is_bool_flag("repair-run-as-daemon"));
    assert!(!is_bool_flag("node-name"));
}

/// The one deliberate difference between the two readers (see [`Reader`]), pinned.
#[test]
fn installer_reads_empty_env_as_master_agent_as_release_1_9() {
    let base = [
        ("REPAIR_SIDECAR_ANNOTATION", ""),
        ("REPAIR_INIT-CONTAINER-NAME", "ours"),
        ("REPAIR_INIT_CONTAINER_NAME", ""),
        ("REPAIR_INIT_CONTAINER_EXIT_CODE", ""),
    ];
    let get = env_of(&base);
    // Installer (AllowEmptyEnv): "" is a value, the set master name wins, a blank number keeps its default.
    let inst = from_installer_env(&get).unwrap();
    assert_eq!(inst.sidecar_annotation, "");
    assert_eq!(
        (inst.init_container_name.as_str(), inst.init_exit_code),
        ("", 126)
    );
    // Agent (release-1.9): "" is unset, so the default or the 1.9 name answers.
    let agent = from_env(&get).unwrap();
    assert_eq!(agent.sidecar_annotation, DEFAULT_SIDECAR_ANNOTATION);
    assert_eq!(
        (agent.init_container_name.as_str(), agent.init_exit_code),
        ("ours", 126)
    );
    // A blank boolean: the installer's default, the agent's error. REPAIR_RUN_AS_DAEMON: the agent's only.
    let one = |k: &'static str, v: &'static str| move |q: &str| (q == k).then(|| v.to_string());
    assert!(
        !from_installer_env(&one("REPAIR_DELETE_PODS", " "))
            .unwrap()
            .delete_pods
    );
    assert!(from_env(&one("REPAIR_DELETE_PODS", " ")).is_err());
    assert!(from_installer_env(&one("REPAIR_RUN_AS_DAEMON", "x")).is_ok());
    assert!(from_env(&one("REPAIR_RUN_AS_DAEMON", "x")).is_err());
    // Both refuse label mode without a key.
    let env = env_of(&[
        ("REPAIR_LABEL_PODS", "true"),
        ("REPAIR_BROKEN_POD_LABEL_KEY", ""),
    ]);
    let e = from_installer_env(&env).unwrap_err();
    assert!(e.to_string().contains("label key"), "{e}");
}
