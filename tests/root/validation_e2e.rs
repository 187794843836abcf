//! The `istio-validation` applet in real network namespaces (root): 126 without redirection rules, 0 with
//! upstream's own rule goldens applied (IPv4 and IPv6), run both as root (the applet drops to the proxy
//! uid) and as uid 1337 via setpriv.

use crate::support::repair::{show, BIN};
use crate::support::{conformance_dir, require_root};
use std::path::PathBuf;
use std::process::{Command, Output};

fn capture_case(case: &str, file: &str) -> PathBuf {
    let p = conformance_dir().join("capture").join(case).join(file);
    assert!(
        p.is_file(),
        "conformance vectors missing: {} not found (set CONFORMANCE_DIR)",
        p.display()
    );
    p
}

/// Runs `script` in a fresh network namespace with `lo` up; `$BIN` is the binary.
fn in_netns(script: &str) -> Output {
    Command::new("unshare")
        .args(["-n", "sh", "-ec", &format!("ip link set lo up\n{script}")])
        .env("BIN", BIN)
        .output()
        .expect("run unshare")
}

#[test]
fn without_rules_exits_126_with_a_clear_message() {
    if !require_root() {
        return;
    }
    let o = in_netns(r#"exec "$BIN" istio-validation --probe-timeout 1s"#);
    assert_eq!(o.status.code(), Some(126), "{}", show(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("validation timeout") && err.contains("127.0.0.6:15002"),
        "{}",
        show(&o)
    );
    assert!(
        err.contains("workload is not ready for Istio"),
        "{}",
        show(&o)
    );
}

#[test]
fn upstream_rules_pass_as_root_and_as_the_proxy_uid() {
    if !require_root() {
        return;
    }
    let rules = capture_case("inbound-ports-wildcard", "expected.v4.rules");
    // The injected container's arguments, verbatim; started as root, the applet switches to 1337.
    let o = in_netns(&format!(
        r#"iptables-restore --noflush < {rules}
"$BIN" istio-validation -p 15001 -z 15006 -u 1337 -m REDIRECT -i '*' -x "" -b '*' -d 15090,15021,15020 --log_output_level=default:info --run-validation --skip-rule-apply
setpriv --reuid 1337 --regid 1337 --clear-groups "$BIN" istio-validation --probe-timeout 10s"#,
        rules = rules.display()
    ));
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        out.matches("Validation passed, iptables rules established")
            .count(),
        2,
        "{}",
        show(&o)
    );
}

#[test]
fn root_traffic_is_not_redirected_so_uid_0_fails() {
    if !require_root() {
        return;
    }
    // With -u 0 the applet stays root, and the rules only redirect uid 1337: the check must fail.
    let rules = capture_case("inbound-ports-wildcard", "expected.v4.rules");
    let o = in_netns(&format!(
        r#"iptables-restore --noflush < {}
exec "$BIN" istio-validation -u 0 --probe-timeout 1s"#,
        rules.display()
    ));
    assert_eq!(o.status.code(), Some(126), "{}", show(&o));
}

#[test]
fn ipv6_pod_probes_colon6() {
    if !require_root() {
        return;
    }
    let v6 = capture_case("ipv6-inbound-ports", "expected.v6.rules");
    let v4 = capture_case("ipv6-inbound-ports", "expected.v4.rules");
    let o = in_netns(&format!(
        r#"ip link add e0 type veth peer name e1
ip link set e0 up
ip addr add fd00::2/64 dev e0 nodad
ip addr add ::6/128 dev lo nodad
rc=0; "$BIN" istio-validation --probe-timeout 1s || rc=$?
echo "before=$rc"
ip6tables-restore --noflush < {v6}
iptables-restore --noflush < {v4}
exec "$BIN" istio-validation --probe-timeout 10s"#,
        v6 = v6.display(),
        v4 = v4.display()
    ));
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("before=126"), "{}", show(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("::6:15002"),
        "{}",
        show(&o)
    );
}

/// Bad input exits with upstream's codes: a flag istio-iptables does not know, or a value not of its flag's
/// type, 255 (`pilot-agent` exits -1 on a cobra error); a value the check cannot use, 1. Each message
/// names the flag.
#[test]
fn bad_flags_exit_as_upstream() {
    for (args, code, names) in [
        (&["--probe-timeout", "soon"][..], 255, "--probe-timeout"),
        (&["--bogus"], 255, "--bogus"),
        (&["-p", "x"], 1, "--envoy-port"),
    ] {
        let o = Command::new(BIN)
            .arg("istio-validation")
            .args(args)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(code), "{args:?}: {}", show(&o));
        assert!(
            String::from_utf8_lossy(&o.stderr).contains(names),
            "{args:?}: {}",
            show(&o)
        );
    }
}

