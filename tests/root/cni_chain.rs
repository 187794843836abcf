//! A real chain, as a runtime runs it (root): in a "node" network namespace the test creates, Debian's
//! `ptp` + `host-local` set up a "pod" namespace, then our `istio-cni` gets ptp's result as prevResult. Our
//! result must equal ptp's result in the configured version (JSON-equal after dropping empty members), with
//! eth0's IP and the interface indices intact; DEL then runs in reverse order, twice, and once more with an
//! empty CNI_NETNS. Covers containers that need no redirection: a plain container and a pod in an excluded
//! namespace. The 10.250.0.0/24 network exists only between the namespaces the test creates.

use crate::support::{
    assert_json_eq, debian_plugin, normalize_json, parse_json, run_plugin_in, to_json, CniEnv,
    Netns, Object, PluginDir, PluginOutput, TempDir, Value,
};

/// Versions with chaining (prevResult), the matrix every chained plugin must pass.
const CHAIN_VERSIONS: [&str; 5] = ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"];
const EXCLUDED_POD_ARGS: &str = "K8S_POD_NAMESPACE=kube-system;K8S_POD_NAME=coredns-x;\
    K8S_POD_INFRA_CONTAINER_ID=cafe02;K8S_POD_UID=00000000-0000-0000-0000-000000000002;IgnoreUnknown=1";
/// What podman sends for a plain container: a name but no namespace.
const PLAIN_CONTAINER_ARGS: &str = "IgnoreUnknown=1;K8S_POD_NAME=plain-container";

/// The versions Debian's ptp supports (its VERSION reply).
fn ptp_versions() -> Vec<String> {
    let ptp = debian_plugin("ptp");
    let o = crate::support::run_plugin(
        &ptp,
        ptp.to_str().unwrap(),
        &CniEnv::version_probe(),
        br#"{"cniVersion":"1.0.0"}"#,
    );
    o.assert_success();
    match o.object().get("supportedVersions") {
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(|v| match v {
                Value::String(s) => Some(s.clone()),
                _ => None,
            })
            .collect(),
        _ => panic!("ptp VERSION without supportedVersions:\n{o}"),
    }
}

/// The version ptp runs at for a chain configured at `v`: `v` itself, or (for 1.1.0, which Debian's
/// 1.1.1 plugins predate) 1.0.0, whose result types are identical to 1.1.0's.
fn ptp_version_for(v: &str, supported: &[String]) -> String {
    if supported.iter().any(|s| s == v) {
        v.to_string()
    } else {
        assert_eq!(v, "1.1.0", "ptp lacks chain version {v}: {supported:?}");
        assert!(supported.iter().any(|s| s == "1.0.0"), "{supported:?}");
        "1.0.0".to_string()
    }
}

fn ptp_conf(version: &str, ipam_dir: &TempDir) -> String {
    format!(
        r#"{{"cniVersion":"{version}","name":"chain-test","type":"ptp","ipMasq":false,"mtu":1400,
            "ipam":{{"type":"host-local","ranges":[[{{"subnet":"10.250.0.0/24"}}]],
                     "routes":[{{"dst":"0.0.0.0/0"}}],"dataDir":"{}"}}}}"#,
        ipam_dir.path().display()
    )
}

fn our_conf(version: &str, prev: Option<&str>) -> String {
    let prev = prev
        .map(|p| format!(r#","prevResult":{p}"#))
        .unwrap_or_default();
    format!(
        r#"{{"cniVersion":"{version}","name":"chain-test","type":"istio-cni","plugin_log_level":"debug",
            "exclude_namespaces":["kube-system"],"pod_namespace":"istio-system",
            "cni_agent_run_dir":"/nonexistent/istio-cni-test"{prev}}}"#
    )
}

/// `value` with its top-level `cniVersion` set to `v`.
fn with_version(value: &Value, v: &str) -> Value {
    let mut o = as_object(value).clone();
    o.insert("cniVersion".into(), Value::String(v.into()));
    Value::Object(o)
}

fn as_object(v: &Value) -> &Object {
    match v {
        Value::Object(o) => o,
        other => panic!("not an object: {}", to_json(other)),
    }
}

fn str_field<'a>(o: &'a Object, k: &str) -> Option<&'a str> {
    match o.get(k) {
        Some(Value::String(s)) => Some(s),
        _ => None,
    }
}

fn list<'a>(o: &'a Object, k: &str) -> Vec<&'a Object> {
    match o.get(k) {
        Some(Value::Array(a)) => a.iter().map(as_object).collect(),
        None | Some(Value::Null) => Vec::new(),
        Some(other) => panic!("{k} is not a list: {}", to_json(other)),
    }
}

