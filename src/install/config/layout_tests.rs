//! The layouts' pure rules: which files get our entry, the owned file's derivation and check.

use super::*;
use crate::install::config::check::{check_owned, CheckCtx, Outcome};

fn names(v: &[&str]) -> Vec<OsString> {
    v.iter().map(OsString::from).collect()
}

fn entry() -> Object {
    let mut o = Object::new();
    o.insert("type".into(), json::string("istio-cni"));
    o.insert("name".into(), json::string("istio-cni"));
    o
}

#[test]
fn default_layout_every_valid_file_gets_our_entry() {
    let v = names(&["05-a.conflist", "10-b.conf", "20-c.json"]);
    assert_eq!(entry_files(&v, None), v);
    assert!(entry_files(&[], None).is_empty());
}

#[test]
fn owned_layout_only_files_sorting_before_the_owned_one() {
    let v = names(&["01-x.conflist", "02-istio-cni.conflist", "10-b.conflist"]);
    let owned = OsStr::new("02-istio-cni.conflist");
    assert_eq!(entry_files(&v, Some(owned)), names(&["01-x.conflist"]));
    // Bytewise, as libcni sorts: "02-a" < "02-istio".
    let v = names(&["02-a.conflist", "02-istio-cni.conflist", "03.conf"]);
    assert_eq!(entry_files(&v, Some(owned)), names(&["02-a.conflist"]));
    let v = names(&["02-istio-cni.conflist", "10-b.conflist"]);
    assert!(entry_files(&v, Some(owned)).is_empty());
}

#[test]
fn the_owned_files_primary() {
    let owned = OsStr::new("02-istio-cni.conflist");
    let v = names(&["02-istio-cni.conflist", "10-b.conflist", "20-c.conflist"]);
    assert_eq!(owned_primary(&v, owned), Some("10-b.conflist".into()));
    // A file sorting before ours is the runtime's first choice, so it is the primary.
    let v = names(&["01-x.conflist", "02-istio-cni.conflist", "10-b.conflist"]);
    assert_eq!(owned_primary(&v, owned), Some("01-x.conflist".into()));
    assert_eq!(
        owned_primary(&names(&["02-istio-cni.conflist"]), owned),
        None
    );
    assert_eq!(owned_primary(&[], owned), None);
}

#[test]
fn a_pin_naming_a_file_the_runtime_does_not_use_first_is_refused() {
    let owned = OsStr::new("02-istio-cni.conflist");
    let v = names(&[
        "02-istio-cni.conflist",
        "10-calico.conflist",
        "20-flannel.conflist",
    ]);
    assert_eq!(
        pin_refusal(&v, &[], owned, OsStr::new("10-calico.conflist")),
        None
    );
    assert_eq!(pin_refusal(&v, &[], owned, owned), None);
    let r = pin_refusal(&v, &[], owned, OsStr::new("20-flannel.conflist")).unwrap();
    assert!(r.contains("CNI_CONF_NAME=20-flannel.conflist"), "{r}");
    assert!(r.contains("loads another file before it"), "{r}");
    assert!(r.contains("10-calico.conflist"), "{r}");
    let r = pin_refusal(&v, &[], owned, OsStr::new("undetectable.file")).unwrap();
    assert!(r.contains("not a .conf, .conflist or .json file"), "{r}");
    // A list in a .json: libcni skips it.
    let skipped = vec![(OsString::from("05-list.json"), "no 'type'".to_string())];
    let r = pin_refusal(&v, &skipped, owned, OsStr::new("05-list.json")).unwrap();
    assert!(r.contains("does not load it at all: no 'type'"), "{r}");
    let r = pin_refusal(
        &names(&["02-istio-cni.conflist"]),
        &skipped,
        owned,
        OsStr::new("05-list.json"),
    )
    .unwrap();
    assert!(r.contains("no configuration of its own"), "{r}");
}

