//! Tests of the JSON layer: Go's reading and printing rules.
use super::*;

#[test]
fn pretty_matches_go_marshal_indent() {
    let v = parse(
        r#"{"b":[1,{"x":"<a&b>"}],"a":{},"c":[],"d":1.5,"e":-3}"#,
        "t",
    )
    .unwrap();
    assert_eq!(
        to_pretty(&v, "  "),
        "{\n  \"a\": {},\n  \"b\": [\n    1,\n    {\n      \"x\": \"\\u003ca\\u0026b\\u003e\"\n    }\n  ],\n  \"c\": [],\n  \"d\": 1.5,\n  \"e\": -3\n}"
    );
    assert_eq!(
        to_compact(&v),
        r#"{"a":{},"b":[1,{"x":"\u003ca\u0026b\u003e"}],"c":[],"d":1.5,"e":-3}"#
    );
}

#[test]
fn deep_nesting_is_refused_without_recursion() {
    let deep = "[".repeat(100_000) + &"]".repeat(100_000);
    let e = parse(&deep, "prevResult").unwrap_err();
    assert!(e.to_string().contains("nested deeper"), "{e}");
    assert!(parse(
        r#"{"a":"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\"]"}"#,
        "s"
    )
    .is_ok());
}

#[test]
fn go_floats() {
    assert_eq!(go_float(1500.0), "1500");
    assert_eq!(go_float(0.5), "0.5");
    assert_eq!(go_float(1e21), "1e+21");
    assert_eq!(go_float(1e-7), "1e-7");
    assert_eq!(go_float(1e-10), "1e-10");
    assert_eq!(go_float(-1e-7), "-1e-7");
    assert_eq!(go_float(0.000001), "0.000001");
    assert_eq!(go_float(-0.0), "-0");
    assert_eq!(go_float(0.0), "0");
    assert_eq!(go_float(1e20), "100000000000000000000");
    assert_eq!(
        go_float(123456789012345678901234567890.0),
        "1.2345678901234568e+29"
    );
    assert_eq!(go_float(5e-324), "5e-324");
    assert_eq!(go_float(f64::MAX), "1.7976931348623157e+308");
    assert_eq!(
        go_float(999_999_999_999_999_868_928.0),
        "999999999999999900000"
    );
}

/// Numbers are read as Go's decoder reads them: exactly, `-0` stays negative, out-of-range is refused.
#[test]
fn numbers_read_as_go() {
    let v = parse("[1.0, 10000000000000001, -0, -0.0, 2.5E+3, 123456789012345678901234567890, 0.1, 18446744073709551616, -9223372036854775809]", "n").unwrap();
    let Value::Array(a) = v else { panic!("array") };
    let f = |i: usize| match &a[i] {
        Value::Number(Number::F64(f)) => *f,
        other => panic!("{i}: {other:?}"),
    };
    assert_eq!(f(0), 1.0);
    assert_eq!(f(1), 10000000000000000.0);
    assert!(f(2) == 0.0 && f(2).is_sign_negative());
    assert!(f(3).is_sign_negative());
    assert_eq!(f(4), 2500.0);
    assert_eq!(f(5), 1.2345678901234568e29);
    assert_eq!(f(6), 0.1);
    assert_eq!(f(7), 18446744073709551616.0);
    assert_eq!(f(8), -9223372036854775809.0);
    assert!(parse("1e400", "n").is_err());
    assert!(parse("01", "n").is_err());
    assert!(parse("1.", "n").is_err());
    assert!(parse("-", "n").is_err());
    assert!(parse(".5", "n").is_err());
}

/// The differential case: upstream's install-cni re-marshals this primary; its after-cleanup file is
/// that primary re-printed by Go (the istio-cni entry removed again), byte for byte.
#[test]
fn number_formatting_go_marshal_case() {
    let root = std::env::var_os("CONFORMANCE_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/conformance")
        });
    let dir = root.join("differential/install/number-formatting-go-marshal");
    let before = std::fs::read_to_string(dir.join("before/10-calico.conflist")).unwrap();
    let want = std::fs::read_to_string(dir.join("after-cleanup/10-calico.conflist")).unwrap();
    let got = to_pretty(&parse(&before, "before").unwrap(), "  ") + "\n";
    assert_eq!(got, want);
    assert!(want.contains("    1e-7,\n    0.000001,\n    -0,\n    -0,\n"));
}

