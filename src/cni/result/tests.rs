use super::*;
use crate::cni::version;

/// The routes (with table/scope/mtu) and DNS both results below end with, and the closing brace.
macro_rules! routes_and_dns {
    () => {
        r#"
  "routes": [
    {"dst": "0.0.0.0/0", "gw": "10.1.0.1"},
    {"dst": "::/0"},
    {"dst": "10.2.0.0/16", "gw": "10.1.0.1", "mtu": 1400, "advmss": 1360, "priority": 10, "table": 100, "scope": 253}
  ],
  "dns": {"nameservers": ["10.96.0.10"], "domain": "cluster.local", "search": ["svc.cluster.local"], "options": ["ndots:5"]}
}"#
    };
}

/// A 1.1.0 result from a ptp-like plugin: three interfaces, dual-stack IPs, routes with table/scope/mtu, dns.
const PREV_1X: &str = concat!(
    r#"{
  "cniVersion": "1.1.0",
  "interfaces": [
    {"name": "veth1234", "mac": "aa:bb:cc:dd:ee:01"},
    {"name": "cni0", "mac": "aa:bb:cc:dd:ee:02", "mtu": 1450},
    {"name": "eth0", "mac": "aa:bb:cc:dd:ee:03", "mtu": 1500, "sandbox": "/run/netns/pod", "socketPath": "/run/x.sock", "pciID": "0000:00:1f.0"}
  ],
  "ips": [
    {"interface": 2, "address": "10.1.0.5/24", "gateway": "10.1.0.1"},
    {"interface": 2, "address": "fd00:10::5/64", "gateway": "fd00:10::1"}
  ],"#,
    routes_and_dns!()
);

/// The same result as a 0.3.x/0.4.0 plugin writes it (IP versions, interfaces without mtu).
const PREV_04: &str = concat!(
    r#"{
  "cniVersion": "0.4.0",
  "interfaces": [
    {"name": "veth1234", "mac": "aa:bb:cc:dd:ee:01"},
    {"name": "cni0", "mac": "aa:bb:cc:dd:ee:02"},
    {"name": "eth0", "mac": "aa:bb:cc:dd:ee:03", "sandbox": "/run/netns/pod"}
  ],
  "ips": [
    {"version": "4", "interface": 2, "address": "10.1.0.5/24", "gateway": "10.1.0.1"},
    {"version": "6", "interface": 2, "address": "fd00:10::5/64", "gateway": "fd00:10::1"}
  ],"#,
    routes_and_dns!()
);

fn v(s: &str) -> Value {
    json::parse(s, "test").unwrap()
}

fn with_version(doc: &str, ver: &str) -> Value {
    let mut o = match v(doc) {
        Value::Object(o) => o,
        _ => unreachable!(),
    };
    o.insert("cniVersion".into(), json::string(ver));
    Value::Object(o)
}

#[test]
fn matrix_passes_through_with_the_documented_conversion() {
    for ver in ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"] {
        let v1 = version::at_least(ver, "1.0.0");
        let input = if v1 { PREV_1X } else { PREV_04 };
        let prev = with_version(input, ver);
        let out = passthrough(Some(&prev), ver).unwrap();
        let got = v(&out);
        let want = if v1 {
            with_version(PREV_1X, ver)
        } else {
            with_version(PREV_04, ver)
        };
        assert_eq!(
            json::to_compact(&got),
            json::to_compact(&want),
            "version {ver}"
        );
    }
}

#[test]
fn one_x_result_read_by_an_0_4_conf_drops_interface_fields_and_adds_ip_versions() {
    // libcni parses prevResult with the conf's version; fields the 0.4.0 types lack are dropped.
    let prev = v(PREV_1X);
    let out = v(&passthrough(Some(&prev), "0.4.0").unwrap());
    assert_eq!(
        json::to_compact(&out),
        json::to_compact(&with_version(PREV_04, "0.4.0"))
    );
}

#[test]
fn zero_four_result_read_by_a_1x_conf_drops_ip_versions() {
    let prev = v(PREV_04);
    let out = v(&passthrough(Some(&prev), "1.0.0").unwrap());
    let text = json::to_compact(&out);
    assert!(!text.contains("\"version\""), "{text}");
    assert!(text.contains("\"cniVersion\":\"1.0.0\""));
    // eth0 keeps its sandbox and the IPs their interface index (containerd needs both)
    assert!(text.contains("\"sandbox\":\"/run/netns/pod\""));
    assert!(text.contains("\"interface\":2"));
}

