//! `istio-validation`'s command line against upstream's: every `istio-iptables` flag of Istio 1.9 to
//! master in each of its forms, values of the wrong type, the injector's argument lists, `-u` lists and
//! the variables. The flag list here is written from upstream's `root.go` of each release, not from
//! [`super::flags::FLAGS`], so the two check each other.

use super::*;
use crate::settings::tests::{env_of, v, words};

/// (long, shorthand, a valid value; "" for a boolean).
const UPSTREAM: &[(&str, Option<char>, &str)] = &[
    ("envoy-port", Some('p'), "15001"),
    ("inbound-capture-port", Some('z'), "15006"),
    ("inbound-tunnel-port", Some('e'), "15008"),
    ("proxy-uid", Some('u'), "1337"),
    ("proxy-gid", Some('g'), "1337"),
    ("istio-inbound-interception-mode", Some('m'), "TPROXY"),
    ("istio-inbound-ports", Some('b'), "*"),
    ("istio-local-exclude-ports", Some('d'), "15090,15021,15020"),
    ("istio-exclude-interfaces", Some('c'), "eth1"),
    ("istio-service-cidr", Some('i'), "*"),
    ("istio-service-exclude-cidr", Some('x'), "10.0.0.0/8"),
    ("istio-outbound-ports", Some('q'), "80,443"),
    ("istio-local-outbound-ports-exclude", Some('o'), "25"),
    ("kube-virt-interfaces", Some('k'), "tap0"),
    ("istio-inbound-tproxy-mark", Some('t'), "1337"),
    ("istio-inbound-tproxy-route-table", Some('r'), "133"),
    ("dry-run", Some('n'), ""),
    ("restore-format", Some('f'), ""),
    ("iptables-probe-port", None, "15002"),
    ("probe-timeout", None, "5s"),
    ("skip-rule-apply", None, ""),
    ("run-validation", None, ""),
    ("redirect-dns", None, ""),
    ("drop-invalid", None, ""),
    ("dual-stack", None, ""),
    ("capture-all-dns", None, ""),
    ("network-namespace", None, "/var/run/netns/x"),
    ("cni-mode", None, ""),
    ("reconcile", None, ""),
    ("cleanup-only", None, ""),
    ("force-apply", None, ""),
    ("native-nftables", None, ""),
    ("force-iptables-binary", None, "nft"),
    ("iptables-trace-logging", None, ""),
    ("output-paths", None, "/tmp/rules"),
    ("host-nsenter-exec", None, ""),
    ("iptables-version", None, "1.8.7"),
    ("log_output_level", None, "default:info"),
    ("log_stacktrace_level", None, "default:none"),
    ("log_caller", None, "default"),
    ("log_target", None, "stdout"),
    ("log_as_json", None, ""),
    ("log_rotate", None, "/tmp/log"),
    ("log_rotate_max_age", None, "30"),
    ("log_rotate_max_backups", None, "1000"),
    ("log_rotate_max_size", None, "104857600"),
    ("vklog", None, "9"),
];

fn parse(args: &[String]) -> std::result::Result<Options, Refusal> {
    Options::parse(args, &|_| None)
}

/// Every upstream flag in each form pflag takes: `--f=v`, `--f v`, `-c v`, `-cv`, `-c=v`; a boolean bare,
/// `=true`, `=false`.
#[test]
fn every_upstream_flag_is_accepted_in_each_form() {
    for &(long, short, val) in UPSTREAM {
        let mut forms: Vec<Vec<String>> = Vec::new();
        if val.is_empty() {
            forms.push(vec![format!("--{long}")]);
            forms.push(vec![format!("--{long}=true")]);
            forms.push(vec![format!("--{long}=false")]);
            if let Some(c) = short {
                forms.push(vec![format!("-{c}")]);
                forms.push(vec![format!("-{c}=false")]);
            }
        } else {
            forms.push(vec![format!("--{long}={val}")]);
            forms.push(vec![format!("--{long}"), val.to_string()]);
            if let Some(c) = short {
                forms.push(vec![format!("-{c}"), val.to_string()]);
                forms.push(vec![format!("-{c}{val}")]);
                forms.push(vec![format!("-{c}={val}")]);
            }
        }
        for form in forms {
            let r = parse(&form);
            assert!(r.is_ok(), "{form:?}: {}", r.unwrap_err());
        }
    }
}

