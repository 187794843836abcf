//! The protocol rules of `handle`, without a process.

use super::*;
use crate::settings::tests::env_of;

const ENV: &[(&str, &str)] = &[
    ("CNI_CONTAINERID", "c1"),
    ("CNI_NETNS", "/run/netns/none"),
    ("CNI_IFNAME", "eth0"),
    ("CNI_PATH", "/opt/cni/bin"),
];

/// [`ENV`] without `var`.
fn env_without(var: &str) -> Vec<(&'static str, &'static str)> {
    ENV.iter().copied().filter(|(k, _)| *k != var).collect()
}

fn run(cmd: &str, env: &[(&str, &str)], stdin: &str) -> Outcome {
    handle(cmd, &env_of(env), Ok(stdin.to_string()))
}

fn code_of(o: &Outcome) -> u64 {
    let v = crate::json::parse_object(&o.stdout, "reply").unwrap();
    match v.get("code") {
        Some(crate::json::Value::Number(crate::json::Number::U64(c))) => *c,
        _ => panic!("no code in {}", o.stdout),
    }
}

const CONF: &str = r#"{"cniVersion":"1.0.0","name":"net","type":"istio-cni","exclude_namespaces":["kube-system"]}"#;

#[test]
fn version_ignores_garbage_stdin() {
    let o = run("VERSION", &[], "garbage");
    assert_eq!(o.code, 0);
    assert!(o.stdout.contains("\"supportedVersions\":[\"0.1.0\",\"0.2.0\",\"0.3.0\",\"0.3.1\",\"0.4.0\",\"1.0.0\",\"1.1.0\"]"));
}

#[test]
fn error_codes() {
    assert_eq!(code_of(&run("ADD", ENV, "{")), 6);
    assert_eq!(code_of(&run("ADD", ENV, r#"{"cniVersion":"1.0.0"}"#)), 7);
    assert_eq!(
        code_of(&run("ADD", ENV, r#"{"cniVersion":"9.9.9","name":"n"}"#)),
        1
    );
    let o = run("ADD", &env_without("CNI_CONTAINERID"), CONF);
    assert_eq!((o.code, code_of(&o)), (1, 4));
    assert!(o.stdout.contains("CNI_CONTAINERID"));
    assert_eq!(code_of(&run("FOO", ENV, CONF)), 4);
}

#[test]
fn del_always_succeeds() {
    let no_netns = env_without("CNI_NETNS");
    for stdin in [CONF, "not json", ""] {
        let o = run("DEL", &no_netns, stdin);
        assert_eq!(
            o,
            Outcome {
                stdout: String::new(),
                code: 0
            },
            "{stdin}"
        );
    }
}

#[test]
fn non_kubernetes_and_excluded_pods_pass_through() {
    let o = run("ADD", ENV, CONF);
    assert_eq!(
        o,
        Outcome {
            stdout: "{\n    \"cniVersion\": \"1.0.0\"\n}".into(),
            code: 0
        }
    );
    let mut env = ENV.to_vec();
    env.push((
        "CNI_ARGS",
        "IgnoreUnknown=1;K8S_POD_NAMESPACE=kube-system;K8S_POD_NAME=coredns-1",
    ));
    assert_eq!(run("ADD", &env, CONF).code, 0);
}

#[test]
fn sidecar_candidates_fail_closed_without_a_kubeconfig() {
    let mut env = ENV.to_vec();
    env.push(("CNI_ARGS", "K8S_POD_NAMESPACE=default;K8S_POD_NAME=app"));
    let conf = r#"{"cniVersion":"1.0.0","name":"net","cni_agent_run_dir":"/nonexistent","pod_lookup_timeout_seconds":0.2}"#;
    let o = run("ADD", &env, conf);
    assert_ne!(o.code, 0);
    assert!(o.stdout.contains("default/app"), "{}", o.stdout);
    assert!(
        o.stdout.contains("/nonexistent/istio-cni-kubeconfig"),
        "{}",
        o.stdout
    );
}

#[test]
fn check_needs_0_4_0() {
    let conf = r#"{"cniVersion":"0.3.1","name":"net"}"#;
    assert_eq!(code_of(&run("CHECK", ENV, conf)), 1);
}

#[test]
fn status_and_gc_need_1_1_0() {
    let env = &[("CNI_PATH", "/opt/cni/bin")];
    assert_eq!(code_of(&run("STATUS", env, CONF)), 1);
    assert_eq!(code_of(&run("GC", env, CONF)), 1);
    let conf = r#"{"cniVersion":"1.1.0","name":"net","cni_agent_run_dir":"/nonexistent",
        "cni.dev/valid-attachments":[{"containerID":"a","ifname":"eth0"}],"cni.dev/attachments":[]}"#;
    let gc = run("GC", env, conf);
    assert_eq!(
        gc,
        Outcome {
            stdout: String::new(),
            code: 0
        }
    );
    assert_eq!(code_of(&run("STATUS", env, conf)), 50);
}

// The API server the kubeconfig names decides whether a pod is redirected: a kubeconfig others may write
// is refused before any request (the installer never writes one: KUBECONFIG_MODE refuses go+w).
#[test]
fn a_kubeconfig_others_may_write_is_refused_before_any_request() {
    use std::os::unix::fs::PermissionsExt;
    let dir = crate::fsutil::test_dir("plugin-kubeconfig-mode");
    let server = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    server.set_nonblocking(true).unwrap();
    let kc = dir.join("istio-cni-kubeconfig");
    let text = format!(
        r#"{{"apiVersion":"v1","kind":"Config","clusters":[{{"name":"c","cluster":{{"server":"https://{}","insecure-skip-tls-verify":true}}}}],"users":[{{"name":"u","user":{{"token":"t"}}}}],"contexts":[{{"name":"x","context":{{"cluster":"c","user":"u"}}}}],"current-context":"x"}}"#,
        server.local_addr().unwrap()
    );
    std::fs::write(&kc, text).unwrap();
    let mut env = ENV.to_vec();
    env.push(("CNI_ARGS", "K8S_POD_NAMESPACE=default;K8S_POD_NAME=app"));
    let conf = format!(
        r#"{{"cniVersion":"1.0.0","name":"net","cni_agent_run_dir":"{}","pod_lookup_timeout_seconds":0.2}}"#,
        dir.display()
    );
    for mode in [0o666, 0o620, 0o602] {
        std::fs::set_permissions(&kc, std::fs::Permissions::from_mode(mode)).unwrap();
        let o = run("ADD", &env, &conf);
        assert_ne!(o.code, 0);
        let said = format!("mode {mode:o}");
        assert!(
            o.stdout.contains(&said) && o.stdout.contains(&kc.display().to_string()),
            "{}",
            o.stdout
        );
        assert!(
            server.accept().is_err(),
            "mode {mode:o}: the plugin asked the server a kubeconfig others may write names"
        );
    }
    // Root's alone: used (the server is asked; it answers no TLS, so the ADD still fails).
    std::fs::set_permissions(&kc, std::fs::Permissions::from_mode(0o644)).unwrap();
    assert_ne!(run("ADD", &env, &conf).code, 0);
    assert!(server.accept().is_ok(), "the kubeconfig was not used");
    std::fs::remove_dir_all(&dir).unwrap();
}
