//! The CNI protocol, black-box: our binary exec'd through an `istio-cni` symlink exactly as a runtime does
//! (clean environment + CNI variables, configuration on stdin), checking exit codes, stdout and stderr.
//! Needs no root: nothing here enters a namespace (the netns path given to ADD is never opened for a
//! container that gets no redirection).

use crate::support::{CniEnv, Object, PluginDir, PluginOutput, Value};

const ALL_VERSIONS: [&str; 7] = [
    "0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0",
];
/// A netns path that does not exist: ADD for a non-Kubernetes container must not need it.
const ABSENT_NETNS: &str = "/run/netns/istio-cni-test-absent";

/// A run dir that does not exist: the plugin's default (`/var/run/istio-cni`) is a real node's, where these
/// tests must not leave a rolling log file.
const ABSENT_RUN_DIR: &str = "/run/istio-cni-test-absent";

fn conf(version: &str) -> String {
    format!(
        r#"{{"cniVersion":"{version}","name":"k8s-pod-network","type":"istio-cni","cni_agent_run_dir":"{ABSENT_RUN_DIR}"}}"#
    )
}

fn add_env(dir: &PluginDir) -> CniEnv {
    CniEnv::new("ADD", "c0ffee01", ABSENT_NETNS, &dir.cni_path())
}

fn run(dir: &PluginDir, env: &CniEnv, stdin: &[u8]) -> PluginOutput {
    let bin = dir.istio_cni();
    crate::support::run_plugin(&bin, bin.to_str().unwrap(), env, stdin)
}

/// No panic message and no backtrace: bad input is an error, never a crash.
fn assert_no_panic(o: &PluginOutput) {
    assert!(
        !o.stderr.contains("panicked") && o.code != 101 && o.code >= 0,
        "plugin panicked or was killed:\n{o}"
    );
}

/// A CNI error: non-zero exit, stdout exactly `{cniVersion, code, msg[, details]}`; returns msg.
fn cni_error(o: &PluginOutput, code: u64) -> String {
    assert_no_panic(o);
    let msg = o.assert_cni_error(code);
    let obj = o.object();
    for k in obj.keys() {
        assert!(
            ["cniVersion", "code", "msg", "details"].contains(&k.as_str()),
            "unexpected key {k} in error:\n{o}"
        );
    }
    assert!(
        matches!(obj.get("cniVersion"), Some(Value::String(v)) if ALL_VERSIONS.contains(&v.as_str())),
        "error without a supported cniVersion:\n{o}"
    );
    msg
}

fn string_list(o: &Object, key: &str) -> Vec<String> {
    match o.get(key) {
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| match v {
                Value::String(s) => s.clone(),
                other => panic!("{key}: not a string: {}", crate::support::to_json(other)),
            })
            .collect(),
        _ => panic!("{key} missing or not a list"),
    }
}

fn assert_version_reply(o: &PluginOutput) {
    assert_no_panic(o);
    o.assert_success();
    let obj = o.object();
    assert_eq!(string_list(&obj, "supportedVersions"), ALL_VERSIONS, "{o}");
    assert!(
        matches!(obj.get("cniVersion"), Some(Value::String(v)) if ALL_VERSIONS.contains(&v.as_str())),
        "{o}"
    );
}

