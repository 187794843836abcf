use super::*;

fn ok(name: &str, text: &str) -> bool {
    validate(name, text.as_bytes(), &|_| false).is_ok()
}

#[test]
fn plugin_conf_types() {
    assert!(ok("a.conf", r#"{"type":"bridge"}"#));
    assert!(ok("a.conf", r#"{"Type":"bridge"}"#), "case-insensitive key");
    assert!(!ok("a.conf", r#"{"type":""}"#));
    assert!(!ok("a.conf", r#"{"name":"x"}"#));
    assert!(!ok("a.conf", r#"{"type":5}"#));
    assert!(!ok("a.conf", "not json"));
    assert!(!ok("a.conf", "[]"));
    assert!(!ok(
        "a.conf",
        r#"{"type":"b","capabilities":{"portMappings":"true"}}"#
    ));
    assert!(ok(
        "a.conf",
        r#"{"type":"b","capabilities":{"portMappings":true,"x":null}}"#
    ));
    assert!(!ok("a.conf", r#"{"type":"b","ipam":"host-local"}"#));
    assert!(!ok("a.conf", r#"{"type":"b","ipam":{"TYPE":5}}"#));
    assert!(ok(
        "a.conf",
        r#"{"type":"b","ipam":{"type":"x","subnet":1}}"#
    ));
    assert!(!ok(
        "a.conf",
        r#"{"type":"b","dns":{"nameservers":"1.1.1.1"}}"#
    ));
    assert!(ok(
        "a.conf",
        r#"{"type":"b","dns":{"nameservers":["1.1.1.1"]}}"#
    ));
    assert!(!ok("a.conf", r#"{"type":"b","prevResult":[]}"#));
    assert!(ok(
        "a.conf",
        r#"{"type":"b","prevResult":null,"ipam":null}"#
    ));
    assert!(!ok("a.conf", r#"{"type":"b","cniVersion":1}"#));
    assert!(!ok(
        "a.conf",
        r#"{"type":"b","cni.dev/valid-attachments":[{"ifname":1}]}"#
    ));
}

#[test]
fn conf_list_rules() {
    let calico = r#""plugins":[{"type":"calico"}]"#;
    assert!(ok("a.conflist", &format!(r#"{{"name":"n",{calico}}}"#)));
    assert!(!ok("a.conflist", &format!(r#"{{{calico}}}"#)));
    assert!(
        !ok("a.conflist", &format!(r#"{{"Name":"n",{calico}}}"#)),
        "list keys are exact"
    );
    assert!(!ok("a.conflist", r#"{"name":"n","plugins":[]}"#));
    assert!(!ok("a.conflist", r#"{"name":"n","plugins":{}}"#));
    assert!(!ok("a.conflist", r#"{"name":"n"}"#));
    assert!(validate("a.conflist", br#"{"name":"n"}"#, &|n| n == "n").is_ok());
    assert!(ok(
        "a.conflist",
        r#"{"name":"n","plugins":[{"TYPE":"ptp"}]}"#
    ));
    let with = |extra: &str| format!(r#"{{"name":"n",{calico},{extra}}}"#);
    assert!(ok("a.conflist", &with(r#""disableCheck":"TRUE""#)));
    assert!(ok("a.conflist", &with(r#""disableCheck":false"#)));
    assert!(!ok("a.conflist", &with(r#""disableCheck":"yes""#)));
    assert!(!ok("a.conflist", &with(r#""disableGC":"nope""#)));
    assert!(!ok("a.conflist", &with(r#""disableGC":1"#)));
    assert!(ok(
        "a.conflist",
        &with(r#""cniVersions":["1.0.0","0.4.0"]"#)
    ));
    assert!(!ok("a.conflist", &with(r#""cniVersions":["1.0.0","x"]"#)));
    assert!(!ok("a.conflist", &with(r#""cniVersions":"1.0.0""#)));
    assert!(!ok("a.conflist", &with(r#""cniVersions":[1]"#)));
    assert!(!ok("a.conflist", &with(r#""cniVersion":1"#)));
    assert!(!ok(
        "a.conflist",
        r#"{"name":"n","plugins":[{"type":"x","capabilities":{"a":"true"}}]}"#
    ));
}

#[test]
fn go_decoding_of_bad_text() {
    assert!(validate(
        "a.conflist",
        b"{\"name\":\"n\xe9\",\"plugins\":[{\"type\":\"x\"}]}",
        &|_| false
    )
    .is_ok());
    assert_eq!(go_text(b"\"a\xe9\""), "\"a\u{fffd}\"");
    assert_eq!(go_text(br#""\ud800""#), r#""\ufffd""#);
    assert_eq!(go_text(br#""\ud83d\ude00""#), r#""\ud83d\ude00""#);
    assert_eq!(go_text(br#""\\ud800""#), r#""\\ud800""#);
    assert_eq!(go_text(br#""\udc00x""#), r#""\ufffdx""#);
    assert!(ok(
        "a.conflist",
        r#"{"name":"\ud800","plugins":[{"type":"x"}]}"#
    ));
    assert!(ok(".conf", r#"{"type":"x"}"#));
}
