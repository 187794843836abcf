use super::*;
use crate::redirect::capture::CaptureConfig;
use crate::redirect::pod::ProxyContainer;
use crate::redirect::rules::render;

pub(super) fn pod(annotations: &[(&str, &str)]) -> PodInfo {
    let mut p = PodInfo {
        name: "p".into(),
        namespace: "ns".into(),
        containers: vec!["app".into(), "istio-proxy".into()],
        proxy: Some(ProxyContainer::default()),
        ..PodInfo::default()
    };
    p.annotations
        .insert("sidecar.istio.io/status".into(), "{}".into());
    for (k, v) in annotations {
        p.annotations.insert(k.to_string(), v.to_string());
    }
    p
}

pub(super) fn redirect(annotations: &[(&str, &str)]) -> Redirect {
    Redirect::from_pod(&pod(annotations)).unwrap()
}

pub(super) fn error(annotations: &[(&str, &str)]) -> (String, String, String) {
    match Redirect::from_pod(&pod(annotations)) {
        Err(Error::Annotation { key, value, reason }) => (key, value, reason),
        other => panic!("{annotations:?}: expected an annotation error, got {other:?}"),
    }
}

#[test]
fn defaults() {
    let r = redirect(&[]);
    assert_eq!(r.mode, InterceptionMode::Redirect);
    assert_eq!((r.uid, r.gid), (1337, 1337));
    assert_eq!(r.include_ip_ranges, IpRanges::All);
    assert!(r.exclude_ip_ranges.is_empty());
    assert_eq!(r.include_inbound_ports, Ports::All);
    assert_eq!(r.exclude_inbound_ports, vec![15020, 15021, 15090]);
    assert!(r.include_outbound_ports.is_empty());
    assert_eq!(r.exclude_outbound_ports, vec![15020]);
    assert!(r.exclude_interfaces.is_empty() && r.reroute_virtual_interfaces.is_empty());
    assert!(!r.dns_redirect && !r.dual_stack && !r.invalid_drop);
}

// Upstream plugin_test.go TestCmdAddTwoContainers* and Test_dedupPorts.
#[test]
fn upstream_port_cases() {
    assert_eq!(
        redirect(&[(INCLUDE_INBOUND_PORTS, "*")]).include_inbound_ports,
        Ports::All
    );
    assert_eq!(
        redirect(&[(INCLUDE_INBOUND_PORTS, "")]).include_inbound_ports,
        Ports::List(vec![])
    );
    assert_eq!(
        redirect(&[(EXCLUDE_INBOUND_PORTS, "")]).exclude_inbound_ports,
        vec![15020, 15021, 15090]
    );
    assert_eq!(
        redirect(&[(EXCLUDE_INBOUND_PORTS, "3306")]).exclude_inbound_ports,
        vec![3306, 15020, 15021, 15090]
    );
    // Order-preserving dedup, first occurrence kept.
    assert_eq!(
        redirect(&[(EXCLUDE_INBOUND_PORTS, "15021, 80,15021,3306 ")]).exclude_inbound_ports,
        vec![15021, 80, 3306, 15020, 15090]
    );
    // The annotation replaces the outbound default.
    assert_eq!(
        redirect(&[(EXCLUDE_OUTBOUND_PORTS, "9000")]).exclude_outbound_ports,
        vec![9000]
    );
    assert!(redirect(&[(EXCLUDE_OUTBOUND_PORTS, "")])
        .exclude_outbound_ports
        .is_empty());
    assert_eq!(
        redirect(&[(INCLUDE_OUTBOUND_PORTS, "80, 443")]).include_outbound_ports,
        vec![80, 443]
    );
    assert_eq!(
        redirect(&[(INCLUDE_INBOUND_PORTS, " 80 ,443")]).include_inbound_ports,
        Ports::List(vec![80, 443])
    );
}