/// Master's injected arguments with every conditional flag the template adds (`-o`, `-k`, `-c`,
/// `--log_as_json`, `--native-nftables`), flags of older releases (`-q`, `-f`, `--iptables-trace-logging`)
/// and a uid list `-u 1337,1338`: accepted, and started as root the check becomes the first uid and
/// passes on upstream's rules.
#[test]
fn every_upstream_flag_and_a_uid_list_pass_on_upstream_rules() {
    if !require_root() {
        return;
    }
    let rules = capture_case("inbound-ports-wildcard", "expected.v4.rules");
    let o = in_netns(&format!(
        r#"iptables-restore --noflush < {rules}
exec "$BIN" istio-validation -p 15001 -z 15006 -u 1337,1338 -m REDIRECT -i '*' -x "" -b '*' -d 15090,15021,15020 -q 443 -o 25 -k tap0 -c eth1 -f --iptables-trace-logging --log_output_level=default:info --log_as_json --run-validation --skip-rule-apply --native-nftables --dual-stack --probe-timeout 10s"#,
        rules = rules.display()
    ));
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("checking as the proxy uid 1337 gid 1337"),
        "{}",
        show(&o)
    );
}

/// "Validation passed" with stdout a pipe whose reader is gone (closed before the start): still exit 0,
/// no panic (`println!` panics on EPIPE); with stdout a full device, the write error is said, exit 1.
#[test]
fn a_closed_stdout_is_still_a_pass() {
    if !require_root() {
        return;
    }
    let rules = capture_case("inbound-ports-wildcard", "expected.v4.rules");
    let script = format!(
        r#"ip link set lo up
iptables-restore --noflush < {rules}
"$BIN" istio-validation --probe-timeout 10s
"$BIN" istio-validation --probe-timeout 10s > /dev/full || echo "full: $?" >&2"#,
        rules = rules.display()
    );
    let (r, w) = nix::unistd::pipe().unwrap();
    drop(r);
    let o = Command::new("unshare")
        .args(["-n", "sh", "-ec", &script])
        .env("BIN", BIN)
        .stdout(std::process::Stdio::from(w))
        .output()
        .expect("run unshare");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(
        err.contains("istio-validation: write to stdout: No space left on device")
            && err.contains("full: 1"),
        "{err}"
    );
}

/// A listener bound in `ns` (a thread enters it; the socket stays there).
fn listen_in(ns: &crate::support::Netns, addr: &str) -> std::net::TcpListener {
    let (path, addr) = (ns.path(), addr.to_string());
    std::thread::spawn(move || {
        let f = std::fs::File::open(&path).expect("open the netns");
        nix::sched::setns(&f, nix::sched::CloneFlags::CLONE_NEWNET).expect("enter the netns");
        std::net::TcpListener::bind(addr).expect("bind")
    })
    .join()
    .expect("listener thread")
}

/// Something already listening where the probe dials (0.0.0.0:15002 takes 127.0.0.6:15002), and no rules:
/// every dial connects, straight to it. That is no redirection: exit 126, and the message says the dial
/// connected to a listener there, not "no attempt" (what it said before, with every attempt connected).
#[test]
fn a_listener_on_the_probe_port_is_no_redirection_and_is_named() {
    if !require_root() {
        return;
    }
    let ns = crate::support::Netns::new("vldprobe");
    let _squat = listen_in(&ns, "0.0.0.0:15002");
    let o = ns.exec(&[BIN, "istio-validation", "--probe-timeout", "2s"]);
    assert_eq!(o.status.code(), Some(126), "{}", show(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("validation timeout")
            && err.contains("127.0.0.6:15002 connected")
            && err.contains("not redirected"),
        "{}",
        show(&o)
    );
    assert!(!err.contains("no attempt"), "{}", show(&o));
}
