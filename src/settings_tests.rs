//! Tests of the settings toolkit: Go's value syntax, argument rewriting, flag > env > default.
//! Its helpers (argument lists, an environment) serve every applet's settings tests.
use super::*;

/// `a` as owned strings (an argument list).
pub(crate) fn v(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| s.to_string()).collect()
}

/// The space-separated words of `w`.
pub(crate) fn words(w: &str) -> Vec<String> {
    w.split(' ').map(str::to_string).collect()
}

/// An environment holding exactly these variables.
pub(crate) fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let m: std::collections::HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |k| m.get(k).cloned()
}

#[test]
fn go_bools() {
    let cases = [
        (words("1 t T TRUE true True"), Some(true)),
        (words("0 f F FALSE false False"), Some(false)),
        (v(&["yes", "tRUE", "", " true", "2"]), None),
    ];
    for (inputs, want) in cases {
        for w in inputs {
            assert_eq!(go_bool(&w), want, "{w:?}");
        }
    }
    assert!(parse_bool("X", " true ").unwrap());
    let e = parse_bool("REPAIR_LABEL_PODS", "yes").unwrap_err();
    let e = e.to_string();
    assert!(
        e.contains("REPAIR_LABEL_PODS") && e.contains("\"yes\""),
        "{e}"
    );
}

#[test]
fn go_durations() {
    assert_eq!(go_duration("1.5s"), Some(Duration::from_millis(1500)));
    assert_eq!(
        go_duration("2h1us"),
        Some(Duration::from_secs(7200) + Duration::from_micros(1))
    );
    assert_eq!(go_duration("1m30s"), Some(Duration::from_secs(90)));
    assert_eq!(go_duration("0"), Some(Duration::ZERO));
    for bad in ["", "5", "-1s", "1d", "s", "1e3s", "5 s"] {
        assert_eq!(go_duration(bad), None, "{bad}");
    }
}

#[test]
fn setting_durations_also_take_bare_seconds() {
    for (v, ms) in [
        ("250ms", 250),
        ("2m", 120_000),
        (" 30 ", 30_000),
        ("1.5", 1500),
        // Go's sequences: accepted since the installer shares the Go parser.
        ("1m30s", 90_000),
    ] {
        let want = Duration::from_millis(ms);
        assert_eq!(parse_duration("d", v).unwrap(), want, "{v:?}");
    }
    for bad in ["", "2 weeks", "-5s", "1.5.3", "1d", "1e12"] {
        let e = parse_duration("WAIT_TIMEOUT", bad).unwrap_err().to_string();
        assert!(
            e.contains("WAIT_TIMEOUT") && e.contains("not a duration"),
            "{bad:?}: {e}"
        );
    }
}

#[test]
fn go_base_zero_integers() {
    for (s, want) in [
        ("420", Some(420)),
        ("0600", Some(0o600)),
        ("0o600", Some(0o600)),
        ("0O600", Some(0o600)),
        ("0x1a4", Some(0x1a4)),
        ("0X1A4", Some(0x1a4)),
        ("0b110100100", Some(0o644)),
        ("0", Some(0)),
        ("0_600", Some(0o600)),
        ("0x_1a4", Some(0x1a4)),
        ("4_20", None),
        ("0o", None),
        ("08", None),
        ("-384", None),
        ("rw", None),
        ("", None),
    ] {
        assert_eq!(go_int(s), want, "{s:?}");
    }
}

#[test]
fn modes_as_upstream_reads_them() {
    assert_eq!(parse_mode("m", "420").unwrap(), 0o644);
    assert_eq!(parse_mode("m", "0600").unwrap(), 0o600);
    assert_eq!(parse_mode("m", "0o600").unwrap(), 0o600);
    assert_eq!(parse_mode("m", "0x1a4").unwrap(), 0o644);
    assert_eq!(parse_mode("m", "384").unwrap(), 0o600);
    let e = parse_mode("KUBECONFIG_MODE", "600")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("KUBECONFIG_MODE") && e.contains("0o1130") && e.contains("0600"),
        "{e}"
    );
    assert!(parse_mode("m", "rw").is_err());
}

#[test]
fn ports_and_flag_names() {
    assert_eq!(parse_port("p", " 8000 ").unwrap(), 8000);
    let e = parse_port("MONITORING_PORT", "70000")
        .unwrap_err()
        .to_string();
    assert!(e.contains("MONITORING_PORT") && e.contains("70000"), "{e}");
    assert_eq!(flag_name("CNI_NET_DIR"), "--cni-net-dir");
}

