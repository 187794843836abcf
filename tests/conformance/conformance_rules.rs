//! Every vector in `<CONFORMANCE_DIR>/capture`, `<CONFORMANCE_DIR>/pod` and `<CONFORMANCE_DIR>/differential/pod`
//! (upstream's own binaries' outputs), byte-exact, through the library and through `istio-cni explain`; every
//! generated document accepted by the real `iptables-restore --test --noflush` / `ip6tables-restore` inside a
//! fresh network namespace; and every differential pod through a real ADD (root): our binary against the
//! API double, in a test-created namespace with the case's addresses on `eth0`.

use istio_cni::cni::{conf, K8sArgs};
use istio_cni::json;
use istio_cni::redirect::plan::{plan_pod, shortcut, Addresses, NodeEnv, Planned};
use istio_cni::redirect::{render, CaptureConfig, Documents, PodInfo};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::support::conformance_dir;

/// The case directories under `<dir>/<kind>`, sorted; fails loudly when there are none.
fn cases(kind: &str) -> Vec<PathBuf> {
    let base = conformance_dir().join(kind);
    let mut out: Vec<PathBuf> = std::fs::read_dir(&base)
        .unwrap_or_else(|e| panic!("read {}: {e}", base.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    out.sort();
    assert!(!out.is_empty(), "no {kind} vectors in {}", base.display());
    println!("{} {kind} vectors in {}", out.len(), base.display());
    out
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()))
}

fn name(p: &Path) -> String {
    p.file_name().unwrap().to_string_lossy().into_owned()
}

/// Whether a pod case expects an error, and the substring it must contain.
fn pod_expectation(case: &Path) -> Option<String> {
    let meta = json::parse_object(&read(&case.join("case.json")), "case.json").unwrap();
    match json::str_of(&meta, "expect") {
        Some("error") => Some(
            std::fs::read_to_string(case.join("expected.error.txt"))
                .map(|s| s.lines().next().unwrap_or("").to_string())
                .unwrap_or_default(),
        ),
        Some("rules") => None,
        other => panic!("{}: unknown expect {other:?}", case.display()),
    }
}

fn capture_docs(case: &Path) -> Documents {
    let o = json::parse_object(&read(&case.join("config.json")), "config.json").unwrap();
    let cfg = CaptureConfig::from_json(&o).unwrap_or_else(|e| panic!("{}: {e}", name(case)));
    render(&cfg).unwrap_or_else(|e| panic!("{}: {e}", name(case)))
}

/// The ADD pipeline for a pod case, through the library's one plan (as ADD composes it, with the pod's
/// `status.podIPs` for the namespace's addresses), with an empty node environment.
fn pod_docs(case: &Path) -> istio_cni::Result<Option<Documents>> {
    let netconf = conf::parse(&read(&case.join("conf.json")))?;
    let args = K8sArgs::parse(read(&case.join("cni_args.txt")).trim())?;
    if shortcut(&netconf, &args).is_some() {
        return Ok(None);
    }
    let pod = json::parse_object(&read(&case.join("pod.json")), "pod.json")?;
    let info = PodInfo::from_pod(&pod)?;
    let env = NodeEnv::take(&|_| None);
    match plan_pod(&info, Addresses::PodIps(&info.pod_ips), &env)? {
        Planned::Skip(_) => Ok(None),
        Planned::Rules(docs) => Ok(Some(docs)),
    }
}

fn expected_capture(case: &Path) -> (String, Option<String>) {
    let v6 = case.join("expected.v6.rules");
    (
        read(&case.join("expected.v4.rules")),
        v6.exists().then(|| read(&v6)),
    )
}

#[test]
fn capture_vectors_through_the_library() {
    let all = cases("capture");
    for case in &all {
        let docs = capture_docs(case);
        let (v4, v6) = expected_capture(case);
        assert_eq!(docs.v4, v4, "{}: IPv4 document", name(case));
        assert_eq!(docs.v6, v6, "{}: IPv6 document", name(case));
    }
    println!("{} capture vectors byte-exact", all.len());
}