#[test]
fn empty_results() {
    assert_eq!(
        passthrough(None, "1.0.0").unwrap(),
        "{\n    \"cniVersion\": \"1.0.0\"\n}"
    );
    assert_eq!(
        passthrough(None, "0.4.0").unwrap(),
        "{\n    \"cniVersion\": \"0.4.0\",\n    \"dns\": {}\n}"
    );
    // empty members are left out
    let prev = v(r#"{"cniVersion":"1.0.0","interfaces":[],"ips":[],"routes":[],"dns":{}}"#);
    assert_eq!(
        passthrough(Some(&prev), "1.0.0").unwrap(),
        "{\n    \"cniVersion\": \"1.0.0\"\n}"
    );
}

#[test]
fn prev_result_without_version_takes_the_conf_version() {
    let prev = v(r#"{"ips":[{"address":"10.0.0.2/24"}]}"#);
    let out = passthrough(Some(&prev), "1.1.0").unwrap();
    assert!(out.contains("\"cniVersion\": \"1.1.0\""));
    assert!(out.contains("10.0.0.2/24"));
}

#[test]
fn old_versions_use_the_ip4_shape() {
    let prev = v(
        r#"{"ip4":{"ip":"10.0.0.2/24","gateway":"10.0.0.1","routes":[{"dst":"0.0.0.0/0"}]},"dns":{}}"#,
    );
    let out = v(&passthrough(Some(&prev), "0.2.0").unwrap());
    assert_eq!(
        json::to_compact(&out),
        r#"{"cniVersion":"0.2.0","dns":{},"ip4":{"gateway":"10.0.0.1","ip":"10.0.0.2/24","routes":[{"dst":"0.0.0.0/0"}]}}"#
    );
    // A 0.3-style prevResult under a 0.1.0 configuration cannot be converted (upstream TestCmdAddInvalidVersion).
    let e = passthrough(Some(&v(PREV_04)), "0.1.0").unwrap_err();
    assert!(e.to_string().contains("could not convert result"), "{e}");
}

#[test]
fn malformed_prev_results_are_decode_errors() {
    for bad in [
        r#"[]"#,
        r#"{"ips":[{"address":"10.0.0.2"}]}"#,
        r#"{"ips":[{"address":"10.0.0.2/24","gateway":"nope"}]}"#,
        r#"{"ips":"x"}"#,
        r#"{"interfaces":[{"name":"eth0","mtu":"big"}]}"#,
        r#"{"routes":[{"dst":"default"}]}"#,
    ] {
        let e = passthrough(Some(&v(bad)), "1.0.0").unwrap_err();
        assert_eq!(e.cni_code(), 6, "{bad}");
    }
}

#[test]
fn error_reply_shape() {
    let e = Error::env("CNI_CONTAINERID", "required for ADD but not set");
    let out = v(&error_reply(&e, "1.0.0"));
    let o = match out {
        Value::Object(o) => o,
        _ => unreachable!(),
    };
    assert_eq!(json::str_of(&o, "cniVersion"), Some("1.0.0"));
    assert!(matches!(o.get("code"), Some(Value::Number(Number::U64(4)))));
    assert!(json::str_of(&o, "msg").unwrap().contains("CNI_CONTAINERID"));
    assert!(o.contains_key("details"));
}

#[test]
fn route_table_and_scope_zero_are_kept_as_libcni_keeps_them() {
    // libcni's route has `Table *int` and `Scope *int` (omitempty drops only an absent one): table 0 and
    // scope 0 (RT_SCOPE_UNIVERSE) pass through, while mtu, advmss and priority (plain ints) drop a 0.
    let prev = v(
        r#"{"routes":[{"dst":"0.0.0.0/0","table":0,"scope":0,"mtu":0,"advmss":0,"priority":0},
                      {"dst":"::/0","table":null,"scope":null}]}"#,
    );
    for ver in ["0.3.1", "0.4.0", "1.0.0", "1.1.0"] {
        let out = v(&passthrough(Some(&prev), ver).unwrap());
        let text = json::to_compact(&out);
        assert!(
            text.contains(r#""routes":[{"dst":"0.0.0.0/0","scope":0,"table":0},{"dst":"::/0"}]"#),
            "{ver}: {text}"
        );
    }
    let bad = v(r#"{"routes":[{"dst":"0.0.0.0/0","scope":"link"}]}"#);
    assert_eq!(passthrough(Some(&bad), "1.0.0").unwrap_err().cni_code(), 6);
}
