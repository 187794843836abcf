use super::*;
use crate::json;
use std::cell::RefCell;

fn a(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn pod(annotations: &str, ips: &[&str]) -> PodInfo {
    let ips: Vec<String> = ips.iter().map(|i| format!(r#"{{"ip":"{i}"}}"#)).collect();
    let text = format!(
        r#"{{"metadata":{{"name":"p","namespace":"ns","annotations":{{"sidecar.istio.io/status":"{{}}"{annotations}}}}},
            "spec":{{"containers":[{{"name":"app"}},{{"name":"istio-proxy"}}]}},
            "status":{{"podIPs":[{}]}}}}"#,
        ips.join(",")
    );
    PodInfo::from_pod(&json::parse_object(&text, "pod").unwrap()).unwrap()
}

#[test]
fn pod_ips_decide_ipv6_in_the_kernels_order() {
    // Listed IPv6 first (as a dual-stack pod's status may): on one interface the kernel lists IPv4 first.
    let listed = [a("fd00::2"), a("10.0.0.2"), a("fd00::3")];
    assert!(!Addresses::PodIps(&listed).enable_ipv6(false).unwrap());
    assert!(Addresses::PodIps(&listed).enable_ipv6(true).unwrap());
    // The same addresses read inside a namespace, on one interface, decide the same.
    let dump: Vec<(u32, IpAddr)> = listed.iter().map(|x| (2, *x)).collect();
    assert!(!Addresses::Netns(&dump).enable_ipv6(false).unwrap());
    assert!(Addresses::Ipv4Only.enable_ipv6(true).is_ok_and(|v| !v));
}

#[test]
fn no_usable_address_names_where_the_addresses_came_from() {
    let e = Addresses::Netns(&[(1, a("127.0.0.1"))])
        .enable_ipv6(false)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("decide IPv6 from the pod's network namespace addresses")
            && e.contains("no valid local IP address found"),
        "{e}"
    );
    let e = Addresses::PodIps(&[])
        .enable_ipv6(false)
        .unwrap_err()
        .to_string();
    assert!(e.contains("pod status.podIPs"), "{e}");
}

#[test]
fn node_env_takes_every_variable_the_capture_configuration_reads() {
    // A recording environment: from_redirect must read nothing outside ENV_VARS, or NodeEnv would drop it.
    let read = RefCell::new(Vec::new());
    let env = |k: &str| {
        read.borrow_mut().push(k.to_string());
        None
    };
    let info = pod("", &["10.0.0.2"]);
    let r = match decide_pod(&info).unwrap() {
        PodPlan::Redirect(r) => r,
        PodPlan::Skip(why) => panic!("{why}"),
    };
    CaptureConfig::from_redirect(&r, &env, false).unwrap();
    let read = read.into_inner();
    assert!(!read.is_empty());
    for k in &read {
        assert!(ENV_VARS.contains(&k.as_str()), "{k} is read but not taken");
    }
    let all = |k: &str| Some(format!("value of {k}"));
    let taken = NodeEnv::take(&all);
    for k in ENV_VARS {
        assert_eq!(taken.get(k), Some(format!("value of {k}")));
    }
    assert_eq!(taken.get("PATH"), None);
}

#[test]
fn the_node_environment_reaches_the_documents() {
    let info = pod("", &["10.0.0.2"]);
    let env = NodeEnv::take(&|k| {
        (k == super::super::capture::ENV_LOOPBACK_CIDR).then(|| "127.0.0.0/8".into())
    });
    let docs = match plan_pod(&info, Addresses::PodIps(&info.pod_ips), &env).unwrap() {
        Planned::Rules(d) => d,
        Planned::Skip(why) => panic!("{why}"),
    };
    assert!(docs.v4.contains("-d 127.0.0.0/8 -j RETURN"), "{}", docs.v4);
    assert_eq!(docs.v6, None);
    let plain =
        match plan_pod(&info, Addresses::PodIps(&info.pod_ips), &NodeEnv::default()).unwrap() {
            Planned::Rules(d) => d,
            Planned::Skip(why) => panic!("{why}"),
        };
    assert!(!plain.v4.contains("127.0.0.0/8"), "{}", plain.v4);
}

#[test]
fn skips_and_invalid_annotations_come_from_the_decision() {
    let mut info = pod("", &["10.0.0.2"]);
    info.annotations.clear();
    assert!(matches!(
        plan_pod(&info, Addresses::Ipv4Only, &NodeEnv::default()).unwrap(),
        Planned::Skip(_)
    ));
    let bad = pod(
        r#","traffic.sidecar.istio.io/includeInboundPorts":"80 -j ACCEPT""#,
        &["10.0.0.2"],
    );
    // Invalid annotations fail before any address is consulted (none are usable here).
    let e = plan_pod(&bad, Addresses::PodIps(&[]), &NodeEnv::default()).unwrap_err();
    assert!(e.to_string().contains("includeInboundPorts"), "{e}");
}

#[test]
fn shortcuts_in_order() {
    let conf = crate::cni::conf::parse(
        r#"{"cniVersion":"1.0.0","name":"n","type":"istio-cni","pod_namespace":"istio-system","exclude_namespaces":["kube-system"]}"#,
    )
    .unwrap();
    let args = |ns: &str, name: &str| K8sArgs {
        pod_namespace: ns.into(),
        pod_name: name.into(),
        ..K8sArgs::default()
    };
    for (ns, name, want) in [
        ("istio-system", "istio-cni-node-x", Some(Shortcut::OwnAgent)),
        ("", "p", Some(Shortcut::NotKubernetes)),
        ("kube-system", "p", Some(Shortcut::ExcludedNamespace)),
        ("default", "istio-cni-node-x", None),
    ] {
        assert_eq!(shortcut(&conf, &args(ns, name)), want, "{ns}/{name}");
    }
}

#[test]
fn a_global_ipv6_address_left_without_rules_is_named_from_the_namespaces_addresses() {
    // IPv4 first on the interface, so IPv6 gets no document without ISTIO_DUAL_STACK: the decision line
    // must name the address whose IPv6 traffic bypasses the proxy.
    let dump = [(2, a("10.0.0.2")), (2, a("fd00::2"))];
    assert!(!Addresses::Netns(&dump).enable_ipv6(false).unwrap());
    assert_eq!(
        Addresses::Netns(&dump).ipv6_left_out(false),
        Some(a("fd00::2"))
    );
    // Captured with ISTIO_DUAL_STACK: nothing left out.
    assert!(Addresses::Netns(&dump).enable_ipv6(true).unwrap());
    assert_eq!(Addresses::Netns(&dump).ipv6_left_out(true), None);
    // Only the namespace's own addresses are judged.
    let ips = [a("10.0.0.2"), a("fd00::2")];
    assert_eq!(Addresses::PodIps(&ips).ipv6_left_out(false), None);
}