/// The pod-format vectors: upstream's goldens and the differential cases.
const POD_KINDS: [&str; 2] = ["pod", "differential/pod"];

#[test]
fn pod_vectors_through_the_library() {
    let all: Vec<PathBuf> = POD_KINDS.iter().flat_map(|k| cases(k)).collect();
    for case in &all {
        match (pod_expectation(case), pod_docs(case)) {
            (None, Ok(Some(docs))) => {
                assert_eq!(
                    docs.v4,
                    read(&case.join("expected.rules")),
                    "{}",
                    name(case)
                );
                assert_eq!(docs.v6, None, "{}: pod goldens are IPv4 only", name(case));
            }
            (None, Ok(None)) => panic!("{}: expected rules, pod was not redirected", name(case)),
            (None, Err(e)) => panic!("{}: {e}", name(case)),
            (Some(want), Err(e)) => {
                assert!(
                    e.to_string().contains(&want),
                    "{}: {e} lacks {want:?}",
                    name(case)
                )
            }
            (Some(_), Ok(_)) => panic!("{}: expected an error", name(case)),
        }
    }
    println!("{} pod vectors checked", all.len());
}

/// Runs `istio-cni explain <args>`; returns (exit code, stdout, stderr).
fn explain(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_istio-cni-node"))
        .arg("istio-cni")
        .arg("explain")
        .args(args)
        .env_remove("CNI_COMMAND")
        .env_remove("ISTIO_OUTBOUND_OWNER_GROUPS")
        .env_remove("ISTIO_OUTBOUND_OWNER_GROUPS_EXCLUDE")
        .env_remove("ISTIO_OUTBOUND_IPV4_LOOPBACK_CIDR")
        .output()
        .expect("run istio-cni explain");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

fn strip_comments(s: &str) -> String {
    s.lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect()
}

#[test]
fn capture_vectors_through_explain() {
    let all = cases("capture");
    for case in &all {
        let cfg = case.join("config.json");
        let (code, out, err) = explain(&["--capture", cfg.to_str().unwrap()]);
        assert_eq!(code, 0, "{}: {err}", name(case));
        let (v4, v6) = expected_capture(case);
        assert_eq!(
            strip_comments(&out),
            v4 + &v6.unwrap_or_default(),
            "{}",
            name(case)
        );
    }
}

#[test]
fn pod_vectors_through_explain() {
    let all: Vec<PathBuf> = POD_KINDS.iter().flat_map(|k| cases(k)).collect();
    for case in &all {
        let pod = case.join("pod.json");
        let conf = case.join("conf.json");
        let (code, out, err) = explain(&[
            "--pod",
            pod.to_str().unwrap(),
            "--conf",
            conf.to_str().unwrap(),
        ]);
        match pod_expectation(case) {
            None => {
                assert_eq!(code, 0, "{}: {err}", name(case));
                assert_eq!(
                    strip_comments(&out),
                    read(&case.join("expected.rules")),
                    "{}",
                    name(case)
                );
            }
            Some(want) => {
                assert_ne!(code, 0, "{}: expected failure, got {out}", name(case));
                assert!(err.contains(&want), "{}: {err} lacks {want:?}", name(case));
                assert!(
                    out.is_empty(),
                    "{}: no rules on error, got {out}",
                    name(case)
                );
            }
        }
    }
}

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// Root-only tests: fail when not root, unless ISTIO_CNI_SKIP_ROOT_TESTS=1.
fn require_root(test: &str) -> bool {
    if is_root() {
        return true;
    }
    if std::env::var("ISTIO_CNI_SKIP_ROOT_TESTS").as_deref() == Ok("1") {
        println!("skipping {test}: needs root (ISTIO_CNI_SKIP_ROOT_TESTS=1)");
        return false;
    }
    panic!("{test} needs root (set ISTIO_CNI_SKIP_ROOT_TESTS=1 to skip)");
}

/// `<bin> --test --noflush` with `doc` on stdin, in a fresh network namespace and a private mount namespace
/// whose /etc/group also has the groups the owner-group vectors name (`java`, `ftp`).
fn restore_test(bin: &str, doc: &str, group_file: &Path) -> Result<(), String> {
    let mut child = Command::new("unshare")
        .args(["--net", "--mount", "--propagation", "private", "sh", "-c"])
        .arg("mount --bind \"$1\" /etc/group && exec \"$2\" --test --noflush")
        .arg("sh")
        .arg(group_file)
        .arg(bin)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("spawn unshare: {e}"))?;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(doc.as_bytes())
        .map_err(|e| format!("write stdin: {e}"))?;
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{bin} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

#[test]
fn every_generated_document_is_accepted_by_iptables_restore() {
    if !require_root("every_generated_document_is_accepted_by_iptables_restore") {
        return;
    }
    let tmp = std::env::temp_dir().join(format!(
        "istio-cni-conformance-group-{}",
        std::process::id()
    ));
    let mut groups = read(Path::new("/etc/group"));
    if !groups.ends_with('\n') && !groups.is_empty() {
        groups.push('\n');
    }
    for (g, id) in [("java", 30001), ("ftp", 30002)] {
        if !groups.lines().any(|l| l.starts_with(&format!("{g}:"))) {
            groups.push_str(&format!("{g}:x:{id}:\n"));
        }
    }
    std::fs::write(&tmp, groups).unwrap();
    let mut docs: Vec<(String, &str, String)> = Vec::new();
    for case in cases("capture") {
        let d = capture_docs(&case);
        docs.push((format!("capture/{}", name(&case)), "iptables-restore", d.v4));
        if let Some(v6) = d.v6 {
            docs.push((format!("capture/{}", name(&case)), "ip6tables-restore", v6));
        }
    }
    for case in POD_KINDS.iter().flat_map(|k| cases(k)) {
        if let Ok(Some(d)) = pod_docs(&case) {
            docs.push((format!("pod/{}", name(&case)), "iptables-restore", d.v4));
        }
    }
    // The harness itself must be able to fail.
    assert!(
        restore_test(
            "iptables-restore",
            "* nat\n-A OUTPUT -p tcp --dport 70000 -j RETURN\nCOMMIT\n",
            &tmp
        )
        .is_err(),
        "iptables-restore --test accepted an invalid document: the check is broken"
    );
    let mut failures = Vec::new();
    for (case, bin, doc) in &docs {
        if let Err(e) = restore_test(bin, doc, &tmp) {
            failures.push(format!("{case} ({bin}): {e}"));
        }
    }
    let _ = std::fs::remove_file(&tmp);
    assert!(
        failures.is_empty(),
        "rejected documents:\n{}",
        failures.join("\n")
    );
    println!(
        "{} documents accepted by iptables-restore --test",
        docs.len()
    );
}

/// Upstream's TestIPTablesRuleGeneration checks a pod with `runAsUser: 0` and no group against the basic
/// golden (0 counts as unset): derive that case from pod/basic.
#[test]
fn run_as_user_zero_gives_the_basic_rules() {
    let case = conformance_dir().join("pod/basic");
    let text = read(&case.join("pod.json"));
    let mut pod = json::parse_object(&text, "pod.json").unwrap();
    let spec = match pod.get_mut("spec") {
        Some(json::Value::Object(s)) => s,
        _ => panic!("pod/basic: no spec"),
    };
    let containers = match spec.get_mut("containers") {
        Some(json::Value::Array(a)) => a,
        _ => panic!("pod/basic: no containers"),
    };
    let mut patched = 0;
    for c in containers.iter_mut() {
        if let json::Value::Object(c) = c {
            if json::str_of(c, "name") == Some("istio-proxy") {
                let sc = json::parse("{\"runAsUser\":0}", "sc").unwrap();
                c.insert("securityContext".to_string(), sc);
                patched += 1;
            }
        }
    }
    assert_eq!(patched, 1);
    let info = PodInfo::from_pod(&pod).unwrap();
    assert_eq!(info.proxy.as_ref().unwrap().run_as_user, Some(0));
    let env = NodeEnv::take(&|_| None);
    match plan_pod(&info, Addresses::PodIps(&info.pod_ips), &env).unwrap() {
        Planned::Rules(docs) => assert_eq!(docs.v4, read(&case.join("expected.rules"))),
        Planned::Skip(why) => panic!("pod/basic with runAsUser 0 not redirected: {why}"),
    }
}

/// The CLI's failure and skip paths, on variants of pod/basic: an invalid annotation exits 1 with the
/// annotation named on stderr and nothing on stdout; a skipped pod prints one `#` line and exits 0.
#[test]
fn explain_cli_errors_and_skips() {
    let case = conformance_dir().join("pod/basic");
    let text = read(&case.join("pod.json"));
    let dir = std::env::temp_dir().join(format!("istio-cni-explain-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = text.replace(
        "\"sidecar.istio.io/status\": \"true\"",
        "\"sidecar.istio.io/status\": \"true\", \"traffic.sidecar.istio.io/includeInboundPorts\": \"80 -j ACCEPT\"",
    );
    assert_ne!(bad, text, "pod/basic changed shape");
    let bad_path = dir.join("bad.json");
    std::fs::write(&bad_path, bad).unwrap();
    let (code, out, err) = explain(&["--pod", bad_path.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.is_empty(), "{out}");
    assert!(
        err.contains("traffic.sidecar.istio.io/includeInboundPorts")
            && err.contains("80 -j ACCEPT"),
        "{err}"
    );

    let skip = text.replace("\"sidecar.istio.io/status\": \"true\"", "\"x\": \"y\"");
    let skip_path = dir.join("skip.json");
    std::fs::write(&skip_path, skip).unwrap();
    let (code, out, err) = explain(&["--pod", skip_path.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        "# no redirection: pod has no sidecar.istio.io/status annotation\n"
    );

    let (code, _, err) = explain(&["--pod", "/nonexistent/pod.json"]);
    assert_eq!(code, 1);
    assert!(err.contains("/nonexistent/pod.json"), "{err}");
    let (code, _, _) = explain(&[]);
    assert_eq!(code, 2);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `<dump>` without comments, counters and empty tables' noise: the lines `iptables-save` prints for rules and
/// chains, for comparing two namespaces.
fn rule_lines(ns: &crate::support::Netns, prog: &str) -> String {
    ns.saved_rules(prog)
}

/// A case's `case.json`.
fn case_meta(case: &Path) -> json::Object {
    json::parse_object(&read(&case.join("case.json")), "case.json").unwrap()
}

fn str_list(o: &json::Object, key: &str) -> Vec<String> {
    match o.get(key) {
        Some(json::Value::Array(a)) => a
            .iter()
            .map(|v| match v {
                json::Value::String(s) => s.clone(),
                other => panic!("{key}: not a string: {other:?}"),
            })
            .collect(),
        other => panic!("case.json {key}: not a list: {other:?}"),
    }
}

/// `ip -o addr show dev <dev>` as `addr/prefix` strings, in the kernel's order.
fn addresses_on(ns: &crate::support::Netns, dev: &str) -> Vec<String> {
    ns.exec_ok(&["ip", "-o", "addr", "show", "dev", dev])
        .lines()
        .filter_map(|l| {
            let t: Vec<&str> = l.split_whitespace().collect();
            t.iter()
                .position(|x| *x == "inet" || *x == "inet6")
                .and_then(|i| t.get(i + 1))
                .map(|s| s.to_string())
        })
        .collect()
}

/// Every differential pod case through a real ADD of our binary, as upstream's was run: a fresh namespace
/// whose `eth0` gets `netns_addresses` in that order, the pod served by the API double, the case's conf with
/// our run dir. ADD exits 0 and prints the prevResult; the namespace then holds exactly the IPv4 rules
/// `expected.rules` gives when restored into a fresh namespace, no IPv6 rules unless `expect_ipv6_rules`, and
/// `lo` has exactly `expect_lo_addresses`.
#[test]
fn differential_pod_vectors_through_add() {
    if !require_root("differential_pod_vectors_through_add") {
        return;
    }
    let plugins = crate::support::PluginDir::new();
    let run = crate::support::TempDir::new("diffrun");
    let srv = kube_double::Server::start(kube_double::Options::default()).expect("API double");
    srv.write_kubeconfig(&run.join("istio-cni-kubeconfig"))
        .unwrap();
    run.write("iptables-backend", "nft\n");
    let all = cases("differential/pod");
    for case in &all {
        let n = name(case);
        let meta = case_meta(case);
        assert_eq!(json::str_of(&meta, "expect"), Some("rules"), "{n}");
        srv.add_pod(&read(&case.join("pod.json")))
            .unwrap_or_else(|e| panic!("{n}: pod.json: {e}"));
        let conf_text = read(&case.join("conf.json"))
            .replace("/var/run/istio-cni", run.path().to_str().unwrap());
        let conf = json::parse_object(&conf_text, "conf.json").unwrap();
        let prev = conf
            .get("prevResult")
            .cloned()
            .expect("conf has a prevResult");

        let ns = crate::support::Netns::new("diff");
        // A veth pair (the kernel here may lack the dummy driver); the peer stays down and addressless.
        ns.exec_ok(&[
            "ip", "link", "add", "eth0", "type", "veth", "peer", "name", "peer0",
        ]);
        for a in str_list(&meta, "netns_addresses") {
            let mut argv = vec!["ip", "addr", "add", a.as_str(), "dev", "eth0"];
            if a.contains(':') {
                argv.push("nodad");
            }
            ns.exec_ok(&argv);
        }
        ns.exec_ok(&["ip", "link", "set", "eth0", "up"]);

        let args = read(&case.join("cni_args.txt")).trim().to_string();
        let env = crate::support::CniEnv::new(
            "ADD",
            &format!("ctr-{n}"),
            &ns.path(),
            &plugins.cni_path(),
        )
        .with_args(&args);
        let out = crate::support::run_plugin(
            &plugins.istio_cni(),
            "istio-cni",
            &env,
            conf_text.as_bytes(),
        );
        assert_eq!(out.code, 0, "{n}: ADD failed:\n{out}");
        crate::support::assert_json_eq(
            &out.json(),
            &prev,
            &format!("{n}: ADD result vs prevResult"),
        );

        let reference = crate::support::Netns::new("diffref");
        let mut child = Command::new("ip")
            .args([
                "netns",
                "exec",
                reference.name(),
                "iptables-nft-restore",
                "--noflush",
            ])
            .stdin(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(read(&case.join("expected.rules")).as_bytes())
            .unwrap();
        assert!(
            child.wait().unwrap().success(),
            "{n}: expected.rules did not restore"
        );
        let want = rule_lines(&reference, "iptables-nft-save");
        assert!(want.contains(":ISTIO_OUTPUT"), "{n}: {want}");
        assert_eq!(
            rule_lines(&ns, "iptables-nft-save"),
            want,
            "{n}: IPv4 rules"
        );

        let v6 = rule_lines(&ns, "ip6tables-nft-save");
        let expect_v6 = matches!(meta.get("expect_ipv6_rules"), Some(json::Value::Bool(true)));
        assert!(
            !expect_v6,
            "{n}: no case expects IPv6 rules; extend this test first"
        );
        assert!(
            !v6.contains("ISTIO") && !v6.lines().any(|l| l.starts_with("-A ")),
            "{n}: IPv6 rules were programmed:\n{v6}"
        );
        let mut lo = addresses_on(&ns, "lo");
        let mut want_lo = str_list(&meta, "expect_lo_addresses");
        lo.sort();
        want_lo.sort();
        assert_eq!(lo, want_lo, "{n}: addresses on lo");
    }
    println!("{} differential pod vectors through ADD", all.len());
}
