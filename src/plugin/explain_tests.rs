use super::*;
use crate::fsutil::test_dir;
use std::path::Path;

/// `body` written to `name` in `dir`; its path.
fn file(dir: &Path, name: &str, body: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, body).unwrap();
    p.to_string_lossy().into_owned()
}

/// The iptables (not `--nft`) arguments with these files.
fn args(pod: Option<String>, conf: Option<String>, capture: Option<String>) -> ExplainArgs {
    ExplainArgs {
        pod,
        conf,
        capture,
        nft: false,
    }
}

fn pod(ns: &str, name: &str, annotations: &str, proxy: &str, ips: &[&str]) -> String {
    let ips: Vec<String> = ips.iter().map(|i| format!(r#"{{"ip":"{i}"}}"#)).collect();
    format!(
        r#"{{"metadata":{{"name":"{name}","namespace":"{ns}","annotations":{{{annotations}}}}},
            "spec":{{"containers":[{{"name":"app"}},{{"name":"istio-proxy"{proxy}}}]}},
            "status":{{"podIPs":[{}]}}}}"#,
        ips.join(",")
    )
}

const STATUS: &str = r#""sidecar.istio.io/status":"{}""#;

fn run_pod(
    t: &Path,
    pod_json: &str,
    conf: Option<&str>,
) -> std::result::Result<String, ExplainError> {
    let pod = Some(file(t, "pod.json", pod_json));
    explain(
        &args(pod, conf.map(|c| file(t, "conf.json", c)), None),
        &|_| None,
    )
}

fn ok(r: std::result::Result<String, ExplainError>) -> String {
    match r {
        Ok(s) => s,
        Err(Usage(u)) => panic!("usage: {u}"),
        Err(Failed(e)) => panic!("{e}"),
    }
}

fn failed(r: std::result::Result<String, ExplainError>) -> Error {
    match r {
        Err(Failed(e)) => e,
        Err(Usage(u)) => panic!("usage: {u}"),
        Ok(s) => panic!("expected an error, got {s}"),
    }
}

fn documents(s: &str) -> Vec<String> {
    let body: String = s
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect();
    body.split_inclusive("COMMIT\n")
        .map(str::to_string)
        .collect()
}

#[test]
fn shortcuts_and_skips_print_one_comment_line() {
    let t = test_dir("explain-skip");
    let conf = r#"{"cniVersion":"1.0.0","name":"n","type":"istio-cni","exclude_namespaces":["kube-system"],"pod_namespace":"istio-system"}"#;
    for (p, want) in [
        (
            pod("kube-system", "p", STATUS, "", &["10.0.0.2"]),
            "namespace kube-system is in exclude_namespaces",
        ),
        (
            pod(
                "istio-system",
                "istio-cni-node-abcde",
                STATUS,
                "",
                &["10.0.0.2"],
            ),
            "agent's own pod",
        ),
        (
            pod("", "p", STATUS, "", &["10.0.0.2"]),
            "not a Kubernetes pod",
        ),
        (
            pod("ns", "p", "", "", &["10.0.0.2"]),
            "no sidecar.istio.io/status annotation",
        ),
        (
            pod(
                "ns",
                "p",
                STATUS,
                r#","env":[{"name":"DISABLE_ENVOY","value":"true"}]"#,
                &["10.0.0.2"],
            ),
            "DISABLE_ENVOY",
        ),
    ] {
        let out = ok(run_pod(&t, &p, Some(conf)));
        assert_eq!(out.lines().count(), 1, "{out}");
        assert!(
            out.starts_with("# no redirection: ") && out.contains(want),
            "{out}"
        );
    }
}