#[test]
fn a_pin_naming_a_missing_configuration_file_says_it_does_not_exist() {
    // A name the runtime would load, were it there: the refusal says it is missing, not that the runtime
    // cannot load such a name.
    let owned = OsStr::new("02-istio-cni.conflist");
    let v = names(&["02-istio-cni.conflist", "10-calico.conflist"]);
    for pinned in ["30-missing.conflist", "30-missing.conf", "30-missing.json"] {
        let r = pin_refusal(&v, &[], owned, OsStr::new(pinned)).unwrap();
        assert!(r.contains("(it does not exist)"), "{r}");
        assert!(r.contains("its own choice 10-calico.conflist"), "{r}");
    }
}

#[test]
fn owned_text_is_the_primary_plus_our_entry() {
    let primary = r#"{"cniVersion":"1.0.0","name":"p","plugins":[{"type":"ptp"},{"type":"istio-cni","old":1}]}"#;
    let t = owned_text(Some(primary), &entry()).unwrap();
    assert_eq!(t, conflist::merge(primary, &entry()).unwrap());
    let v = json::parse(&t, "t").unwrap();
    let Value::Object(o) = v else { panic!() };
    let plugins = json::arr_of(&o, "plugins").unwrap();
    assert_eq!(plugins.len(), 2, "{t}");
    assert!(!t.contains("\"old\""), "{t}");
    // A primary we cannot merge: an error, not a file.
    assert!(owned_text(Some("[1]"), &entry()).is_err());
}

#[test]
fn owned_text_without_a_primary_holds_only_our_marked_entry() {
    let t = owned_text(None, &entry()).unwrap();
    let Value::Object(o) = json::parse(&t, "t").unwrap() else {
        panic!()
    };
    assert_eq!(json::str_of(&o, "name"), Some(NO_PRIMARY_NETWORK));
    let plugins = json::arr_of(&o, "plugins").unwrap();
    assert_eq!(plugins.len(), 1, "{t}");
    let Value::Object(p) = &plugins[0] else {
        panic!()
    };
    assert_eq!(json::str_of(p, "type"), Some("istio-cni"));
    assert!(matches!(p.get(NO_PRIMARY_KEY), Some(Value::Bool(true))));
    // libcni loads it (so it keeps sorting first and the runtime never falls through to a file
    // without our entry).
    assert!(super::super::libcni::validate(
        "02-istio-cni.conflist",
        t.as_bytes(),
        &super::super::plugin_dir::no_plugin_dir
    )
    .is_ok());
    // Deterministic: the check compares bytes.
    assert_eq!(t, owned_text(None, &entry()).unwrap());
}

const OWNED: &str = "02-istio-cni.conflist";
const PTP: &str = r#"{"cniVersion":"1.0.0","name":"p","plugins":[{"type":"ptp","ipam":{"subnet":"10.1.0.0/24"}}]}"#;

/// Runs the owned check over an in-memory conf dir (`files`: name, content; `valid`: their order).
fn owned_check(files: &[(&str, String)], configured: Option<&str>) -> Outcome {
    let e = entry();
    let ctx = CheckCtx {
        dir: "/d",
        chained: true,
        owned: Some(OsStr::new(OWNED)),
        configured: configured.map(OsStr::new),
        installed: Some(OsStr::new(OWNED)),
        entry: &e,
        unmergeable: &[],
    };
    let mut valid: Vec<OsString> = files.iter().map(|(n, _)| OsString::from(n)).collect();
    valid.sort();
    let files: Vec<(String, String)> = files
        .iter()
        .map(|(n, t)| (n.to_string(), t.clone()))
        .collect();
    let read = move |n: &OsStr| {
        files
            .iter()
            .find(|(f, _)| OsStr::new(f) == n)
            .map(|(_, t)| t.clone().into_bytes())
    };
    check_owned(&ctx, &valid, &[], OsStr::new(OWNED), &read)
}

fn reason(o: Outcome) -> String {
    match o {
        Outcome::Invalid { reason } => reason,
        other => panic!("expected invalid, got {other:?}"),
    }
}

