//! The check's entry rule, pure: the file the runtime uses must hold our current entry exactly once.

use super::*;
use crate::install::config::entry::{tests::entry, PluginEntry};
use crate::install::config::select::Listing;

fn run(chained: bool, name: &str, text: &str, e: &PluginEntry) -> Outcome {
    let obj = e.to_object();
    let ctx = CheckCtx {
        dir: "/d",
        chained,
        owned: None,
        configured: None,
        installed: Some(std::ffi::OsStr::new(name)),
        entry: &obj,
    };
    let listing = Ok(Listing {
        valid: vec![name.into()],
        ..Listing::default()
    });
    let text = text.to_string();
    check(&ctx, &listing, &move |_| Some(text.clone().into_bytes()))
}

const PRIMARY: &str =
    r#"{"name":"k8s-pod-network","cniVersion":"0.3.1","plugins":[{"type":"calico"}]}"#;

#[test]
fn chained_needs_our_current_entry_once() {
    let e = entry();
    let merged = conflist::merge(PRIMARY, &e.to_object()).unwrap();
    assert!(matches!(
        run(true, "10-calico.conflist", &merged, &e),
        Outcome::Valid { .. }
    ));
    // Another installer's settings (or a hand edit): reinstall.
    let mut other = e.clone();
    other.exclude_namespaces = Some(vec!["default".into()]);
    let Outcome::Invalid { reason } = run(true, "10-calico.conflist", &merged, &other) else {
        panic!("an edited entry must not be valid")
    };
    assert!(
        reason.contains("not the one this installer writes"),
        "{reason}"
    );
    // Twice: the plugin would run twice.
    let twice = merged.replace(
        "\"plugins\": [",
        "\"plugins\": [{\"name\":\"istio-cni\",\"type\":\"istio-cni\"},",
    );
    let Outcome::Invalid { reason } = run(true, "10-calico.conflist", &twice, &e) else {
        panic!("two entries must not be valid")
    };
    assert!(reason.contains("2 istio-cni entries"), "{reason}");
    let Outcome::Invalid { reason } = run(true, "10-calico.conflist", PRIMARY, &e) else {
        panic!("no entry must not be valid")
    };
    assert!(reason.contains("istio-cni plugin not found"), "{reason}");
}

#[test]
fn standalone_file_as_written_is_valid_and_an_edit_is_not() {
    let e = entry();
    let text = e.standalone_text();
    assert!(matches!(
        run(false, "YYY-istio-cni.conf", &text, &e),
        Outcome::Valid { .. }
    ));
    let edited = text.replace("\"kube-system\"", "\"default\"");
    assert!(matches!(
        run(false, "YYY-istio-cni.conf", &edited, &e),
        Outcome::Invalid { .. }
    ));
}
