use super::*;
use crate::install::config::plugin_dir::no_plugin_dir;

fn ok(name: &str, text: &str) -> bool {
    validate(name, text.as_bytes(), &no_plugin_dir).is_ok()
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
    let ptp = |n: &str| match n {
        "n" => PluginDir::Files(vec![("n/a.conf".into(), br#"{"type":"ptp"}"#.to_vec())]),
        _ => PluginDir::Files(Vec::new()),
    };
    assert!(validate("a.conflist", br#"{"name":"n"}"#, &ptp).is_ok());
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
        &no_plugin_dir
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

/// The plugin types libcni would run from a file we call valid, read with [`plugin_type`] (the lookup the
/// check, the merge and cleanup share).
fn types_of(file: &str, text: &str) -> Vec<String> {
    let Ok(Value::Object(o)) = parse(text.as_bytes(), "vector") else {
        return Vec::new();
    };
    if !file.ends_with(".conflist") {
        return plugin_type(&o).into_iter().map(str::to_string).collect();
    }
    json::arr_of(&o, "plugins")
        .map(|a| {
            a.iter()
                .filter_map(|p| match p {
                    Value::Object(po) => plugin_type(po).map(str::to_string),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default()
}

/// `vectors.json`: documents → libcni's decision (and the plugin types it runs), each checked
/// against Go 1.19's `encoding/json` (Debian 12's containerd) with libcni 1.3.0's loading logic: which of
/// several case-insensitive keys wins, duplicate keys, null, Unicode folding (ſ, K), nesting depth. Those
/// with `derived` were read from libcni's and Go's sources, not run (the list's `name` as a directory of
/// plugins, `cniVersions`); `dir` lays out the conf dir around the file, read as the installer reads it.
#[test]
fn go_vectors() {
    let vectors = json::parse(include_str!("vectors.json"), "vectors.json").unwrap();
    let Value::Array(vectors) = vectors else {
        panic!("vectors.json: not a list")
    };
    let mut wrong = Vec::new();
    for v in vectors.iter() {
        let Value::Object(v) = v else {
            panic!("vector: not an object")
        };
        let case = json::str_of(v, "case").unwrap();
        let file = json::str_of(v, "file").unwrap();
        let text = json::str_of(v, "text").unwrap();
        let want = matches!(v.get("valid"), Some(Value::Bool(true)));
        // A conf dir of its own: the file, and the files and directories `dir` names ("x/" a directory).
        let conf = crate::fsutil::test_dir("libcni-vector").join("conf");
        std::fs::create_dir_all(&conf).unwrap();
        std::fs::write(conf.join(file), text).unwrap();
        if let Some(Value::Object(files)) = v.get("dir") {
            for (rel, content) in files.iter() {
                let p = conf.join(rel);
                std::fs::create_dir_all(if rel.ends_with('/') {
                    &p
                } else {
                    p.parent().unwrap()
                })
                .unwrap();
                if let Value::String(t) = content {
                    if !rel.ends_with('/') {
                        std::fs::write(&p, t).unwrap();
                    }
                }
            }
        }
        let got = validate(file, text.as_bytes(), &|n| {
            super::super::plugin_dir::read(&conf, n)
        });
        std::fs::remove_dir_all(conf.parent().unwrap()).unwrap();
        if got.is_ok() != want {
            wrong.push(format!(
                "{case}: {file} {text} → {got:?}, libcni says valid={want}"
            ));
            continue;
        }
        if let Some(want_types) = json::opt_string_list(v, "types", case).unwrap() {
            let got_types = types_of(file, text);
            if got_types != want_types {
                wrong.push(format!(
                    "{case}: types {got_types:?}, libcni runs {want_types:?}"
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {} vectors differ from Go:\n{}",
        wrong.len(),
        vectors.len(),
        wrong.join("\n")
    );
}

/// A list nesting `depth` levels in all (the list, `plugins`, the plugin, then arrays under `x`), its
/// one plugin of type `ptp`, followed by `more` (more plugins, or nothing).
pub fn nested_list(depth: usize, more: &str) -> String {
    let inner = depth - 3;
    format!(
        r#"{{"name":"n","cniVersion":"1.0.0","plugins":[{{"type":"ptp","x":{}{}}}{more}]}}"#,
        "[".repeat(inner),
        "]".repeat(inner)
    )
}

/// What the installer does with a document nested `depth` deep, as far as the stack is concerned: the
/// verdict, our entry found, a merge, a removal, the owned-config check's types.
fn deep_pipeline(depth: usize) -> (bool, bool, std::result::Result<usize, String>) {
    use super::super::{check, conflist};
    let text = nested_list(depth, r#",{"type":"istio-cni"}"#);
    let valid = validate("a.conflist", text.as_bytes(), &no_plugin_dir).is_ok();
    let held = check::holds_entry(text.as_bytes());
    let entry = Object::new();
    let merged = conflist::merge(&text, &entry).map_err(|e| e.to_string());
    if let Ok(m) = &merged {
        assert_eq!(
            conflist::count_entries(m),
            0,
            "our (empty) entry replaced the old one"
        );
        assert!(m.contains("\"x\": [\n"), "the deep plugin kept");
        conflist::remove_entry(m, "m").unwrap();
    }
    (valid, held, merged.map(|m| m.len()))
}

/// Go accepts 10,000 levels and refuses 10,001 (`maxNestingDepth`); so do we, on the test thread and on a
/// thread with a 64 KiB stack (the parser, the printer and dropping a value are iterative). A merge into a
/// list 1,000 deep is written; 10,000 deep would print (indented, as upstream) as ~200 MB and is refused.
#[test]
fn nesting_as_deep_as_go_allows_on_any_stack() {
    let run = || {
        let ok = deep_pipeline(10_000);
        assert!(ok.0 && ok.1, "10,000 levels: valid, entry found");
        let e = ok.2.unwrap_err();
        assert!(e.contains("would be larger than"), "{e}");
        let too_deep = deep_pipeline(10_001);
        assert!(!too_deep.0 && !too_deep.1, "10,001 levels: invalid");
        assert!(too_deep.2.unwrap_err().contains("nested deeper than 10000"));
        let e = validate(
            "a.conflist",
            nested_list(10_001, "").as_bytes(),
            &no_plugin_dir,
        );
        assert!(e.unwrap_err().contains("nested deeper than 10000 levels"));
        let (valid, held, merged) = deep_pipeline(1_000);
        assert!(valid && held);
        assert!(merged.unwrap() > 1_000_000, "indented as Go indents");
    };
    crate::json::tests::on_this_and_a_small_stack(run);
}

#[test]
fn libcni_v1_1_reads_no_plugin_directory_and_fewer_keys() {
    let v = |rules: Rules, name: &str, text: &str, dir: &dyn Fn(&str) -> PluginDir| {
        validate_as(rules, name, text.as_bytes(), dir).is_ok()
    };
    let unlistable = |_: &str| PluginDir::Error("not a directory".into());
    let with_conf =
        |_: &str| PluginDir::Files(vec![("n/a.conf".into(), br#"{"type":"ptp"}"#.to_vec())]);
    // Only v1.3 skips these (Debian 12's containerd 1.6 and podman 4.3 load them).
    for (text, dir) in [
        (
            r#"{"name":"n","plugins":[{"type":"x"}]}"#,
            &unlistable as &dyn Fn(&str) -> PluginDir,
        ),
        (
            r#"{"name":"n","cniVersions":["x"],"plugins":[{"type":"x"}]}"#,
            &no_plugin_dir,
        ),
        (
            r#"{"name":"n","disableGC":1,"plugins":[{"type":"x"}]}"#,
            &no_plugin_dir,
        ),
        (
            r#"{"name":"n","loadOnlyInlinedPlugins":"maybe","plugins":[{"type":"x"}]}"#,
            &no_plugin_dir,
        ),
        (
            r#"{"name":"n","plugins":[{"type":"x","cni.dev/valid-attachments":1}]}"#,
            &no_plugin_dir,
        ),
    ] {
        assert!(!v(Rules::V1_3, "a.conflist", text, dir), "{text}");
        assert!(v(Rules::V1_1, "a.conflist", text, dir), "{text}");
    }
    assert!(!v(
        Rules::V1_3,
        "a.conf",
        r#"{"type":"x","cni.dev/valid-attachments":1}"#,
        &no_plugin_dir
    ));
    assert!(v(
        Rules::V1_1,
        "a.conf",
        r#"{"type":"x","cni.dev/valid-attachments":1}"#,
        &no_plugin_dir
    ));
    // Only v1.3 loads these.
    for (text, dir) in [
        (
            r#"{"name":"n","disableCheck":"true","plugins":[{"type":"x"}]}"#,
            &no_plugin_dir as &dyn Fn(&str) -> PluginDir,
        ),
        (r#"{"name":"n"}"#, &with_conf),
    ] {
        assert!(v(Rules::V1_3, "a.conflist", text, dir), "{text}");
        assert!(!v(Rules::V1_1, "a.conflist", text, dir), "{text}");
    }
    // Both: the common rules.
    for text in [
        r#"{"name":"n","plugins":[]}"#,
        r#"{"plugins":[{"type":"x"}]}"#,
        r#"{"name":"n","plugins":[{"type":1}]}"#,
        r#"{"name":"n","disableCheck":null,"plugins":[{"type":"x"}]}"#,
    ] {
        assert!(
            !v(Rules::V1_1, "a.conflist", text, &no_plugin_dir),
            "{text}"
        );
    }
    assert!(v(
        Rules::V1_1,
        "a.conflist",
        r#"{"name":"n","disableCheck":true,"plugins":[{"type":"x"}]}"#,
        &no_plugin_dir
    ));
}