#[test]
fn owned_file_derived_from_the_primary_as_it_is_now_is_valid() {
    let owned = owned_text(Some(PTP), &entry()).unwrap();
    let o = owned_check(&[(OWNED, owned), ("10-ptp.conflist", PTP.into())], None);
    assert!(matches!(o, Outcome::Valid { .. }), "{o:?}");
}

#[test]
fn owned_file_copying_a_primary_that_changed_is_rederived() {
    // Same plugin types, another subnet: before, only the types were compared (ready with a stale copy).
    let stale = owned_text(Some(PTP), &entry()).unwrap();
    let now = PTP.replace("10.1.0.0", "10.2.0.0");
    let r = reason(owned_check(
        &[(OWNED, stale), ("10-ptp.conflist", now)],
        None,
    ));
    assert!(r.contains("the primary changed"), "{r}");
}

#[test]
fn owned_file_copying_a_primary_that_is_gone_is_replaced_and_then_not_ready() {
    let stale = owned_text(Some(PTP), &entry()).unwrap();
    let r = reason(owned_check(&[(OWNED, stale)], None));
    assert!(r.contains("no longer exists"), "{r}");
    let alone = owned_text(None, &entry()).unwrap();
    match owned_check(&[(OWNED, alone)], None) {
        Outcome::Preempted {
            runtime_file,
            reason,
        } => {
            assert_eq!(runtime_file, OWNED);
            assert!(reason.contains("no primary CNI config"), "{reason}");
        }
        other => panic!("not ready without a primary, got {other:?}"),
    }
}

#[test]
fn a_file_sorting_before_the_owned_one_gets_our_entry_and_keeps_us_not_ready() {
    let first = PTP.replace("10.1.0.0", "10.3.0.0");
    let owned = owned_text(Some(&first), &entry()).unwrap();
    let files = [
        ("01-first.conflist", first.clone()),
        (OWNED, owned.clone()),
        ("10-ptp.conflist", PTP.to_string()),
    ];
    let r = reason(owned_check(&files, None));
    assert!(r.contains("01-first.conflist sorts before it"), "{r}");
    // With our entry in it (and the owned file derived from it, the runtime's first file), not
    // ready, naming it.
    let with = conflist::merge(&first, &entry()).unwrap();
    let owned = owned_text(Some(&with), &entry()).unwrap();
    let files = [
        ("01-first.conflist", with),
        (OWNED, owned),
        ("10-ptp.conflist", PTP.to_string()),
    ];
    match owned_check(&files, None) {
        Outcome::Preempted {
            runtime_file,
            reason,
        } => {
            assert_eq!(runtime_file, "01-first.conflist");
            assert!(
                reason.contains("ISTIO_OWNED_CNI_CONFIG_FILENAME"),
                "{reason}"
            );
        }
        other => panic!("not ready while a file sorts first, got {other:?}"),
    }
}

/// O1 (issue 38): a pinned CNI_CONF_NAME naming a file the runtime loads after its own choice is not
/// the owned file's primary: the owned file derived from the pinned file is stale (reinstall from the
/// runtime's choice), and the one derived from the runtime's choice is not ready, naming the pin.
#[test]
fn owned_layout_pinned_to_a_lower_priority_file_derives_from_the_runtimes_choice_and_is_not_ready()
{
    let calico = PTP.replace("10.1.0.0", "10.4.0.0");
    let from_pin = owned_text(Some(PTP), &entry()).unwrap();
    let files = |owned: &str| {
        vec![
            (OWNED, owned.to_string()),
            ("10-calico.conflist", calico.clone()),
            ("20-flannel.conflist", PTP.to_string()),
        ]
    };
    let r = reason(owned_check(&files(&from_pin), Some("20-flannel.conflist")));
    assert!(r.contains("10-calico.conflist"), "{r}");
    let from_runtime = owned_text(Some(&calico), &entry()).unwrap();
    match owned_check(&files(&from_runtime), Some("20-flannel.conflist")) {
        Outcome::Preempted {
            runtime_file,
            reason,
        } => {
            assert_eq!(runtime_file, "10-calico.conflist");
            assert!(
                reason.contains("CNI_CONF_NAME=20-flannel.conflist"),
                "{reason}"
            );
        }
        other => panic!("a pin the runtime does not follow is not ready, got {other:?}"),
    }
    // Pinned to the runtime's choice: ready.
    let o = owned_check(&files(&from_runtime), Some("10-calico.conflist"));
    assert!(matches!(o, Outcome::Valid { .. }), "{o:?}");
}