/// The libcni conversion of a result between versions, written independently of the crate: 1.x → 0.3/0.4
/// adds IP `version` and keeps only name/mac/sandbox of interfaces; 0.3/0.4 → 1.x drops IP `version`.
fn convert(result: &Value, to: &str) -> Value {
    let mut o = as_object(result).clone();
    let new = to.starts_with("1.");
    o.insert("cniVersion".into(), Value::String(to.into()));
    if let Some(Value::Array(ips)) = o.get_mut("ips") {
        for ip in ips.iter_mut() {
            if let Value::Object(ip) = ip {
                if new {
                    ip.remove("version");
                } else {
                    let v6 = str_field(ip, "address").is_some_and(|a| a.contains(':'));
                    ip.insert(
                        "version".into(),
                        Value::String(if v6 { "6" } else { "4" }.into()),
                    );
                }
            }
        }
    }
    if !new {
        if let Some(Value::Array(ifs)) = o.get_mut("interfaces") {
            for i in ifs.iter_mut() {
                if let Value::Object(i) = i {
                    i.retain(|k, _| ["name", "mac", "sandbox"].contains(&k.as_str()));
                }
            }
        }
    }
    Value::Object(o)
}

/// One pod attachment: its netns and the test's view of the runtime.
struct Attachment<'a> {
    node: &'a Netns,
    pod: Netns,
    dir: &'a PluginDir,
    ipam: &'a TempDir,
    cid: String,
    args: &'a str,
}

impl Attachment<'_> {
    fn env(&self, cmd: &str) -> CniEnv {
        CniEnv::new(cmd, &self.cid, &self.pod.path(), &self.dir.cni_path()).with_args(self.args)
    }
    fn ptp(&self, env: &CniEnv, stdin: &str) -> PluginOutput {
        run_plugin_in(self.node, &debian_plugin("ptp"), env, stdin.as_bytes())
    }
    fn ours(&self, env: &CniEnv, stdin: &str) -> PluginOutput {
        run_plugin_in(self.node, &self.dir.istio_cni(), env, stdin.as_bytes())
    }
}

/// Checks that `result` names eth0 in the pod's netns with IPs that point at it, and that eth0 really has them.
fn assert_eth0_intact(result: &Value, pod: &Netns) {
    let o = as_object(result);
    let ifs = list(o, "interfaces");
    let eth0 = ifs
        .iter()
        .position(|i| {
            str_field(i, "name") == Some("eth0") && str_field(i, "sandbox") == Some(&pod.path())
        })
        .unwrap_or_else(|| panic!("no eth0 in {} in {}", pod.path(), to_json(result)));
    let ips = list(o, "ips");
    assert!(!ips.is_empty(), "no ips: {}", to_json(result));
    let shown = pod.exec_ok(&["ip", "-o", "addr", "show", "dev", "eth0"]);
    for ip in ips {
        let idx = ip.get("interface").and_then(crate::support::as_u64);
        assert_eq!(
            idx,
            Some(eth0 as u64),
            "IP not on eth0's index: {}",
            to_json(result)
        );
        let addr = str_field(ip, "address").expect("ip without address");
        assert!(shown.contains(addr), "eth0 lacks {addr}: {shown}");
    }
}