#[test]
fn invalid_annotation_fails_naming_the_key() {
    let t = test_dir("explain-bad");
    let p = pod(
        "ns",
        "p",
        &format!(r#"{STATUS},"traffic.sidecar.istio.io/excludeOutboundIPRanges":"*""#),
        "",
        &["10.0.0.2"],
    );
    let e = failed(run_pod(&t, &p, None));
    assert_eq!(e.cni_code(), 100);
    assert!(
        e.to_string()
            .contains("traffic.sidecar.istio.io/excludeOutboundIPRanges"),
        "{e}"
    );
}

#[test]
fn ipv6_pod_gets_both_documents_and_dual_stack_is_honoured() {
    let t = test_dir("explain-v6");
    let out = ok(run_pod(&t, &pod("ns", "p", STATUS, "", &["fd00::2"]), None));
    let docs = documents(&out);
    assert_eq!(docs.len(), 2, "{out}");
    assert!(
        docs[0].contains("127.0.0.6/32") && docs[1].contains("::6/128"),
        "{out}"
    );
    // v4 first without dual-stack: IPv4 only.
    let out = ok(run_pod(
        &t,
        &pod("ns", "p", STATUS, "", &["10.0.0.2", "fd00::2"]),
        None,
    ));
    assert_eq!(documents(&out).len(), 1, "{out}");
    // IPv6 listed first (a dual-stack pod's podIPs follow the CNI result) is still IPv4 only: inside the
    // pod's namespace the kernel lists IPv4 first, which is what upstream decides from.
    let out = ok(run_pod(
        &t,
        &pod("ns", "p", STATUS, "", &["fd00::2", "10.0.0.2"]),
        None,
    ));
    assert_eq!(documents(&out).len(), 1, "{out}");
    let ds = r#","env":[{"name":"ISTIO_DUAL_STACK","value":"true"}]"#;
    let out = ok(run_pod(
        &t,
        &pod("ns", "p", STATUS, ds, &["10.0.0.2", "fd00::2"]),
        None,
    ));
    assert_eq!(documents(&out).len(), 2, "{out}");
    // Only link-local addresses: the error ADD gives.
    let e = failed(run_pod(&t, &pod("ns", "p", STATUS, "", &["fe80::1"]), None));
    assert!(
        e.to_string().contains("no valid local IP address found"),
        "{e}"
    );
}

#[test]
fn tproxy_routes_are_comments_after_the_documents() {
    let t = test_dir("explain-tproxy");
    let p = pod(
        "ns",
        "p",
        &format!(r#"{STATUS},"sidecar.istio.io/interceptionMode":"TPROXY""#),
        "",
        &["10.0.0.2"],
    );
    let out = ok(run_pod(&t, &p, None));
    let last_rule = out.rfind("COMMIT\n").unwrap();
    let route = out.find("fwmark 1337 lookup 133").expect("route note");
    assert!(route > last_rule, "{out}");
    assert!(
        out.lines()
            .skip_while(|l| !l.starts_with('#'))
            .all(|l| l.starts_with('#')),
        "{out}"
    );
}

#[test]
fn no_pod_ips_assumes_ipv4_with_a_note() {
    let t = test_dir("explain-noip");
    let out = ok(run_pod(&t, &pod("ns", "p", STATUS, "", &[]), None));
    assert_eq!(documents(&out).len(), 1);
    assert!(out.contains("# the pod has no status.podIPs"), "{out}");
}

#[test]
fn nftables_conf_prints_the_nft_script() {
    let t = test_dir("explain-nft");
    let conf = r#"{"cniVersion":"1.0.0","name":"n","type":"istio-cni","native_nftables":true}"#;
    let out = ok(run_pod(
        &t,
        &pod("ns", "p", STATUS, "", &["10.0.0.2"]),
        Some(conf),
    ));
    assert!(out.starts_with("add table inet istio-proxy-nat\n"), "{out}");
    assert!(!out.contains("*nat"), "{out}");
}

#[test]
fn usage_and_file_errors() {
    let none = args(None, None, None);
    assert!(matches!(explain(&none, &|_| None), Err(Usage(_))));
    let both = args(Some("a".into()), None, Some("b".into()));
    assert!(matches!(explain(&both, &|_| None), Err(Usage(_))));
    let missing = args(Some("/nonexistent/pod.json".into()), None, None);
    let e = failed(explain(&missing, &|_| None));
    assert!(e.to_string().contains("/nonexistent/pod.json"), "{e}");
    let t = test_dir("explain-files");
    let bad = args(None, None, Some(file(&t, "c.json", "{")));
    let e = failed(explain(&bad, &|_| None));
    assert!(e.to_string().contains("c.json"), "{e}");
}

#[test]
fn node_environment_is_validated() {
    let t = test_dir("explain-env");
    let pod_file = file(&t, "pod.json", &pod("ns", "p", STATUS, "", &["10.0.0.2"]));
    let args = args(Some(pod_file), None, None);
    let env = |k: &str| (k == "ISTIO_OUTBOUND_OWNER_GROUPS").then(|| "java -j ACCEPT".to_string());
    let e = failed(explain(&args, &env));
    assert!(e.to_string().contains("ISTIO_OUTBOUND_OWNER_GROUPS"), "{e}");
    let env = |k: &str| (k == "ISTIO_OUTBOUND_OWNER_GROUPS").then(|| "java,202".to_string());
    let out = ok(explain(&args, &env));
    assert!(
        out.contains("-m owner ! --gid-owner java -m owner ! --gid-owner 202 -j RETURN"),
        "{out}"
    );
}

// An entry with `ambient_enabled: true`: explain answers as ADD does, refusing a pod past the shortcuts
// (a pod without a sidecar would be upstream's ambient pod) and still passing an excluded namespace.
#[test]
fn ambient_enabled_conf_refuses_as_add_does() {
    let t = test_dir("explain-ambient");
    let conf = r#"{"cniVersion":"1.0.0","name":"n","type":"istio-cni","exclude_namespaces":["kube-system"],"ambient_enabled":true}"#;
    let e = failed(run_pod(
        &t,
        &pod("ns", "p", "", "", &["10.0.0.2"]),
        Some(conf),
    ));
    assert_eq!(e.cni_code(), 2);
    assert!(e.to_string().contains("ambient_enabled"), "{e}");
    let out = ok(run_pod(
        &t,
        &pod("kube-system", "p", "", "", &["10.0.0.2"]),
        Some(conf),
    ));
    assert!(out.contains("exclude_namespaces"), "{out}");
    let off = conf.replace("true", "false");
    let out = ok(run_pod(
        &t,
        &pod("ns", "p", "", "", &["10.0.0.2"]),
        Some(&off),
    ));
    assert!(out.contains("no sidecar.istio.io/status"), "{out}");
}
