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
        unmergeable: &[],
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

/// The conf dir's read for a test: the text of `files` by name, `None` for any other name.
fn reader<'a>(files: &'a [(&str, String)]) -> impl Fn(&OsStr) -> Option<Vec<u8>> + 'a {
    move |n: &OsStr| {
        files
            .iter()
            .find(|(f, _)| OsStr::new(f) == n)
            .map(|(_, t)| t.clone().into_bytes())
    }
}

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

/// Following the runtime (default layout), a file it falls back to must hold our entry too, unless our
/// entry could not be merged into it with this content.
#[test]
fn fallbacks_lacking_our_entry() {
    let e = entry().to_object();
    let with = conflist::merge(PRIMARY, &e).unwrap();
    let files = [
        ("05-a.conflist", with.clone()),
        ("10-b.conflist", with),
        ("20-c.conflist", PRIMARY.to_string()),
    ];
    let read = reader(&files);
    let valid: Vec<OsString> = files.iter().map(|(n, _)| n.into()).collect();
    let run = |configured: Option<&str>, unmergeable: &[(OsString, Vec<u8>)]| {
        let ctx = CheckCtx {
            dir: "/d",
            chained: true,
            owned: None,
            configured: configured.map(OsStr::new),
            installed: Some(OsStr::new("05-a.conflist")),
            entry: &e,
            unmergeable,
        };
        let listing = Ok(Listing {
            valid: valid.clone(),
            ..Listing::default()
        });
        check(&ctx, &listing, &read)
    };
    let Outcome::Invalid { reason } = run(None, &[]) else {
        panic!("a fallback without our entry must not be valid")
    };
    assert_eq!(
        reason,
        "/d/20-c.conflist lacks our entry, and the container runtime falls back to it if the files \
         before it go"
    );
    // One we could not merge into, with this content: skipped; once its content changes, not.
    let known = [("20-c.conflist".into(), PRIMARY.as_bytes().to_vec())];
    assert!(matches!(run(None, &known), Outcome::Valid { .. }));
    let changed = [("20-c.conflist".into(), b"{}".to_vec())];
    assert!(matches!(run(None, &changed), Outcome::Invalid { .. }));
    // Pinned (CNI_CONF_NAME): only the pinned file holds our entry.
    assert!(matches!(
        run(Some("05-a.conflist"), &[]),
        Outcome::Valid { .. }
    ));
    // The runtime's own file is the check's main rule, not this one's.
    let ctx = CheckCtx {
        dir: "/d",
        chained: true,
        owned: None,
        configured: None,
        installed: None,
        entry: &e,
        unmergeable: &[],
    };
    let first = ["20-c.conflist".into(), "05-a.conflist".into()];
    assert_eq!(fallback_lacking(&first, &ctx, &read), None);
}

#[test]
fn chained_a_runtime_file_before_the_installed_one_is_reinstalled_standalone_only_warned() {
    // Chained, not pinned: the runtime loads 05-other, which lacks our entry; the installed 10-calico holds
    // it. Never valid (pods started now would not be redirected): our entry moves to 05-other.
    let pe = entry();
    let e = pe.to_object();
    let with = conflist::merge(PRIMARY, &e).unwrap();
    let files = [
        ("05-other.conflist", PRIMARY.to_string()),
        ("10-calico.conflist", with),
    ];
    let read = reader(&files);
    let listing = Ok(Listing {
        valid: files.iter().map(|(n, _)| n.into()).collect(),
        ..Listing::default()
    });
    let ctx = CheckCtx {
        dir: "/d",
        chained: true,
        owned: None,
        configured: None,
        installed: Some(OsStr::new("10-calico.conflist")),
        entry: &e,
        unmergeable: &[],
    };
    let Outcome::Invalid { reason } = check(&ctx, &listing, &read) else {
        panic!("the runtime's file lacks our entry: not valid")
    };
    assert!(
        reason.contains("perform initial update of highest priority config /d/05-other.conflist"),
        "{reason}"
    );
    // Standalone: our own file, preempted by another one, is only a warning (upstream's).
    let own = pe.standalone_text();
    let files = [
        ("05-other.conflist", PRIMARY.to_string()),
        ("10-istio-cni.conf", own),
    ];
    let read = reader(&files);
    let ctx = CheckCtx {
        chained: false,
        installed: Some(OsStr::new("10-istio-cni.conf")),
        ..ctx
    };
    let listing = Ok(Listing {
        valid: files.iter().map(|(n, _)| n.into()).collect(),
        ..Listing::default()
    });
    let Outcome::Valid { warning: Some(w) } = check(&ctx, &listing, &read) else {
        panic!("standalone, preempted: valid with a warning")
    };
    assert!(w.contains("preempted by \"/d/05-other.conflist\""), "{w}");
}

#[test]
fn an_older_runtimes_list_lacking_our_entry_is_reinstalled_unless_it_cannot_take_it() {
    let e = entry().to_object();
    let with = conflist::merge(PRIMARY, &e).unwrap();
    let older = PRIMARY.replace("calico", "flannel");
    let files = [
        ("01-old.conflist", older.clone()),
        ("10-calico.conflist", with),
    ];
    let read = reader(&files);
    let run = |unmergeable: &[(OsString, Vec<u8>)]| {
        let ctx = CheckCtx {
            dir: "/d",
            chained: true,
            owned: None,
            configured: None,
            installed: Some(OsStr::new("10-calico.conflist")),
            entry: &e,
            unmergeable,
        };
        let listing = Ok(Listing {
            valid: vec!["10-calico.conflist".into()],
            older: Some(("01-old.conflist".into(), "skipped by v1.3".into())),
            ..Listing::default()
        });
        check(&ctx, &listing, &read)
    };
    let reinstall = |out: Outcome| match out {
        Outcome::Invalid { reason } => {
            assert!(reason.ends_with("it gets our entry too"), "{reason}")
        }
        other => panic!("reinstall expected, got {other:?}"),
    };
    reinstall(run(&[]));
    // Our entry could not be merged into it with this content: not ready, nothing to rewrite.
    match run(&[("01-old.conflist".into(), older.clone().into_bytes())]) {
        Outcome::Preempted {
            runtime_file,
            reason,
        } => {
            assert_eq!(runtime_file, "01-old.conflist");
            assert!(
                reason.contains("our entry cannot be added to it"),
                "{reason}"
            );
        }
        other => panic!("not ready expected, got {other:?}"),
    }
    // Another content or another file than the one tried: tried again.
    reinstall(run(&[("01-old.conflist".into(), b"{}".to_vec())]));
    reinstall(run(&[("02-x.conflist".into(), older.into_bytes())]));
}