#[test]
fn version_reports_all_seven_versions() {
    let dir = PluginDir::new();
    let probe = CniEnv::version_probe();
    // libcni's GetVersionInfo: stdin {"cniVersion":"1.1.0"} and the dummy environment.
    let o = run(&dir, &probe, br#"{"cniVersion":"1.1.0"}"#);
    assert_version_reply(&o);
    assert_eq!(
        o.object()
            .get("cniVersion")
            .map(crate::support::to_json)
            .as_deref(),
        Some("\"1.1.0\"")
    );
    // An older requested version is echoed back.
    let o = run(&dir, &probe, br#"{"cniVersion":"0.4.0"}"#);
    assert_version_reply(&o);
    // Garbage, empty, or huge stdin: VERSION still answers.
    for stdin in [
        &b"garbage {{{"[..],
        b"",
        b"\xff\xfe\x00binary",
        br#"{"cniVersion":"9.9.9"}"#,
    ] {
        assert_version_reply(&run(&dir, &probe, stdin));
    }
    // Only CNI_COMMAND set.
    let bare = CniEnv {
        command: Some("VERSION".into()),
        ..CniEnv::default()
    };
    assert_version_reply(&run(&dir, &bare, b""));
}

#[test]
fn version_with_ten_megabytes_of_stdin() {
    let dir = PluginDir::new();
    let big = vec![b'x'; 10 << 20];
    assert_version_reply(&run(&dir, &CniEnv::version_probe(), &big));
}

#[test]
fn bad_json_is_code_6() {
    let dir = PluginDir::new();
    for stdin in [
        &b"not json"[..],
        b"{",
        b"",
        b"[1,2]",
        b"\"str\"",
        b"{} trailing",
    ] {
        let o = run(&dir, &add_env(&dir), stdin);
        cni_error(&o, 6);
    }
}

/// Bytes that are not UTF-8 are a decoding failure (skel: json.Unmarshal → code 6), not an I/O error.
#[test]
fn non_utf8_stdin_is_code_6() {
    let dir = PluginDir::new();
    for stdin in [&b"\xff\xfe"[..], b"\xc3\x28{}"] {
        let o = run(&dir, &add_env(&dir), stdin);
        cni_error(&o, 6);
    }
}

#[test]
fn missing_or_bad_name_is_code_7() {
    let dir = PluginDir::new();
    for stdin in [
        r#"{"cniVersion":"1.0.0","type":"istio-cni"}"#,
        r#"{"cniVersion":"1.0.0","name":"","type":"istio-cni"}"#,
        r#"{"cniVersion":"1.0.0","name":"bad/name","type":"istio-cni"}"#,
    ] {
        let o = run(&dir, &add_env(&dir), stdin.as_bytes());
        cni_error(&o, 7);
    }
}

#[test]
fn unsupported_version_is_code_1() {
    let dir = PluginDir::new();
    for v in ["9.9.9", "1.2.0", "0.5.0", "v1.0.0", "1.0"] {
        let o = run(&dir, &add_env(&dir), conf(v).as_bytes());
        cni_error(&o, 1);
    }
}

#[test]
fn missing_or_invalid_container_id_is_code_4() {
    let dir = PluginDir::new();
    for cmd in ["ADD", "CHECK"] {
        let mut env = add_env(&dir).with_command(cmd);
        env.container_id = None;
        let msg = cni_error(&run(&dir, &env, conf("1.0.0").as_bytes()), 4);
        assert!(msg.contains("CNI_CONTAINERID"), "{cmd}: {msg}");
    }
    for bad in ["", "-leading-dash", "a/b", "a b", "id;x"] {
        let mut env = add_env(&dir);
        env.container_id = Some(bad.into());
        let msg = cni_error(&run(&dir, &env, conf("1.0.0").as_bytes()), 4);
        assert!(msg.contains("CNI_CONTAINERID"), "{bad:?}: {msg}");
    }
}

#[test]
fn error_reply_uses_the_configuration_version() {
    let dir = PluginDir::new();
    let mut env = add_env(&dir);
    env.container_id = None;
    let o = run(&dir, &env, conf("0.4.0").as_bytes());
    cni_error(&o, 4);
    assert_eq!(
        o.object()
            .get("cniVersion")
            .map(crate::support::to_json)
            .as_deref(),
        Some("\"0.4.0\""),
        "{o}"
    );
}

#[test]
fn invalid_ifname_is_code_4() {
    let dir = PluginDir::new();
    for bad in ["abcdefghijklmnop", ".", "..", "a/b", "a:b", "a b", ""] {
        let mut env = add_env(&dir);
        env.ifname = Some(bad.into());
        let msg = cni_error(&run(&dir, &env, conf("1.0.0").as_bytes()), 4);
        assert!(msg.contains("CNI_IFNAME"), "{bad:?}: {msg}");
    }
    let mut env = add_env(&dir);
    env.ifname = None;
    let msg = cni_error(&run(&dir, &env, conf("1.0.0").as_bytes()), 4);
    assert!(msg.contains("CNI_IFNAME"), "unset: {msg}");
    // 15 characters is the limit and fine.
    let mut env = add_env(&dir);
    env.ifname = Some("abcdefghijklmno".into());
    run(&dir, &env, conf("1.0.0").as_bytes()).assert_success();
}

#[test]
fn missing_netns_on_add_is_code_4() {
    let dir = PluginDir::new();
    let mut env = add_env(&dir);
    env.netns = None;
    let msg = cni_error(&run(&dir, &env, conf("1.0.0").as_bytes()), 4);
    assert!(msg.contains("CNI_NETNS"), "{msg}");
}

#[test]
fn unknown_command_is_code_4() {
    let dir = PluginDir::new();
    for cmd in ["FOO", "add", ""] {
        let o = run(
            &dir,
            &add_env(&dir).with_command(cmd),
            conf("1.0.0").as_bytes(),
        );
        let msg = cni_error(&o, 4);
        assert!(msg.contains("CNI_COMMAND"), "{cmd:?}: {msg}");
    }
}

#[test]
fn del_without_netns_succeeds_silently() {
    let dir = PluginDir::new();
    let base = CniEnv::new("DEL", "c0ffee02", "", &dir.cni_path());
    let unset = CniEnv {
        netns: None,
        ..base.clone()
    };
    let absent = CniEnv {
        netns: Some(ABSENT_NETNS.into()),
        ..base.clone()
    };
    for env in [&base, &unset, &absent] {
        // Twice each, with and without a configuration.
        for stdin in [conf("1.0.0"), conf("0.3.1"), String::new()] {
            for _ in 0..2 {
                let o = run(&dir, env, stdin.as_bytes());
                assert_no_panic(&o);
                o.assert_success();
                assert!(o.stdout.is_empty(), "DEL printed something:\n{o}");
            }
        }
    }
}

#[test]
fn no_command_no_args_prints_about_on_stderr() {
    let dir = PluginDir::new();
    let o = run(&dir, &CniEnv::default(), b"");
    o.assert_success();
    assert!(o.stdout.is_empty(), "{o}");
    assert!(o.stderr.contains("CNI"), "no about text on stderr:\n{o}");
    assert!(
        o.stderr.contains("1.1.0"),
        "about text lacks versions:\n{o}"
    );
}

#[test]
fn huge_stdin_is_code_6_without_panic() {
    let dir = PluginDir::new();
    // 10 MB: a string value inside a valid-looking object.
    let mut big = br#"{"cniVersion":"1.0.0","name":"n","x":""#.to_vec();
    big.extend(vec![b'a'; 10 << 20]);
    big.extend(br#""}"#);
    cni_error(&run(&dir, &add_env(&dir), &big), 6);
    // 10^5 levels of nesting, arrays and objects.
    let deep_arr = format!(
        r#"{{"cniVersion":"1.0.0","name":"n","x":{}{}}}"#,
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    cni_error(&run(&dir, &add_env(&dir), deep_arr.as_bytes()), 6);
    let deep_obj = format!(
        r#"{{"cniVersion":"1.0.0","name":"n","prevResult":{}1{}}}"#,
        r#"{"a":"#.repeat(100_000),
        "}".repeat(100_000)
    );
    cni_error(&run(&dir, &add_env(&dir), deep_obj.as_bytes()), 6);
}

#[test]
fn add_without_prev_result_prints_an_empty_result() {
    let dir = PluginDir::new();
    for v in ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"] {
        let o = run(&dir, &add_env(&dir), conf(v).as_bytes());
        assert_no_panic(&o);
        o.assert_success();
        let obj = o.object();
        assert_eq!(
            obj.get("cniVersion").map(crate::support::to_json),
            Some(format!("\"{v}\"")),
            "{o}"
        );
        crate::support::assert_json_eq(
            &o.json(),
            &crate::support::parse_json(&format!(r#"{{"cniVersion":"{v}"}}"#)),
            "empty result",
        );
    }
}

#[test]
fn debug_logs_stay_off_stdout() {
    let dir = PluginDir::new();
    let stdin = r#"{"cniVersion":"1.0.0","name":"n","type":"istio-cni","plugin_log_level":"debug",
        "prevResult":{"cniVersion":"1.0.0","interfaces":[{"name":"eth0","sandbox":"/x"}],
        "ips":[{"address":"10.250.0.2/24","interface":0}]}}"#;
    let mut env = add_env(&dir).with_args("IgnoreUnknown=1;K8S_POD_NAME=plain");
    env.extra.push(("RUST_LOG".into(), "trace".into()));
    let o = run(&dir, &env, stdin.as_bytes());
    o.assert_success();
    // The whole of stdout is one JSON document.
    let _ = o.object();
    assert!(!o.stderr.is_empty(), "expected logs on stderr:\n{o}");
}

#[test]
fn cni_args_errors() {
    let dir = PluginDir::new();
    for bad in [
        "K8S_POD_NAME=a;",
        "A=B=C",
        "FOO=bar",
        "IgnoreUnknown=yes;FOO=bar",
    ] {
        let o = run(
            &dir,
            &add_env(&dir).with_args(bad),
            conf("1.0.0").as_bytes(),
        );
        let msg = cni_error(&o, 6);
        assert!(msg.contains("CNI_ARGS"), "{bad:?}: {msg}");
    }
    // containerd's keys for an excluded namespace, any order, pass.
    let stdin = r#"{"cniVersion":"1.0.0","name":"n","exclude_namespaces":["kube-system"]}"#;
    for args in [
        "K8S_POD_NAMESPACE=kube-system;K8S_POD_NAME=p;K8S_POD_INFRA_CONTAINER_ID=c;K8S_POD_UID=u;IgnoreUnknown=1",
        "IgnoreUnknown=1;K8S_POD_UID=u;K8S_POD_INFRA_CONTAINER_ID=c;K8S_POD_NAME=p;K8S_POD_NAMESPACE=kube-system",
    ] {
        run(&dir, &add_env(&dir).with_args(args), stdin.as_bytes()).assert_success();
    }
}

#[test]
fn check_below_0_4_0_is_code_1() {
    let dir = PluginDir::new();
    for v in ["0.1.0", "0.2.0", "0.3.0", "0.3.1"] {
        let o = run(
            &dir,
            &add_env(&dir).with_command("CHECK"),
            conf(v).as_bytes(),
        );
        cni_error(&o, 1);
    }
}

#[test]
fn gc_accepts_both_attachment_keys() {
    let dir = PluginDir::new();
    let env = CniEnv {
        command: Some("GC".into()),
        path: Some(dir.cni_path()),
        ..CniEnv::default()
    };
    let stdin = r#"{"cniVersion":"1.1.0","name":"n","type":"istio-cni",
        "cni.dev/valid-attachments":[{"containerID":"a","ifname":"eth0"}],
        "cni.dev/attachments":[{"containerID":"a","ifname":"eth0"}]}"#;
    let o = run(&dir, &env, stdin.as_bytes());
    assert_no_panic(&o);
    o.assert_success();
    assert!(o.stdout.is_empty(), "GC printed something:\n{o}");
}

#[test]
fn status_depends_on_the_kubeconfig() {
    let dir = PluginDir::new();
    let run_dir = crate::support::TempDir::new("status");
    let env = CniEnv {
        command: Some("STATUS".into()),
        path: Some(dir.cni_path()),
        ..CniEnv::default()
    };
    let stdin = format!(
        r#"{{"cniVersion":"1.1.0","name":"n","type":"istio-cni","cni_agent_run_dir":"{}"}}"#,
        run_dir.path().display()
    );
    let msg = cni_error(&run(&dir, &env, stdin.as_bytes()), 50);
    assert!(msg.contains("kubeconfig"), "{msg}");
    run_dir.write("istio-cni-kubeconfig", "apiVersion: v1\nkind: Config\n");
    let o = run(&dir, &env, stdin.as_bytes());
    o.assert_success();
    assert!(o.stdout.is_empty(), "{o}");
}

#[test]
fn multicall_name_with_cni_command_runs_the_plugin() {
    // A runtime that execs the binary under its own name (no link) still gets the plugin.
    let dir = PluginDir::new();
    let bin = crate::support::our_binary();
    let o = crate::support::run_plugin(
        &bin,
        bin.to_str().unwrap(),
        &CniEnv::version_probe(),
        br#"{"cniVersion":"1.1.0"}"#,
    );
    assert_version_reply(&o);
    let o = crate::support::run_plugin(&bin, "istio-cni-node", &add_env(&dir), b"{");
    cni_error(&o, 6);
}

/// Issue 32: our entry in the owned file while the node has no primary CNI configuration carries
/// `"no_primary": true`; ADD refuses every container through it (even one it would otherwise pass
/// through untouched: there is no network to give it), DEL still succeeds (teardown never blocks).
#[test]
fn add_through_the_no_primary_file_is_refused_and_del_is_not() {
    let dir = PluginDir::new();
    let plain = conf("1.0.0");
    run(&dir, &add_env(&dir), plain.as_bytes()).assert_success();
    let marked = plain.replace("}", ",\"no_primary\":true}");
    let o = run(&dir, &add_env(&dir), marked.as_bytes());
    assert_no_panic(&o);
    assert_ne!(o.code, 0, "{o}");
    assert!(o.stdout.contains("no primary CNI configuration"), "{o}");
    let del = add_env(&dir).with_command("DEL");
    run(&dir, &del, marked.as_bytes()).assert_success();
}

/// The plugin's rolling file, as upstream's: `<cni_agent_run_dir>/istio-cni.log` holds the ADD's decision as
/// Istio's JSON at info, nothing at debug (the process logs debug on stderr), mode 0600; written with the
/// agent down (no `log.sock`); a run dir that does not exist is not created.
#[test]
fn add_appends_its_decision_to_the_rolling_log_file() {
    use std::os::unix::fs::PermissionsExt;
    let dir = PluginDir::new();
    let run_dir = crate::support::TempDir::new("rolling");
    let stdin = format!(
        r#"{{"cniVersion":"1.0.0","name":"n","type":"istio-cni","plugin_log_level":"debug",
            "exclude_namespaces":["kube-system"],"cni_agent_run_dir":"{}"}}"#,
        run_dir.path().display()
    );
    let env = add_env(&dir).with_args("K8S_POD_NAMESPACE=kube-system;K8S_POD_NAME=coredns-1");
    let o = run(&dir, &env, stdin.as_bytes());
    o.assert_success();
    let file = run_dir.path().join("istio-cni.log");
    let text =
        std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}\n{o}", file.display()));
    let lines: Vec<Object> = text
        .lines()
        .map(|l| match crate::support::parse_json(l) {
            Value::Object(o) => o,
            other => panic!("not a JSON object: {other:?}"),
        })
        .collect();
    let field = |o: &Object, k: &str| match o.get(k) {
        Some(Value::String(s)) => s.clone(),
        other => panic!("{k}: {other:?} in {text}"),
    };
    assert!(!lines.is_empty(), "{o}");
    for l in &lines {
        assert_ne!(field(l, "level"), "debug", "{text}");
        assert_eq!(field(l, "scope"), "cni-plugin", "{text}");
        field(l, "time");
    }
    let decision = lines
        .iter()
        .find(|l| field(l, "msg").contains("kube-system/coredns-1"))
        .unwrap_or_else(|| panic!("no decision line in {text}\nstderr:\n{o}"));
    assert_eq!(field(decision, "level"), "info");
    let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o600);
    assert!(!run_dir.path().join("log.sock").exists());

    // A second ADD appends.
    run(&dir, &env, stdin.as_bytes()).assert_success();
    let again = std::fs::read_to_string(&file).unwrap();
    assert_eq!(again.lines().count(), 2 * lines.len(), "{again}");

    // A pod whose lookup fails (an API server that refuses connections): the debug lines of its retries
    // go to stderr only, its error line to the file too.
    run_dir.write(
        "istio-cni-kubeconfig",
        "apiVersion: v1\nclusters:\n- cluster:\n    insecure-skip-tls-verify: true\n    server: https://127.0.0.1:1\n  name: local\ncontexts:\n- context:\n    cluster: local\n    user: u\n  name: x\ncurrent-context: x\nkind: Config\nusers:\n- name: u\n  user:\n    token: t\n",
    );
    let lookup = stdin.replace(
        "{\"cniVersion\"",
        "{\"pod_lookup_timeout_seconds\":1,\"cniVersion\"",
    );
    let env_web = add_env(&dir).with_args("K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-1");
    let o = run(&dir, &env_web, lookup.as_bytes());
    cni_error(&o, 101);
    assert!(
        o.stderr.contains("\tdebug\t"),
        "expected debug lines on stderr:\n{o}"
    );
    let text = std::fs::read_to_string(&file).unwrap();
    let added: Vec<&str> = text.lines().skip(2 * lines.len()).collect();
    assert!(
        !added.is_empty() && added.iter().all(|l| !l.contains(r#""level":"debug""#)),
        "{text}"
    );
    assert!(
        added
            .iter()
            .any(|l| l.contains(r#""level":"error""#) && l.contains("default/web-1")),
        "{text}\nstderr:\n{o}"
    );

    // A run dir that does not exist stays absent.
    let missing = run_dir.path().join("absent");
    let stdin = stdin.replace(
        &format!("{}\"", run_dir.path().display()),
        &format!("{}\"", missing.display()),
    );
    run(&dir, &env, stdin.as_bytes()).assert_success();
    assert!(!missing.exists());
}

/// `ambient_enabled: true` (an entry upstream's installer wrote for ambient mode, which we do not
/// implement): upstream hands a pod its selectors pick to the ambient agent, so ADD must not skip such a pod
/// as one without a sidecar (it would start uncaptured); it is refused with code 2 naming the field. The
/// shortcuts still pass (an excluded namespace, the agent's own pod, a plain container), and with the flag
/// false the same pod is skipped as upstream's sidecar path skips it.
#[test]
fn add_with_ambient_enabled_refuses_pods_past_the_shortcuts() {
    let dir = PluginDir::new();
    let run_dir = crate::support::TempDir::new("ambient");
    let srv = crate::support::kube::start();
    srv.write_kubeconfig(&run_dir.path().join("istio-cni-kubeconfig"))
        .unwrap();
    srv.add_pod(
        r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web-1","namespace":"default",
            "labels":{"istio.io/dataplane-mode":"ambient"}},"spec":{"containers":[{"name":"app"}]}}"#,
    )
    .unwrap();
    let stdin = |ambient: &str| {
        format!(
            r#"{{"cniVersion":"1.0.0","name":"n","type":"istio-cni","exclude_namespaces":["kube-system"],
                "pod_namespace":"istio-system","pod_cache":false,"ambient_enabled":{ambient},
                "cni_agent_run_dir":"{}"}}"#,
            run_dir.path().display()
        )
    };
    let web = add_env(&dir).with_args("K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-1");
    run(&dir, &web, stdin("false").as_bytes()).assert_success();
    let msg = cni_error(&run(&dir, &web, stdin("true").as_bytes()), 2);
    assert!(
        msg.contains("ambient_enabled") && msg.contains("default/web-1"),
        "{msg}"
    );
    for args in [
        "K8S_POD_NAMESPACE=kube-system;K8S_POD_NAME=coredns-1",
        "K8S_POD_NAMESPACE=istio-system;K8S_POD_NAME=istio-cni-node-x",
        "IgnoreUnknown=1;K8S_POD_NAME=plain",
    ] {
        run(
            &dir,
            &add_env(&dir).with_args(args),
            stdin("true").as_bytes(),
        )
        .assert_success();
    }
    // Not a boolean: Go's decoding of the entry fails, so does ours.
    cni_error(&run(&dir, &web, stdin("\"true\"").as_bytes()), 6);
}