/// O1: pinned to a `.json` holding a list (libcni skips it): never the owned file's primary.
#[test]
fn owned_layout_pinned_to_a_skipped_json_list_is_not_ready() {
    let e = entry();
    let ctx = CheckCtx {
        dir: "/d",
        chained: true,
        owned: Some(OsStr::new(OWNED)),
        configured: Some(OsStr::new("05-list.json")),
        installed: Some(OsStr::new(OWNED)),
        entry: &e,
        unmergeable: &[],
    };
    let calico = PTP.replace("10.1.0.0", "10.4.0.0");
    let valid = names(&[OWNED, "10-calico.conflist"]);
    let skipped = vec![(OsString::from("05-list.json"), "not a plugin".to_string())];
    let check = |owned: String| {
        let (c, o) = (calico.clone(), owned);
        let read = move |n: &OsStr| match n.to_str() {
            Some(OWNED) => Some(o.clone().into_bytes()),
            Some("10-calico.conflist") => Some(c.clone().into_bytes()),
            Some("05-list.json") => Some(PTP.as_bytes().to_vec()),
            _ => None,
        };
        check_owned(&ctx, &valid, &skipped, OsStr::new(OWNED), &read)
    };
    let from_pin = owned_text(Some(PTP), &entry()).unwrap();
    assert!(matches!(check(from_pin), Outcome::Invalid { .. }));
    match check(owned_text(Some(&calico), &entry()).unwrap()) {
        Outcome::Preempted { reason, .. } => {
            assert!(reason.contains("does not load it at all"), "{reason}")
        }
        other => panic!("not ready, got {other:?}"),
    }
}

#[test]
fn an_owned_copy_is_recognised_only_in_the_form_we_write() {
    let primary = r#"{"cniVersion":"0.3.1","name":"a","plugins":[{"type":"bridge"}]}"#;
    let conf = r#"{"cniVersion":"0.4.0","name":"c","type":"ptp"}"#;
    for owned in [
        owned_text(Some(primary), &entry()).unwrap(),
        owned_text(Some(conf), &entry()).unwrap(),
        owned_text(None, &entry()).unwrap(),
    ] {
        assert!(is_owned_copy(owned.as_bytes()), "{owned}");
        // The same document printed otherwise, or with our entry taken out, is not our copy.
        let v = json::parse(&owned, "t").unwrap();
        assert!(!is_owned_copy(json::to_compact(&v).as_bytes()), "{owned}");
        let without = conflist::remove_entry(&owned, "t").unwrap().unwrap();
        assert!(!is_owned_copy(without.as_bytes()), "{without}");
    }
    // Our entry not last, or twice: never written by us.
    let mut v = json::parse_object(&owned_text(Some(primary), &entry()).unwrap(), "t").unwrap();
    let Some(Value::Array(plugins)) = v.get_mut("plugins") else {
        panic!("no plugins")
    };
    plugins.reverse();
    let reversed = conflist::render(&Value::Object(v.clone())).unwrap();
    assert!(!is_owned_copy(reversed.as_bytes()), "{reversed}");
    let Some(Value::Array(plugins)) = v.get_mut("plugins") else {
        panic!("no plugins")
    };
    plugins.reverse();
    plugins.push(Value::Object(entry()));
    let twice = conflist::render(&Value::Object(v)).unwrap();
    assert!(!is_owned_copy(twice.as_bytes()), "{twice}");
    assert!(!is_owned_copy(primary.as_bytes()));
    assert!(!is_owned_copy(b"not json"));
}