/// A value pflag (or Istio's logging) refuses for the flag's type is refused with upstream's 255
/// (`pilot-agent` exits -1 on a cobra error); so are an unknown flag and a missing value.
#[test]
fn wrong_values_and_unknown_flags_exit_255_naming_the_flag() {
    for (args, names) in [
        (vec!["--iptables-probe-port=x"], "--iptables-probe-port"),
        (
            vec!["--iptables-probe-port", "70000"],
            "--iptables-probe-port",
        ),
        (vec!["--probe-timeout=5"], "--probe-timeout"),
        (vec!["--dry-run=maybe"], "--dry-run"),
        (vec!["-n=maybe"], "dry-run"),
        (
            vec!["--log_output_level=default:loud"],
            "--log_output_level",
        ),
        (
            vec!["--log_stacktrace_level=a:b:c"],
            "--log_stacktrace_level",
        ),
        (vec!["--log_rotate_max_age=x"], "--log_rotate_max_age"),
        (vec!["--vklog=high"], "--vklog"),
        (vec!["--nope"], "--nope"),
        (vec!["--trace-logging"], "--trace-logging"),
        (vec!["-a"], "'a'"),
        (vec!["-z"], "--inbound-capture-port"),
        (vec!["--envoy-port"], "--envoy-port"),
    ] {
        let e = parse(&v(&args)).unwrap_err();
        assert_eq!(e.code(), 255, "{args:?}: {e}");
        assert!(e.to_string().contains(names), "{args:?}: {e}");
    }
}

/// Values upstream's flag parser takes but the check cannot use, and upstream's `Validate` refusals: 1.
#[test]
fn bad_configuration_exits_1() {
    for (args, env, names) in [
        (vec!["-p", "x"], vec![], "--envoy-port"),
        (vec!["-z", "0"], vec![], "--inbound-capture-port"),
        (
            vec!["--iptables-probe-port=0"],
            vec![],
            "--iptables-probe-port",
        ),
        (
            vec![],
            vec![("INBOUND_CAPTURE_PORT", "x")],
            "INBOUND_CAPTURE_PORT",
        ),
        (
            vec!["--force-iptables-binary=iptables"],
            vec![],
            "--force-iptables-binary",
        ),
        (
            vec![],
            vec![("FORCE_IPTABLES_BINARY", "xtables")],
            "FORCE_IPTABLES_BINARY",
        ),
        (
            vec![],
            vec![("HOST_IPV4_LOOPBACK_CIDR", "10.0.0.0/8")],
            "HOST_IPV4_LOOPBACK_CIDR",
        ),
        (
            vec![],
            vec![("HOST_IPV4_LOOPBACK_CIDR", "127.0.0.1/7")],
            "HOST_IPV4_LOOPBACK_CIDR",
        ),
    ] {
        let e = Options::parse(&v(&args), &env_of(&env)).unwrap_err();
        assert_eq!(e.code(), 1, "{args:?} {env:?}: {e}");
        assert!(e.to_string().contains(names), "{args:?} {env:?}: {e}");
    }
    let ok = Options::parse(&[], &env_of(&[("HOST_IPV4_LOOPBACK_CIDR", "127.0.0.1/8")]));
    assert!(ok.is_ok());
}

