use super::super::plugin_dir::{no_plugin_dir, PluginDir};
use super::*;

fn cand(name: &str, text: &str) -> Candidate {
    Candidate {
        name: name.into(),
        content: Ok(text.as_bytes().to_vec()),
    }
}

#[test]
fn libcni_rules() {
    let ok = |name: &str, text: &[u8], dir: &dyn Fn(&str) -> PluginDir| {
        validate(OsStr::new(name), text, dir).is_ok()
    };
    let none = no_plugin_dir;
    assert!(ok("a.conf", br#"{"type":"bridge"}"#, &none));
    assert!(!ok("a.conf", br#"{"type":""}"#, &none));
    assert!(!ok("a.conf", br#"{"name":"x"}"#, &none));
    assert!(!ok("a.conf", b"not json", &none));
    assert!(!ok("a.conflist", br#"{"plugins":[{"type":"x"}]}"#, &none));
    assert!(!ok(
        "a.conflist",
        br#"{"name":"n","pugins":[{"type":"x"}]}"#,
        &none
    ));
    assert!(!ok("a.conflist", br#"{"name":"n","plugins":[]}"#, &none));
    assert!(ok(
        "a.conflist",
        br#"{"name":"n","plugins":[{"type":"x"}]}"#,
        &none
    ));
    let dir = |n: &str| match n {
        "n" => PluginDir::Files(vec![("n/a.conf".into(), br#"{"type":"ptp"}"#.to_vec())]),
        _ => PluginDir::Files(Vec::new()),
    };
    assert!(ok("a.conflist", br#"{"name":"n"}"#, &dir));
    assert!(!ok("a.conflist", br#"[1]"#, &none));
}

#[test]
fn bytewise_order_and_twins() {
    let c = vec![
        cand("b.conflist", r#"{"name":"n","plugins":[{"type":"x"}]}"#),
        cand("b.conf", r#"{"type":"x"}"#),
        cand("B.conf", "junk"),
    ];
    let l = valid_configs("/d", &c, &no_plugin_dir).unwrap();
    assert_eq!(l.valid, vec!["b.conf", "b.conflist"]);
    assert_eq!(l.skipped.len(), 1);
    let ok = Ok(l);
    let exists = |n: &OsStr| n == "b.conflist";
    assert_eq!(
        choose(true, Some(OsStr::new("b.conf")), &ok, None, &exists),
        Choice::Use("b.conflist".into())
    );
    assert!(matches!(
        choose(true, Some(OsStr::new("x.conf")), &ok, None, &exists),
        Choice::Wait(_)
    ));
    assert_eq!(
        choose(false, None, &ok, None, &exists),
        Choice::Use(STANDALONE_DEFAULT.into())
    );
}

#[test]
fn json_files_are_single_plugin_candidates() {
    for (name, yes) in [
        ("05-x.json", true),
        (".json", true),
        ("x.json.bak", false),
        ("x.JSON", false),
        ("x.conflist", true),
    ] {
        assert_eq!(is_candidate_name(OsStr::new(name)), yes, "{name}");
    }
    let none = no_plugin_dir;
    // Loaded like a `.conf`: one plugin with a type; a list in a `.json` has no `type` and is skipped.
    assert!(validate(OsStr::new("a.json"), br#"{"type":"bridge"}"#, &none).is_ok());
    assert!(validate(
        OsStr::new("a.json"),
        br#"{"name":"n","plugins":[{"type":"x"}]}"#,
        &none
    )
    .is_err());
    let c = vec![
        cand("10-b.conflist", r#"{"name":"n","plugins":[{"type":"x"}]}"#),
        cand("05-a.json", r#"{"type":"x"}"#),
    ];
    let l = valid_configs("/d", &c, &no_plugin_dir).unwrap();
    assert_eq!(l.valid, vec!["05-a.json", "10-b.conflist"]);
    assert_eq!(
        list_name_for(OsStr::new("05-a.json")),
        Some("05-a.conflist".into())
    );
    // CNI_CONF_NAME naming a `.json` we already turned into a list finds the list.
    let exists = |n: &OsStr| n == "05-a.conflist";
    assert_eq!(
        choose(true, Some(OsStr::new("05-a.json")), &Ok(l), None, &exists),
        Choice::Use("05-a.conflist".into())
    );
}

#[test]
fn an_oversized_object_sorting_first_blocks_the_choice() {
    let list = r#"{"name":"n","plugins":[{"type":"x"}]}"#;
    let big = |name: &str, kind: fn(String) -> Unread| Candidate {
        name: name.into(),
        content: Err(kind(format!("{name}: too large"))),
    };
    let exists = |_: &OsStr| true;
    // First in order and the runtime may load it: no choice, and the check reports it.
    let c = vec![
        cand("10-a.conflist", list),
        big("05-big.conflist", Unread::Undecided),
    ];
    let l = valid_configs("/d", &c, &no_plugin_dir).unwrap();
    assert_eq!(
        l.blocked.as_ref().map(|b| b.0.as_os_str()),
        Some(OsStr::new("05-big.conflist"))
    );
    assert!(
        matches!(choose(true, None, &Ok(l), None, &exists), Choice::Wait(w) if w.contains("05-big.conflist"))
    );
    // After a valid file it does not matter: the runtime stops at the first valid one.
    let c = vec![
        cand("10-a.conflist", list),
        big("20-big.conflist", Unread::Undecided),
    ];
    let l = valid_configs("/d", &c, &no_plugin_dir).unwrap();
    assert!(l.blocked.is_none());
    assert_eq!(
        choose(true, None, &Ok(l), None, &exists),
        Choice::Use("10-a.conflist".into())
    );
    // One the runtime cannot load either (not JSON, a FIFO) is skipped, as libcni skips it.
    let c = vec![
        cand("10-a.conflist", list),
        big("05-zeros.conflist", Unread::Skip),
    ];
    let l = valid_configs("/d", &c, &no_plugin_dir).unwrap();
    assert!(l.blocked.is_none());
    assert_eq!(l.skipped.len(), 1);
}

#[test]
fn only_a_json_object_start_may_be_loaded() {
    assert!(first_is_object(b" \n\t{\"x\""));
    assert!(
        first_is_object(b"   "),
        "all blank so far: cannot tell, assume it may load"
    );
    assert!(!first_is_object(b"\0\0\0"));
    assert!(!first_is_object(b"[{}]"));
    assert!(!first_is_object(b"\xef\xbb\xbf{}"), "Go rejects a BOM");
}

#[test]
fn names_are_bytes() {
    let raw = OsString::from_vec(b"10-a\x80.conflist".to_vec());
    let list = r#"{"name":"n","plugins":[{"type":"x"}]}"#;
    let c = vec![
        cand("10-a\u{e9}.conflist", list),
        Candidate {
            name: raw.clone(),
            content: Ok(list.as_bytes().to_vec()),
        },
    ];
    // Go's sort.Strings: 0x80 before 0xc3 (é); through U+FFFD (ef bf bd) it would come after.
    let l = valid_configs("/d", &c, &no_plugin_dir).unwrap();
    assert_eq!(l.valid[0], raw);
    let exists = |n: &OsStr| n == raw.as_os_str();
    assert_eq!(
        choose(true, None, &Ok(l), None, &exists),
        Choice::Use(raw.clone())
    );
    assert!(is_candidate_name(&raw));
    assert_eq!(
        list_name_for(OsStr::from_bytes(b"\xff.conf")),
        Some(OsString::from_vec(b"\xff.conflist".to_vec()))
    );
}

#[test]
fn a_write_never_changes_which_file_the_runtime_uses() {
    let v = |names: &[&str]| -> Vec<OsString> { names.iter().map(OsString::from).collect() };
    let os = OsStr::new;
    // The primary merged in place, or its .conflist form (.json sorts after, .conf before its list).
    assert!(keeps_runtime_choice(
        &v(&["10-a.conflist", "20-b.conflist"]),
        os("10-a.conflist"),
        os("10-a.conflist"),
        true
    )
    .is_ok());
    assert!(keeps_runtime_choice(
        &v(&["10-a.json", "20-b.conflist"]),
        os("10-a.json"),
        os("10-a.conflist"),
        true
    )
    .is_ok());
    assert!(keeps_runtime_choice(
        &v(&["10-a.conf"]),
        os("10-a.conf"),
        os("10-a.conflist"),
        true
    )
    .is_ok());
    // A list in a pinned .json (skipped) made a valid list: calico instead of flannel.
    let e = keeps_runtime_choice(
        &v(&["20-flannel.conflist"]),
        os("10-calico.json"),
        os("10-calico.conflist"),
        true,
    )
    .unwrap_err();
    assert!(
        e.contains("use 10-calico.conflist instead of 20-flannel.conflist"),
        "{e}"
    );
    // Edited in place and still skipped: nothing changes.
    assert!(keeps_runtime_choice(
        &v(&["20-flannel.conflist"]),
        os("10-calico.json"),
        os("10-calico.json"),
        false
    )
    .is_ok());
    assert!(keeps_runtime_choice(&[], os("10-calico.json"), os("10-calico.json"), false).is_ok());
    // A pinned file made valid where the runtime had none, or one it loaded made invalid.
    // Where the runtime loads nothing (no pod starts), the pinned file may become its file; another not.
    assert!(keeps_runtime_choice(&[], os("10-x.conflist"), os("10-x.conflist"), true).is_ok());
    assert!(keeps_runtime_choice(&[], os("x.conf"), os("x.conflist"), true).is_ok());
    assert!(keeps_runtime_choice(
        &v(&["10-x.conflist"]),
        os("10-x.conflist"),
        os("10-x.conflist"),
        false
    )
    .is_err());
    // A .conf whose list sorts after another valid file: that file would become the runtime's.
    let e = keeps_runtime_choice(
        &v(&["x.conf", "x.conf.conf"]),
        os("x.conf"),
        os("x.conflist"),
        true,
    )
    .unwrap_err();
    assert!(e.contains("use x.conf.conf instead of x.conflist"), "{e}");
    // A pinned .json whose list would sort before the runtime's file.
    assert!(keeps_runtime_choice(
        &v(&["10-a.d.conf", "10-a.json"]),
        os("10-a.json"),
        os("10-a.conflist"),
        true
    )
    .is_err());
    assert!(keeps_runtime_choice(
        &v(&["05-z.conflist", "10-a.json"]),
        os("10-a.json"),
        os("10-a.conflist"),
        true
    )
    .is_ok());
}

#[test]
fn a_single_plugin_file_the_runtime_loads_becomes_a_list_and_any_other_is_edited_in_place() {
    let loads = |n: &OsStr, b: &[u8]| validate(n, b, &no_plugin_dir).is_ok();
    let absent = |_: &OsStr| true;
    let list = r#"{"name":"k8s-pod-network","plugins":[{"type":"calico"}]}"#;
    let merged = r#"{"name":"k8s-pod-network","plugins":[{"type":"calico"},{"type":"istio-cni"}]}"#;
    let flannel = [OsString::from("20-flannel.conflist")];
    let target = |name: &str, text: &str, valid: &[OsString]| {
        merge_target(
            OsStr::new(name),
            text.as_bytes(),
            merged,
            valid,
            &loads,
            &absent,
        )
    };
    for skipped in ["10-calico.json", "10-calico.conf"] {
        let t = target(skipped, list, &flannel);
        assert_eq!(t, Ok(None), "{skipped}: in place, still skipped");
    }
    // With no network at all, a list in a pinned .conf becomes its .conflist, as upstream renames it
    // (upstream's e2e case "confFile env var point to missing file initially"); a .json stays in place.
    assert_eq!(target("x.conf", list, &[]), Ok(Some("x.conflist".into())));
    assert_eq!(target("x.json", list, &[]), Ok(None));
    let single = r#"{"name":"c","type":"calico"}"#;
    let valid = [
        OsString::from("10-calico.json"),
        OsString::from("20-flannel.conflist"),
    ];
    assert_eq!(
        target("10-calico.json", single, &valid),
        Ok(Some("10-calico.conflist".into()))
    );
    let e = merge_target(
        OsStr::new("10-calico.json"),
        single.as_bytes(),
        merged,
        &valid,
        &loads,
        &|_: &OsStr| false,
    )
    .unwrap_err();
    assert!(
        e.contains("10-calico.conflist exists and is not ours"),
        "{e}"
    );
}

#[test]
fn older_names_the_first_skipped_list_an_older_libcni_loads() {
    let old_only = r#"{"cniVersion":"0.4.0","name":"x","disableGC":1,"plugins":[{"type":"ptp"}]}"#;
    let c = vec![
        cand("00-junk.conflist", "junk"),
        cand("03-old.conflist", old_only),
        cand("05-old.conflist", old_only),
        cand("10-a.conflist", r#"{"name":"n","plugins":[{"type":"x"}]}"#),
    ];
    let l = valid_configs("/d", &c, &no_plugin_dir).unwrap();
    assert_eq!(l.valid, vec!["10-a.conflist"]);
    assert_eq!(l.skipped.len(), 3);
    // Not the junk no libcni loads: the first one v1.1 loads, which Debian 12's runtimes use.
    assert_eq!(
        l.older.as_ref().map(|o| o.0.as_os_str()),
        Some(OsStr::new("03-old.conflist"))
    );
    // After a valid file no runtime gets that far.
    let c = vec![
        cand("10-a.conflist", r#"{"name":"n","plugins":[{"type":"x"}]}"#),
        cand("20-old.conflist", old_only),
    ];
    assert!(valid_configs("/d", &c, &no_plugin_dir)
        .unwrap()
        .older
        .is_none());
}

/// What a real directory lists: candidate names that are not directories, each read; one over the read
/// limit is undecided (the runtime may load it) only when it starts like a JSON object, and skipped
/// otherwise (a sparse file of zeros, text: libcni fails it at its first byte).
#[test]
fn a_pinned_list_still_a_single_plugin_file_is_found_as_its_conf() {
    assert_eq!(twin(OsStr::new("x.conflist")), Some("x.conf".into()));
    assert_eq!(twin(OsStr::new("x.json")), Some("x.conflist".into()));
    assert_eq!(twin(OsStr::new("x.list")), None);
    assert_eq!(twin(OsStr::new("x.txt")), None);
    // CNI_CONF_NAME=10-a.conflist while the primary is still 10-a.conf: that file is the one.
    let c = vec![cand("10-a.conf", r#"{"type":"x"}"#)];
    let l = valid_configs("/d", &c, &no_plugin_dir);
    let exists = |n: &OsStr| n == "10-a.conf";
    assert_eq!(
        choose(true, Some(OsStr::new("10-a.conflist")), &l, None, &exists),
        Choice::Use("10-a.conf".into())
    );
}

/// A pinned `.json` the runtime loads, whose `.conflist` would sort before the runtime's file: refused,
/// not written in place instead (a list in a `.json` is a file the runtime then skips).
#[test]
fn a_loaded_json_whose_list_would_change_the_runtimes_file_is_refused() {
    let loads = |n: &OsStr, b: &[u8]| validate(n, b, &no_plugin_dir).is_ok();
    let merged = r#"{"name":"k8s-pod-network","plugins":[{"type":"calico"},{"type":"istio-cni"}]}"#;
    let valid = [OsString::from("10-a.d.conf"), OsString::from("10-a.json")];
    let e = merge_target(
        OsStr::new("10-a.json"),
        br#"{"name":"c","type":"calico"}"#,
        merged,
        &valid,
        &loads,
        &|_: &OsStr| true,
    )
    .unwrap_err();
    assert!(
        e.contains("use 10-a.conflist instead of 10-a.d.conf"),
        "{e}"
    );
}