/// The runtime hands the plugin its own environment (libcni `AsEnv`), so a `RUST_LOG=trace` set for
/// containerd reaches us, as does `plugin_log_level: trace`. Whatever the level, the service account's
/// bearer token never reaches stderr (the runtime's journal), the log relay or the rolling file: ureq's
/// trace level dumps the request head, `Authorization` included, in 16-byte rows.
#[test]
fn no_log_level_writes_the_bearer_token() {
    let dir = PluginDir::new();
    let run_dir = crate::support::TempDir::new("token-log");
    let srv = crate::support::kube::start();
    let token = "tok3n-5ecret-0123456789-abcdefghij-KLMNOPQRST";
    srv.set_token(token);
    srv.write_kubeconfig(&run_dir.path().join("istio-cni-kubeconfig"))
        .unwrap();
    srv.add_pod(
        r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web-1","namespace":"default"},
            "spec":{"containers":[{"name":"app"}]}}"#,
    )
    .unwrap();
    let stdin = |level: &str| {
        format!(
            r#"{{"cniVersion":"1.0.0","name":"n","type":"istio-cni","pod_cache":false,
                "plugin_log_level":"{level}","cni_agent_run_dir":"{}"}}"#,
            run_dir.path().display()
        )
    };
    // The installer's log relay, which re-logs what it gets in the DaemonSet pod's log.
    let relay = std::os::unix::net::UnixDatagram::bind(run_dir.path().join("log.sock")).unwrap();
    relay.set_nonblocking(true).unwrap();
    let relayed = || {
        let mut all = String::new();
        let mut buf = vec![0u8; 1 << 16];
        while let Ok(n) = relay.recv(&mut buf) {
            all.push_str(&String::from_utf8_lossy(&buf[..n]));
            all.push('\n');
        }
        all
    };
    let web = add_env(&dir).with_args("K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-1");
    let mut inherited = web.clone();
    inherited
        .extra
        .push(("RUST_LOG".to_string(), "trace".to_string()));
    // Any 8 bytes of the token, wherever a dump row cut it.
    let leaks = |text: &str| {
        (0..=token.len() - 8)
            .find_map(|i| text.contains(&token[i..i + 8]).then(|| &token[i..i + 8]))
    };
    for (env, level) in [(&web, "trace"), (&inherited, "info"), (&web, "debug")] {
        let o = run(&dir, env, stdin(level).as_bytes());
        o.assert_success();
        let file =
            std::fs::read_to_string(run_dir.path().join("istio-cni.log")).unwrap_or_default();
        let relayed = relayed();
        assert!(
            !relayed.is_empty(),
            "nothing relayed: the relay check proves nothing"
        );
        for (what, text) in [
            ("stderr", &o.stderr),
            ("stdout", &o.stdout),
            ("istio-cni.log", &file),
            ("the log relay", &relayed),
        ] {
            assert_eq!(leaks(text), None, "level {level}: token in {what}:\n{text}");
        }
    }
    assert!(
        srv.requests().iter().any(|r| r.status == 200),
        "the pod was never read: the test proves nothing"
    );
}