#[test]
fn go_style_args() {
    let installer = ArgStyle {
        dashes_for_underscores: true,
        kind: &|n| match n {
            "once" => FlagKind::Switch,
            "log-as-json" => FlagKind::Bool,
            _ => FlagKind::Value,
        },
    };
    assert_eq!(
        normalize_args(
            &words("--log_output_level=default:info,cni-plugin:debug --once --a=b=c --log_as_json"),
            installer
        )
        .unwrap(),
        words("--log-output-level default:info,cni-plugin:debug --once --a b=c --log-as-json true")
    );
    let repair = ArgStyle {
        dashes_for_underscores: false,
        kind: &|n| match n {
            "label-pods" => FlagKind::Bool,
            _ => FlagKind::Value,
        },
    };
    assert_eq!(
        normalize_args(
            &words(
                "--label-pods --label-pods=false --label-pods 0 --node_name=n -- --label-pods -v"
            ),
            repair
        )
        .unwrap(),
        words(
            "--label-pods true --label-pods false --label-pods 0 --node_name n -- --label-pods -v"
        )
    );
}

/// Every boolean flag has the same three forms; a switch's false drops it, a bad value names the flag.
#[test]
fn boolean_flags_take_the_same_forms() {
    let style = ArgStyle {
        dashes_for_underscores: false,
        kind: &|n| match n {
            "once" => FlagKind::Switch,
            "chained" => FlagKind::Bool,
            _ => FlagKind::Value,
        },
    };
    let norm = |a: &[&str]| normalize_args(&v(a), style);
    for (args, want) in [
        (&["--chained"][..], &["--chained", "true"][..]),
        (&["--chained", "false"], &["--chained", "false"]),
        (&["--chained=false"], &["--chained", "false"]),
        (
            &["--chained", "--x", "1"],
            &["--chained", "true", "--x", "1"],
        ),
        (&["--chained", "yes"], &["--chained", "yes"]),
        (&["--once"], &["--once"]),
        (&["--once", "true"], &["--once"]),
        (&["--once=1"], &["--once"]),
        (&["--once", "false"], &[]),
        (&["--once=F", "--x=1"], &["--x", "1"]),
    ] {
        assert_eq!(norm(args).unwrap(), v(want), "{args:?}");
    }
    let e = norm(&["--once", "maybe"]).unwrap_err();
    assert!(e.contains("--once") && e.contains("maybe"), "{e}");
    assert!(norm(&["--once="]).is_err());
}

#[test]
fn flag_beats_env_beats_default_with_both_empty_rules() {
    let env = |k: &str| match k {
        "EMPTY" => Some(String::new()),
        "BLANK" => Some("  ".to_string()),
        "SET" => Some("true".to_string()),
        _ => None,
    };
    let flag = Some(("--x".to_string(), "false".to_string()));
    let f = pick(flag, &env, &["SET"], EmptyEnv::Unset).unwrap();
    assert_eq!((f.source.as_str(), f.value.as_str()), ("--x", "false"));
    // Unset (viper's default): "" is skipped, the next name answers.
    let f = pick(None, &env, &["EMPTY", "SET"], EmptyEnv::Unset).unwrap();
    assert_eq!(f.source, "SET");
    assert!(pick(None, &env, &["EMPTY", "NONE"], EmptyEnv::Unset).is_none());
    // Value (AllowEmptyEnv): "" is the value of the first name that is set.
    let f = pick(None, &env, &["EMPTY", "SET"], EmptyEnv::Value).unwrap();
    assert_eq!((f.source.as_str(), f.value.as_str()), ("EMPTY", ""));
    // A blank value keeps a typed default only under AllowEmptyEnv; a blank flag is parsed.
    let found = pick(None, &env, &["BLANK"], EmptyEnv::Value);
    assert!(typed(found, true, parse_bool).unwrap());
    let found = pick(None, &env, &["BLANK"], EmptyEnv::Unset);
    assert!(typed(found, true, parse_bool).is_err());
    let found = pick(Some(("--x".into(), "".into())), &env, &[], EmptyEnv::Value);
    assert!(typed(found, true, parse_bool).is_err());
    assert!(!typed(None, false, parse_bool).unwrap());
}