#[test]
fn cidrs_and_modes() {
    let r = redirect(&[
        (INTERCEPTION_MODE, "TPROXY"),
        (INCLUDE_OUTBOUND_IP_RANGES, "10.0.0.1/8,fd00::/8"),
        (EXCLUDE_OUTBOUND_IP_RANGES, "10.1.0.0/16"),
    ]);
    assert_eq!(r.mode, InterceptionMode::Tproxy);
    match &r.include_ip_ranges {
        IpRanges::List(l) => {
            assert_eq!(l.len(), 2);
            assert_eq!(l[0].to_string(), "10.0.0.1/8");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(r.exclude_ip_ranges.len(), 1);
    assert_eq!(
        redirect(&[(INCLUDE_OUTBOUND_IP_RANGES, "")]).include_ip_ranges,
        IpRanges::List(vec![])
    );
    assert_eq!(
        redirect(&[(INTERCEPTION_MODE, "REDIRECT")]).mode,
        InterceptionMode::Redirect
    );
}

#[test]
fn uid_gid_rules() {
    let with = |u: Option<i64>, g: Option<i64>| {
        let mut p = pod(&[]);
        let proxy = p.proxy.as_mut().unwrap();
        proxy.run_as_user = u;
        proxy.run_as_group = g;
        Redirect::from_pod(&p).map(|r| (r.uid, r.gid))
    };
    assert_eq!(with(None, None).unwrap(), (1337, 1337));
    assert_eq!(with(Some(0), None).unwrap(), (1337, 1337));
    assert_eq!(with(Some(0), Some(0)).unwrap(), (1337, 1337));
    assert_eq!(with(Some(1000), None).unwrap(), (1000, 1337));
    assert_eq!(with(None, Some(2000)).unwrap(), (1337, 2000));
    assert_eq!(
        with(Some(1000670000), Some(1000670001)).unwrap(),
        (1000670000, 1000670001)
    );
    assert!(with(Some(-5), None).is_err());
    assert!(with(None, Some(1 << 40)).is_err());
}

#[test]
fn proxy_env_flags_parse_bool_and_warn() {
    let with = |k: &str, v: &str| {
        let mut p = pod(&[]);
        p.proxy.as_mut().unwrap().env.insert(k.into(), v.into());
        Redirect::from_pod(&p).unwrap()
    };
    assert!(with("ISTIO_META_DNS_CAPTURE", "true").dns_redirect);
    assert!(with("ISTIO_META_DNS_CAPTURE", "1").dns_redirect);
    assert!(!with("ISTIO_META_DNS_CAPTURE", "yes").dns_redirect);
    assert!(with("ISTIO_DUAL_STACK", "T").dual_stack);
    assert!(!with("ISTIO_DUAL_STACK", "").dual_stack);
    assert!(with("INVALID_DROP", "TRUE").invalid_drop);
    assert!(!with("INVALID_DROP", "false").invalid_drop);
    // ISTIO_META_DNS_AUTO_ALLOCATE is not read.
    let r = with("ISTIO_META_DNS_AUTO_ALLOCATE", "true");
    assert!(!r.dns_redirect);
}

#[test]
fn reroute_prefers_the_new_key_then_kubevirt() {
    let names = |r: Redirect| -> Vec<String> {
        r.reroute_virtual_interfaces
            .iter()
            .map(|i| i.to_string())
            .collect()
    };
    assert_eq!(
        names(redirect(&[(KUBEVIRT_INTERFACES, "net1, net2")])),
        vec!["net1", "net2"]
    );
    assert_eq!(
        names(redirect(&[
            (REROUTE_VIRTUAL_INTERFACES, "eth1"),
            (KUBEVIRT_INTERFACES, "bad name!")
        ])),
        vec!["eth1"]
    );
    // An empty new key still wins over the deprecated one.
    assert!(names(redirect(&[
        (REROUTE_VIRTUAL_INTERFACES, ""),
        (KUBEVIRT_INTERFACES, "net1")
    ]))
    .is_empty());
    let (k, _, _) = error(&[(KUBEVIRT_INTERFACES, "net1,")]);
    assert_eq!(k, KUBEVIRT_INTERFACES);
}

/// Every bad-value class, for every annotation it applies to: the error names the key and the value.
#[test]
fn bad_values_fail_naming_the_annotation() {
    let cidr_bad = [
        "10.0.0.0/8 -j ACCEPT",
        "10.0.0.0/8, 10.1.0.0/16",
        "10.0.0.0/8,",
        "10.0.0.0/8\n-A OUTPUT -j ACCEPT",
        "10.0.0.0/33",
        "10.0.0.256/8",
        "not-a-cidr",
        "10.0.0.0",
    ];
    let port_bad = [
        "70000",
        "-1",
        "80,",
        "80 443",
        "1111;2222",
        "80\n-A OUTPUT -j ACCEPT",
        "80 -j ACCEPT",
        "http",
    ];
    let iface_bad = [
        "eth0,",
        "eth0 -j ACCEPT",
        "eth0\n-A OUTPUT",
        "0eth",
        "toolonginterfacename",
        "eth*",
        "eth0;eth1",
    ];
    let mut cases: Vec<(&str, &str)> = Vec::new();
    for v in cidr_bad {
        cases.push((INCLUDE_OUTBOUND_IP_RANGES, v));
        cases.push((EXCLUDE_OUTBOUND_IP_RANGES, v));
    }
    cases.push((EXCLUDE_OUTBOUND_IP_RANGES, "*"));
    for k in [
        EXCLUDE_INBOUND_PORTS,
        INCLUDE_INBOUND_PORTS,
        EXCLUDE_OUTBOUND_PORTS,
        INCLUDE_OUTBOUND_PORTS,
    ] {
        for v in port_bad {
            cases.push((k, v));
        }
    }
    // A wildcard cannot be rendered for these lists (upstream fails later, in iptables-restore).
    for k in [
        EXCLUDE_INBOUND_PORTS,
        EXCLUDE_OUTBOUND_PORTS,
        INCLUDE_OUTBOUND_PORTS,
    ] {
        cases.push((k, "*"));
    }
    cases.push((INCLUDE_INBOUND_PORTS, " *"));
    for k in [
        EXCLUDE_INTERFACES,
        REROUTE_VIRTUAL_INTERFACES,
        KUBEVIRT_INTERFACES,
    ] {
        for v in iface_bad {
            cases.push((k, v));
        }
    }
    for v in ["NONE", "redirect", "tproxy", "", "TPROXY ", "REDIRECT\n"] {
        cases.push((INTERCEPTION_MODE, v));
    }
    for (k, v) in &cases {
        let (key, value, reason) = error(&[(k, v)]);
        assert_eq!(&key, k, "{v:?}");
        assert_eq!(&value, v);
        assert!(!reason.is_empty());
        let e = Redirect::from_pod(&pod(&[(k, v)])).unwrap_err();
        assert_eq!(e.cni_code(), 100);
        assert!(e.to_string().contains(k), "{e}");
    }
    println!("{} bad values rejected", cases.len());
}

#[test]
fn validation_order_is_upstreams() {
    let order = [
        (INTERCEPTION_MODE, "NONE"),
        (INCLUDE_OUTBOUND_IP_RANGES, "x"),
        (EXCLUDE_OUTBOUND_IP_RANGES, "*"),
        (EXCLUDE_INBOUND_PORTS, "x"),
        (INCLUDE_INBOUND_PORTS, "x"),
        (EXCLUDE_OUTBOUND_PORTS, "x"),
        (INCLUDE_OUTBOUND_PORTS, "x"),
        (EXCLUDE_INTERFACES, "0"),
        (REROUTE_VIRTUAL_INTERFACES, "0"),
    ];
    for i in 0..order.len() {
        let (key, _, _) = error(&order[i..]);
        assert_eq!(key, order[i].0);
    }
    let (key, _, _) = error(&[(KUBEVIRT_INTERFACES, "0")]);
    assert_eq!(key, KUBEVIRT_INTERFACES);
}

/// Accepted values with odd spacing render as clean tokens.
#[test]
fn accepted_values_render_clean_tokens() {
    let r = redirect(&[
        (INCLUDE_INBOUND_PORTS, " 80 , 443 "),
        (EXCLUDE_OUTBOUND_PORTS, " 9000"),
        (EXCLUDE_INTERFACES, " eth1 , eth2"),
        (INCLUDE_OUTBOUND_IP_RANGES, "10.0.0.1/8"),
    ]);
    let cfg = CaptureConfig::from_redirect(&r, &|_| None, false).unwrap();
    let d = render(&cfg).unwrap();
    assert!(d
        .v4
        .contains("-A ISTIO_INBOUND -p tcp --dport 443 -j ISTIO_IN_REDIRECT\n"));
    assert!(d
        .v4
        .contains("-A ISTIO_OUTPUT -p tcp --dport 9000 -j RETURN\n"));
    assert!(d.v4.contains("-A PREROUTING -i eth2 -j RETURN\n"));
    assert!(d
        .v4
        .contains("-A ISTIO_OUTPUT -d 10.0.0.1/8 -j ISTIO_REDIRECT\n"));
    assert!(!d.v4.contains("  "), "{}", d.v4);
    assert!(d.v6.is_none() && d.tproxy_route.is_none());
}

// Issue 16 item 2: upstream consults the inbound excludes only when the include is `*`, so an exclude `*`
// with an explicit (or empty) include list programs the normal rules; with an include `*` it cannot.
#[test]
fn exclude_inbound_wildcard_is_ignored_unless_include_is_wildcard() {
    for include in ["8080", "", "8080,9090"] {
        let r = redirect(&[
            (INCLUDE_INBOUND_PORTS, include),
            (EXCLUDE_INBOUND_PORTS, "*"),
        ]);
        let want = redirect(&[(INCLUDE_INBOUND_PORTS, include)]);
        assert_eq!(r, want, "include {include:?}");
    }
    for include in [None, Some("*")] {
        let mut a = vec![(EXCLUDE_INBOUND_PORTS, " * ")];
        if let Some(i) = include {
            a.push((INCLUDE_INBOUND_PORTS, i));
        }
        let (key, value, reason) = error(&a);
        assert_eq!(
            (key.as_str(), value.as_str()),
            (EXCLUDE_INBOUND_PORTS, " * ")
        );
        assert!(reason.contains("wildcard"), "{reason}");
    }
}

// The README's deviations for port annotations (issue 16 item 3), as the code does them.
#[test]
fn leading_zeros_are_decimal_blanks_are_empty_repeats_are_kept_once() {
    let r = redirect(&[
        (INCLUDE_INBOUND_PORTS, "080,8080, 80"),
        (INCLUDE_OUTBOUND_PORTS, "0443,443"),
        (EXCLUDE_OUTBOUND_PORTS, "  "),
    ]);
    assert_eq!(r.include_inbound_ports, Ports::List(vec![80, 8080]));
    assert_eq!(r.include_outbound_ports, vec![443]);
    assert!(r.exclude_outbound_ports.is_empty());
    // A blank exclude is empty (a blank include is refused: a_blank_include_port_list_fails_closed).
    assert_eq!(
        redirect(&[(EXCLUDE_INBOUND_PORTS, " \t ")]).exclude_inbound_ports,
        vec![15020, 15021, 15090]
    );
}

// Upstream's `ValidateInterfaceNames` accepts only "" as an empty list: a blank value splits into one empty
// name and fails ADD. Taken as "no interfaces", `istio.io/reroute-virtual-interfaces: " "` would start a
// KubeVirt pod whose VM traffic is not redirected (and hide the deprecated key's interfaces).