/// The injector's arguments as each release's `injection-template.yaml` renders them, with the
/// conditional flags present (`-q`, `-o`, `-k`, `-c`, `--log_as_json`, `--native-nftables`).
#[test]
fn the_injectors_arguments_of_several_releases_parse() {
    let mut releases: Vec<(&str, Vec<String>)> = vec![
        (
            "1.9",
            words(
                "-p 15001 -z 15006 -u 1337 -m REDIRECT -i * -x  -b * -d 15090,15021,15020 \
                 -q 443 -o 25 -k tap0 --run-validation --skip-rule-apply",
            ),
        ),
        (
            "1.20",
            words(
                "-p 15001 -z 15006 -u 1337 -m REDIRECT -i * -x  -b * -d 15090,15021,15020 \
                 -q 443 -o 25 -k tap0 -c eth1 --log_output_level=default:info --log_as_json \
                 --run-validation --skip-rule-apply",
            ),
        ),
        (
            "master",
            words(
                "-p 15001 -z 15006 -u 1337 -m REDIRECT -i * -x  -b * -d 15090,15021,15020 \
                 -o 25 -k tap0 -c eth1 --log_output_level=default:info --run-validation \
                 --skip-rule-apply --native-nftables",
            ),
        ),
    ];
    // An empty `global.logging.level` renders `--log_output_level=`: upstream keeps its defaults.
    releases.push((
        "master, no log level",
        words("-p 15001 -z 15006 -u 1337 -m REDIRECT -i * -x  -b * -d 15090,15021 --log_output_level= --run-validation --skip-rule-apply"),
    ));
    // `-u` from the pod's runAsUser (1.20 on) and a TPROXY pod.
    releases.push((
        "master, OpenShift",
        words("-p 15001 -z 15006 -u 1000680000 -m TPROXY -i * -x  -b * -d 15090,15021,15020 --run-validation --skip-rule-apply"),
    ));
    for (release, args) in releases {
        let o = parse(&args).unwrap_or_else(|e| panic!("{release}: {e}"));
        assert_eq!(
            (o.envoy_port, o.inbound_capture_port, o.probe_port),
            (15001, 15006, 15002),
            "{release}"
        );
    }
}

/// `-u 3,4` (a list upstream exempts uid by uid) is accepted; started as root the check becomes the
/// first.
#[test]
fn a_uid_list_is_accepted() {
    let o = parse(&words("-u 3,4 --run-validation")).unwrap();
    assert_eq!(o.proxy_ids().unwrap(), (3, 3));
    let o = parse(&words("-u 3,4 -g 5,6")).unwrap();
    assert_eq!(o.proxy_ids().unwrap(), (3, 5));
    let o = parse(&words("-u istio-proxy")).unwrap();
    assert!(o
        .proxy_ids()
        .unwrap_err()
        .to_string()
        .contains("--proxy-uid"));
}

/// pflag's grouped shorthands: booleans first, a valued one last takes the rest of the word.
#[test]
fn grouped_shorthands() {
    let o = parse(&v(&["-nfp15009", "-nz=15010"])).unwrap();
    assert_eq!((o.envoy_port, o.inbound_capture_port), (15009, 15010));
    assert!(parse(&v(&["-np"])).is_err());
}

/// The variables upstream binds: `PROXY_UID`, `ISTIO_DUAL_STACK` over `DUAL_STACK`; a value of the wrong
/// type is skipped with a warning (upstream's `BindEnv` drops `Set`'s error), a flag wins.
#[test]
fn variables_as_upstream() {
    let env = env_of(&[
        ("PROXY_UID", "7,8"),
        ("DUAL_STACK", "false"),
        ("ISTIO_DUAL_STACK", "true"),
        ("PROBE_TIMEOUT", "soon"),
        ("IPTABLES_PROBE_PORT", "0x3a9b"),
        ("ISTIO_META_DNS_CAPTURE", "maybe"),
    ]);
    let o = Options::parse(&[], &env).unwrap();
    assert_eq!(o.proxy_ids().unwrap(), (7, 7));
    assert!(o.dual_stack);
    assert_eq!(o.probe_timeout, Duration::from_secs(5));
    assert_eq!(o.probe_port, 15003);
    assert_eq!(o.warnings.len(), 1, "{:?}", o.warnings);
    assert!(o.warnings[0].contains("PROBE_TIMEOUT"));
    let o = Options::parse(&v(&["--dual-stack=false", "-u", "9"]), &env).unwrap();
    assert!(!o.dual_stack);
    assert_eq!(o.proxy_ids().unwrap(), (9, 9));
}