#[test]
fn strings_read_as_go() {
    let v = parse(
        r#"["\ud800", "\ud83d\ude00", "\ud800\u0041", "a\/b\u00e9", "\udc00"]"#,
        "s",
    )
    .unwrap();
    let Value::Array(a) = v else { panic!("array") };
    let s: Vec<&str> = a
        .iter()
        .map(|v| match v {
            Value::String(s) => s.as_str(),
            _ => "?",
        })
        .collect();
    assert_eq!(
        s,
        [
            "\u{fffd}",
            "\u{1f600}",
            "\u{fffd}A",
            "a/b\u{e9}",
            "\u{fffd}"
        ]
    );
    assert!(parse(r#""a\u0001""#, "s").is_ok());
    assert!(parse("\"a\x01\"", "s").is_err());
    assert!(parse(r#""a\q""#, "s").is_err());
    assert!(
        parse("{\"a\":1,\"a\":2}", "d")
            .map(|v| to_compact(&v))
            .unwrap()
            == r#"{"a":2}"#
    );
    assert!(parse("[1,]", "s").is_err());
    assert!(parse("{\"a\":1} x", "s").is_err());
    assert!(parse(" {} ", "s").is_ok());
}

#[test]
fn parse_errors_name_the_input() {
    let e = parse("{", "network configuration").unwrap_err();
    assert_eq!(e.cni_code(), 6);
    assert!(e.to_string().contains("network configuration"));
    assert!(parse_object("[]", "x").is_err());
}

#[test]
fn strings_as_go_and_as_zap() {
    let mut go = String::new();
    write_string(&mut go, "<a&b>\u{2028}\"\u{1}\n");
    assert_eq!(go, r#""\u003ca\u0026b\u003e\u2028\"\u0001\n""#);
    let mut zap = String::new();
    write_string_no_html(&mut zap, "<a&b>\u{2028}\"\u{1}\n");
    assert_eq!(zap, "\"<a&b>\u{2028}\\\"\\u0001\\n\"");
}

/// Runs `run` on this thread, then on one with a 64 KiB stack: what walks a deep value must not recurse.
pub fn on_this_and_a_small_stack(run: fn()) {
    run();
    std::thread::Builder::new()
        .stack_size(64 << 10)
        .spawn(run)
        .unwrap()
        .join()
        .expect("no stack overflow on a 64 KiB stack");
}

/// `{"a":[{"a":[…]}]}` nesting `depth` levels.
fn alternating(depth: usize) -> String {
    let (mut open, mut close) = (String::new(), String::new());
    for i in 0..depth {
        if i % 2 == 0 {
            open.push_str("{\"a\":");
            close.insert(0, '}');
        } else {
            open.push('[');
            close.insert(0, ']');
        }
    }
    open + "null" + &close
}

/// Parsing, printing and dropping are iterative: Go's 10,000 levels on a 64 KiB stack; 10,001 refused.
#[test]
fn go_depth_parses_prints_and_drops_on_a_small_stack() {
    let run = || {
        let text = alternating(GO_MAX_DEPTH);
        let v = parse_go_depth(&text, "deep").unwrap();
        assert_eq!(to_compact(&v), text);
        assert_eq!(
            to_pretty_bounded(&v, " ", 1 << 20),
            None,
            "indented as Go indents"
        );
        let shallower = parse_go_depth(&alternating(1_000), "1000").unwrap();
        let pretty = to_pretty_bounded(&shallower, " ", 1 << 20).unwrap();
        assert_eq!(pretty, to_pretty(&shallower, " "));
        let doc = ordered::Doc::parse(&text, "deep", GO_MAX_DEPTH).unwrap();
        assert_eq!(doc.kind(doc.root()), "object");
        drop(v);
        let e = parse_go_depth(&alternating(GO_MAX_DEPTH + 1), "deeper").unwrap_err();
        assert!(e.to_string().contains("nested deeper than 10000"), "{e}");
        assert!(parse(&alternating(MAX_DEPTH), "s").is_ok());
        assert!(parse(&alternating(MAX_DEPTH + 1), "s").is_err());
    };
    on_this_and_a_small_stack(run);
}

#[test]
fn ordered_doc_keeps_source_order_and_duplicates() {
    use ordered::{Doc, Keys};
    let doc = Doc::parse(r#"{"b":1,"a":2,"b":3,"B":null}"#, "t", MAX_DEPTH).unwrap();
    let r = doc.root();
    let keys = |k| -> Vec<&str> { doc.entries(r, k).into_iter().map(|e| e.0).collect() };
    assert_eq!(keys(Keys::Source), ["b", "a", "b", "B"]);
    assert_eq!(keys(Keys::Map), ["B", "a", "b"]);
    let b = doc.get(r, "b").unwrap();
    assert_eq!(doc.kind(b), "number");
    assert_eq!(
        doc.entries(r, Keys::Map)[2].1,
        b,
        "the map keeps the last duplicate"
    );
    assert!(doc.is_null(doc.get(r, "B").unwrap()));
    assert_eq!(doc.get(r, "c"), None);
    assert!(Doc::parse("[1,]", "t", MAX_DEPTH).is_err());
}