/// ADD ptp then ours for chain version `v`; checks the result; DEL in reverse order twice, then with an
/// empty CNI_NETNS. Returns ptp's result (for the conversion test).
fn run_chain(node: &Netns, dir: &PluginDir, v: &str, ptp_v: &str, args: &str, n: usize) -> Value {
    let ipam = TempDir::new("ipam");
    let a = Attachment {
        node,
        pod: Netns::new("ict-pod"),
        dir,
        ipam: &ipam,
        cid: format!("chain{n}x{}", v.replace('.', "")),
        args,
    };
    let ptp_stdin = ptp_conf(ptp_v, a.ipam);
    let ptp = a.ptp(&a.env("ADD"), &ptp_stdin);
    ptp.assert_success();
    let ptp_result = ptp.json();
    assert_eth0_intact(&ptp_result, &a.pod);

    // What the runtime feeds us: ptp's result in the chain's version (libcni converts 1.0.0 → 1.1.0 by
    // relabelling; our plugin must also accept the unconverted 1.0.0 document).
    let expected = with_version(&ptp_result, v);
    let mut prevs = vec![to_json(&expected)];
    if ptp_v != v {
        prevs.push(to_json(&ptp_result));
    }
    let mut final_result = None;
    for prev in &prevs {
        let ours = a.ours(&a.env("ADD"), &our_conf(v, Some(prev)));
        ours.assert_success();
        let got = ours.json();
        assert_eq!(
            str_field(as_object(&got), "cniVersion"),
            Some(v),
            "cniVersion of our result:\n{ours}"
        );
        assert_json_eq(&got, &expected, &format!("chain {v}: our result vs ptp's"));
        assert_eth0_intact(&got, &a.pod);
        final_result = Some(got);
    }
    let final_result = to_json(&final_result.unwrap());

    // DEL in reverse order, each with the final result, twice; then containerd's second DEL: empty netns,
    // no prevResult.
    for round in 0..2 {
        let o = a.ours(&a.env("DEL"), &our_conf(v, Some(&final_result)));
        o.assert_success();
        assert!(o.stdout.is_empty(), "DEL round {round} printed:\n{o}");
        let ptp_prev = to_json(&with_version(&parse_json(&final_result), ptp_v));
        let ptp_del = ptp_stdin
            .trim_end()
            .strip_suffix('}')
            .expect("ptp configuration ends with }")
            .to_string()
            + &format!(r#","prevResult":{ptp_prev}}}"#);
        a.ptp(&a.env("DEL"), &ptp_del).assert_success();
    }
    let gone = a.pod.exec(&["ip", "link", "show", "eth0"]);
    assert!(!gone.status.success(), "eth0 survived ptp's DEL");
    let mut empty_ns = a.env("DEL");
    empty_ns.netns = Some(String::new());
    let o = a.ours(&empty_ns, &our_conf(v, None));
    o.assert_success();
    assert!(
        o.stdout.is_empty(),
        "DEL with empty CNI_NETNS printed:\n{o}"
    );
    a.ptp(&empty_ns, &ptp_stdin).assert_success();
    ptp_result
}

fn chain_all_versions(args: &str) -> Vec<(String, Value)> {
    let supported = ptp_versions();
    let node = Netns::new("ict-node");
    let dir = PluginDir::new();
    let mut results = Vec::new();
    for (n, v) in CHAIN_VERSIONS.iter().enumerate() {
        let ptp_v = ptp_version_for(v, &supported);
        let r = run_chain(&node, &dir, v, &ptp_v, args, n);
        results.push((ptp_v, r));
    }
    results
}

#[test]
fn chain_plain_container_passes_ptp_result_through() {
    if !crate::support::require_root() {
        return;
    }
    chain_all_versions(PLAIN_CONTAINER_ARGS);
}

#[test]
fn chain_excluded_namespace_pod_passes_ptp_result_through() {
    if !crate::support::require_root() {
        return;
    }
    chain_all_versions(EXCLUDED_POD_ARGS);
}

/// Real ptp results of one version fed to a chain configured at another: our output must be the libcni
/// conversion (checked with this file's own converter).
#[test]
fn real_ptp_results_convert_across_versions() {
    if !crate::support::require_root() {
        return;
    }
    let supported = ptp_versions();
    let node = Netns::new("ict-node");
    let dir = PluginDir::new();
    let ipam = TempDir::new("ipam");
    for (n, from) in ["0.3.1", "0.4.0", "1.0.0"].iter().enumerate() {
        let a = Attachment {
            node: &node,
            pod: Netns::new("ict-pod"),
            dir: &dir,
            ipam: &ipam,
            cid: format!("conv{n}"),
            args: PLAIN_CONTAINER_ARGS,
        };
        let from_v = ptp_version_for(from, &supported);
        let ptp_stdin = ptp_conf(&from_v, &ipam);
        let ptp = a.ptp(&a.env("ADD"), &ptp_stdin);
        ptp.assert_success();
        let prev = ptp.json();
        for to in CHAIN_VERSIONS {
            let ours = a.ours(&a.env("ADD"), &our_conf(to, Some(&to_json(&prev))));
            ours.assert_success();
            let want = convert(&prev, to);
            assert_json_eq(
                &ours.json(),
                &want,
                &format!("ptp {from_v} result in a {to} chain"),
            );
            // Nothing the runtime needs is lost: eth0 and its IPs.
            assert_eth0_intact(&ours.json(), &a.pod);
            assert!(
                to_json(&normalize_json(&ours.json())).contains("10.250.0."),
                "{ours}"
            );
        }
        a.ptp(&a.env("DEL"), &ptp_stdin).assert_success();
    }
}
