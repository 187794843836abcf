//! Branches the conformance vectors do not reach; the vectors themselves run in tests/conformance/conformance_rules.rs.

use super::*;
use crate::json;
use crate::redirect::capture_json::tests::BASE;

/// Upstream's `constructTestConfig` base ([`BASE`]), with `patch` (JSON members) on top.
fn cfg(patch: &str) -> CaptureConfig {
    let mut o = json::parse_object(BASE, "t").unwrap();
    o.extend(json::parse_object(&format!("{{{patch}}}"), "patch").unwrap());
    CaptureConfig::from_json(&o).unwrap()
}

fn lines(doc: &str) -> Vec<&str> {
    doc.lines().collect()
}

#[test]
fn owner_group_excludes_with_wildcard_include() {
    let d = render(&cfg(r#""owner_groups_exclude":"java,202""#)).unwrap();
    let l = lines(&d.v4);
    let a = l
        .iter()
        .position(|x| *x == "-A ISTIO_OUTPUT -m owner --gid-owner java -j RETURN")
        .unwrap();
    assert_eq!(
        l[a + 1],
        "-A ISTIO_OUTPUT -m owner --gid-owner 202 -j RETURN"
    );
}

#[test]
fn empty_owner_group_include_returns_everything_like_upstream() {
    let d = render(&cfg(r#""owner_groups_include":"""#)).unwrap();
    assert!(d.v4.contains("\n-A ISTIO_OUTPUT -j RETURN\n"), "{}", d.v4);
}

#[test]
fn drop_invalid_with_tproxy_declares_chains_in_first_use_order() {
    let d = render(&cfg(
        r#""drop_invalid":true,"inbound_interception_mode":"TPROXY","inbound_ports_include":"*","enable_ipv6":true"#,
    ))
    .unwrap();
    for doc in [&d.v4, d.v6.as_ref().unwrap()] {
        assert!(
            doc.starts_with("* mangle\n-N ISTIO_DROP\n-N ISTIO_DIVERT\n-N ISTIO_TPROXY\n-N ISTIO_INBOUND\n-A PREROUTING -m conntrack --ctstate INVALID -j ISTIO_DROP\n-A ISTIO_DROP -j DROP\n"),
            "{doc}"
        );
    }
    let r = d.tproxy_route.unwrap();
    assert_eq!((r.mark, r.table, r.ipv6), (1337, 133, true));
}

#[test]
fn tproxy_without_inbound_capture_needs_no_routes() {
    let c = cfg(r#""inbound_interception_mode":"TPROXY""#);
    assert_eq!(render(&c).unwrap().tproxy_route, None);
}

#[test]
fn capture_all_dns_in_both_families() {
    let d = render(&cfg(
        r#""redirect_dns":true,"capture_all_dns":true,"enable_ipv6":true"#,
    ))
    .unwrap();
    for doc in [&d.v4, d.v6.as_ref().unwrap()] {
        assert!(
            doc.contains("-A ISTIO_OUTPUT -j ISTIO_OUTPUT_DNS\n"),
            "{doc}"
        );
        assert!(doc.contains("-A ISTIO_OUTPUT_DNS -p udp --dport 53 -j REDIRECT --to-port 15053\n"));
        assert!(doc.contains("-A PREROUTING -j ISTIO_INBOUND\n-A ISTIO_OUTPUT_DNS -p udp --dport 53 -j CT --zone 2\n-A ISTIO_INBOUND -p udp --sport 53 -j CT --zone 1\n"));
        // The GID loopback rule never gets the 53 multiport.
        assert!(
            doc.contains("-p tcp ! --dport 15008 -m owner --gid-owner 1337 -j ISTIO_IN_REDIRECT")
        );
        assert!(doc.contains("-p tcp -m multiport ! --dports 53,15008 -m owner --uid-owner 1337 -j ISTIO_IN_REDIRECT"));
    }
}

#[test]
fn ipv6_dns_servers_only() {
    let d = render(&cfg(
        r#""redirect_dns":true,"enable_ipv6":true,"dns_servers_v6":["fd00::53"]"#,
    ))
    .unwrap();
    assert!(!d.v4.contains("-A ISTIO_OUTPUT -j ISTIO_OUTPUT_DNS"));
    assert!(!d.v4.contains("PREROUTING -j ISTIO_INBOUND"));
    let v6 = d.v6.unwrap();
    assert!(v6.contains(
        "-A ISTIO_OUTPUT_DNS -p tcp --dport 53 -d fd00::53/128 -j REDIRECT --to-ports 15053\n"
    ));
    assert!(v6.contains("-A ISTIO_INBOUND -p udp --sport 53 -s fd00::53/128 -j CT --zone 1\n"));
}

#[test]
fn wildcard_include_with_reroute_in_ipv6() {
    let d = render(&cfg(
        r#""outbound_ip_ranges_include":"*","reroute_virtual_interfaces":"eth1","enable_ipv6":true"#,
    ))
    .unwrap();
    for doc in [&d.v4, d.v6.as_ref().unwrap()] {
        assert!(doc.ends_with("-A ISTIO_OUTPUT -j ISTIO_REDIRECT\n-I PREROUTING 1 -i eth1 -j ISTIO_REDIRECT\nCOMMIT\n"), "{doc}");
    }
}

#[test]
fn loopback_include_in_either_family_drops_the_lo_returns() {
    for inc in ["127.0.0.0/8", "::1/128"] {
        let d = render(&cfg(&format!(
            r#""outbound_ip_ranges_include":"{inc}","enable_ipv6":true"#
        )))
        .unwrap();
        assert!(!d.v4.contains("-o lo -m owner ! --uid-owner"), "{inc}");
        assert!(
            !d.v6.unwrap().contains("-o lo -m owner ! --gid-owner"),
            "{inc}"
        );
    }
}

#[test]
fn multiple_ids_in_tproxy_marks() {
    let d = render(&cfg(
        r#""inbound_interception_mode":"TPROXY","inbound_ports_include":"80","proxy_uid":"1,2","proxy_gid":"3""#,
    ))
    .unwrap();
    assert!(d.v4.contains(
        "-A OUTPUT ! -d 127.0.0.1/32 -p tcp -o lo -m owner --uid-owner 1 -j MARK --set-mark 1338\n\
         -A OUTPUT ! -d 127.0.0.1/32 -p tcp -o lo -m owner --uid-owner 2 -j MARK --set-mark 1338\n\
         -A OUTPUT ! -d 127.0.0.1/32 -p tcp -o lo -m owner --gid-owner 3 -j MARK --set-mark 1338\n"
    ));
}

#[test]
fn custom_loopback_range() {
    let d = render(&cfg(r#""host_ipv4_loopback_cidr":"127.0.0.0/8""#)).unwrap();
    assert!(d.v4.contains("-A ISTIO_OUTPUT -d 127.0.0.0/8 -j RETURN\n"));
}