/// An environment variable is bytes (Go's `os.Getenv` hands them over as they are): a `CNI_ARGS` holding a
/// byte that is not UTF-8, in a pair the plugin ignores, still names the pod, which is then treated as
/// the Kubernetes pod it is (here: refused, its kubeconfig missing), never as "not a Kubernetes pod"
/// passed through unredirected; a `K8S_POD_*` value that is not UTF-8 names no pod and is refused as such.
/// A `CNI_PATH` with such a byte is as good as any other (the plugin does not use it).
#[test]
fn env_values_that_are_not_utf8_are_never_taken_as_unset() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let dir = PluginDir::new();
    let with = |var: &str, value: &[u8], cmd: &str| {
        let mut assign = format!("{var}=").into_bytes();
        assign.extend_from_slice(value);
        let mut c = std::process::Command::new("env");
        c.arg(OsStr::from_bytes(&assign)).arg(dir.istio_cni());
        let env = add_env(&dir).with_command(cmd);
        crate::support::run_cmd(c, &env, conf("1.0.0").as_bytes())
    };
    let pod = b"IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-1;FOO=\xff";
    let o = with("CNI_ARGS", pod, "ADD");
    let msg = cni_error(&o, 5);
    assert!(
        msg.contains("default/web-1") && msg.contains("kubeconfig"),
        "{msg}"
    );
    // DEL does not read CNI_ARGS: it still succeeds.
    with("CNI_ARGS", pod, "DEL").assert_success();
    let msg = cni_error(
        &with(
            "CNI_ARGS",
            b"K8S_POD_NAMESPACE=default;K8S_POD_NAME=web\xff",
            "ADD",
        ),
        6,
    );
    assert!(
        msg.contains("K8S_POD_NAME") && msg.contains("UTF-8"),
        "{msg}"
    );
    let o = with("CNI_PATH", b"/opt/cni/bin\xff", "ADD");
    o.assert_success();
}
