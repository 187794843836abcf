//! Where our entry goes, so that no file the container runtime could load lacks it (issue 32); pure.
//!
//! - **Default layout** (our entry merged into the primary's file): every valid configuration gets it, not
//!   only the runtime's current choice. When a higher-priority file disappears, the runtime falls back to
//!   the next valid one, which already holds our entry: no window. (A file appearing without our entry is
//!   the one window left: until we merge into it, the runtime may load it.)
//! - **Owned layout** (`ISTIO_OWNED_CNI_CONFIG=true`): our own file, sorting before the primary, holds the
//!   primary's plugins followed by ours ([`owned_text`]), always derived from the primary as it is now,
//!   never a stale copy. With no primary at all it holds only our entry, marked [`NO_PRIMARY_KEY`]: the
//!   plugin refuses every ADD through it (fail closed), and the file keeps sorting first, so a primary
//!   appearing later is never loaded before we have derived the owned file from it. A valid file sorting
//!   before the owned one would be the runtime's choice: it gets our entry too ([`entry_files`]), and the
//!   installer reports not ready while it is there (the layout is not what the operator set up).

use super::check::{self, CheckCtx, Outcome};
use super::conflist::{self, UPSTREAM_CNI_VERSION};
use super::select::shown;
use crate::error::Result;
use crate::json::{self, Object, Value};
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;

/// The network name of the owned file while there is no primary.
pub const NO_PRIMARY_NETWORK: &str = "istio-cni-no-primary";
/// The key of our entry that makes the plugin refuse ADD (the owned file while there is no primary).
pub use crate::cni::conf::NO_PRIMARY_KEY;

/// The conf-dir files that must hold our entry, besides the owned file: in the default layout every valid
/// configuration (`valid`, in the runtime's order); in the owned layout (`owned`: its name) the valid
/// files sorting before it, which the runtime would load instead of it.
pub fn entry_files(valid: &[OsString], owned: Option<&OsStr>) -> Vec<OsString> {
    match owned {
        None => valid.to_vec(),
        Some(o) => valid
            .iter()
            .filter(|n| n.as_bytes() < o.as_bytes())
            .cloned()
            .collect(),
    }
}

/// The primary the owned file is derived from: CNI_CONF_NAME when set, else the runtime's first valid
/// file other than the owned one; `None` when there is none.
pub fn owned_primary(
    valid: &[OsString],
    owned: &OsStr,
    configured: Option<&OsStr>,
) -> Option<OsString> {
    match configured.filter(|c| *c != owned) {
        Some(c) => Some(c.to_os_string()),
        None => valid.iter().find(|n| n.as_os_str() != owned).cloned(),
    }
}

/// The `.conf`/`.conflist` twin of a name ([`super::select::choose`] looks a pinned name up through it).
fn twin(name: &OsStr) -> Option<OsString> {
    use std::os::unix::ffi::OsStringExt;
    super::select::list_name_for(name).or_else(|| {
        let b = name.as_bytes();
        b.strip_suffix(b"list")
            .filter(|_| super::select::is_list_name(name))
            .map(|s| OsString::from_vec(s.to_vec()))
    })
}

/// The owned file's content: the primary's document (`primary`, its text) with our entry appended, as the
/// default layout merges it; with no primary, a list holding only our entry marked [`NO_PRIMARY_KEY`].
/// `Err` when the primary cannot be merged (the caller reports it; nothing is written).
pub fn owned_text(primary: Option<&str>, entry: &Object) -> Result<String> {
    match primary {
        Some(text) => conflist::merge(text, entry),
        None => {
            let mut marked = entry.clone();
            marked.insert(NO_PRIMARY_KEY.into(), Value::Bool(true));
            let mut list = Object::new();
            list.insert("cniVersion".into(), json::string(UPSTREAM_CNI_VERSION));
            list.insert("name".into(), json::string(NO_PRIMARY_NETWORK));
            list.insert("plugins".into(), Value::Array(Default::default()));
            conflist::merge(&conflist::render(&Value::Object(list))?, &marked)
        }
    }
}

/// Default layout: the first valid file after the runtime's own (`valid[0]`) that lacks our entry
/// (`entry`, exactly once), skipping those `skip` says we could not merge into with this content.
pub fn fallback_lacking(
    valid: &[OsString],
    entry: &Object,
    read: &dyn Fn(&OsStr) -> Option<Vec<u8>>,
    skip: &dyn Fn(&OsStr, &[u8]) -> bool,
) -> Option<OsString> {
    valid.iter().skip(1).find_map(|f| {
        let b = read(f)?;
        (!check::holds_our_entry(&b, entry) && !skip(f, &b)).then(|| f.clone())
    })
}

fn invalid(reason: String) -> Outcome {
    Outcome::Invalid { reason }
}

/// The owned layout's check (upstream's owned-mode rules, made strict): every valid file sorting before
/// the owned one holds our entry (else reinstall: the runtime loads it instead of ours), the owned file
/// exists and is exactly [`owned_text`] of the primary as it is now (else reinstall: never a stale copy),
/// and then we are ready only when nothing sorts before it and a primary exists. `read(name)`: the file's
/// bytes, `None` when missing.
pub fn check_owned(
    ctx: &CheckCtx<'_>,
    valid: &[OsString],
    owned: &OsStr,
    read: &dyn Fn(&OsStr) -> Option<Vec<u8>>,
) -> Outcome {
    let path_of = |n: &OsStr| format!("{}/{}", ctx.dir, shown(n));
    let not_first = || {
        let first = valid.first().map(|f| shown(f).into_owned());
        format!(
            "istio owned CNI config does not exist or is not the highest priority. Got {} instead",
            first.as_deref().unwrap_or("nothing")
        )
    };
    let before = entry_files(valid, Some(owned));
    let holds = |n: &OsStr| read(n).is_some_and(|b| check::holds_our_entry(&b, ctx.entry));
    if let Some(f) = before.iter().find(|f| !holds(f)) {
        return invalid(format!(
            "{}: {} sorts before it, so the container runtime uses it: it gets our entry too",
            not_first(),
            path_of(f)
        ));
    }
    if !valid.iter().any(|n| n == owned) {
        return invalid(not_first());
    }
    let Some(bytes) = read(owned) else {
        return invalid(format!("CNI config file removed: {}", path_of(owned)));
    };
    if !check::holds_entry(&bytes) {
        return invalid(format!(
            "istio-cni plugin not found in Istio CNI config at {}",
            path_of(owned)
        ));
    }
    // A pinned name that does not exist is found through its `.conf`/`.conflist` twin, as written.
    let primary = owned_primary(valid, owned, ctx.configured).map(|p| match read(&p) {
        None => twin(&p).filter(|t| read(t).is_some()).unwrap_or(p),
        Some(_) => p,
    });
    let primary_text = match &primary {
        Some(p) => match read(p) {
            Some(b) => Some(super::libcni::go_text(&b)),
            None => return invalid(format!("primary CNI config {} removed", path_of(p))),
        },
        None => None,
    };
    let want = match owned_text(primary_text.as_deref(), ctx.entry) {
        Ok(t) => t,
        Err(e) => return invalid(e.to_string()),
    };
    if bytes != want.as_bytes() {
        return invalid(match &primary {
            Some(p) => format!(
                "{} is not {} with our entry: the primary changed since it was written (or our \
                 settings did); deriving it again",
                path_of(owned),
                path_of(p)
            ),
            None => format!(
                "{} still copies a primary CNI config that no longer exists; replacing it with our \
                 entry alone, which refuses every pod until a primary appears (fail closed)",
                path_of(owned)
            ),
        });
    }
    if let Some(f) = before.first() {
        return Outcome::Preempted {
            runtime_file: f.clone(),
            reason: format!(
                "{} sorts before the Istio-owned {} and the container runtime uses it: our entry is in it \
                 too, so pods are still redirected, but the owned layout is not in effect (the other \
                 CNI's next rewrite of that file drops our entry until we add it back). Remove or rename \
                 it, or set ISTIO_OWNED_CNI_CONFIG_FILENAME to a name that sorts before it",
                path_of(f),
                path_of(owned)
            ),
        };
    }
    if primary.is_none() {
        return Outcome::Preempted {
            runtime_file: owned.to_os_string(),
            reason: format!(
                "no primary CNI config in {}: {} holds only our entry, which refuses every pod (fail \
                 closed) until the node's CNI writes its configuration",
                ctx.dir,
                path_of(owned)
            ),
        };
    }
    Outcome::Valid { warning: None }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(owned_primary(&v, owned, None), Some("10-b.conflist".into()));
        let pinned = Some(OsStr::new("20-c.conflist"));
        assert_eq!(
            owned_primary(&v, owned, pinned),
            Some("20-c.conflist".into())
        );
        // A file sorting before ours is the runtime's first choice, so it is the primary.
        let v = names(&["01-x.conflist", "02-istio-cni.conflist", "10-b.conflist"]);
        assert_eq!(owned_primary(&v, owned, None), Some("01-x.conflist".into()));
        assert_eq!(
            owned_primary(&names(&["02-istio-cni.conflist"]), owned, None),
            None
        );
        assert_eq!(owned_primary(&[], owned, None), None);
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
        check_owned(&ctx, &valid, OsStr::new(OWNED), &read)
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

    #[test]
    fn fallbacks_lacking_our_entry() {
        let e = entry();
        let with = conflist::merge(PTP, &e).unwrap();
        let files = [
            ("05-a.conflist", with.clone()),
            ("10-b.conflist", with.clone()),
            ("20-c.conflist", PTP.to_string()),
        ];
        let valid: Vec<OsString> = files.iter().map(|(n, _)| n.into()).collect();
        let read = |n: &OsStr| {
            files
                .iter()
                .find(|(f, _)| OsStr::new(f) == n)
                .map(|(_, t)| t.clone().into_bytes())
        };
        let none = |_: &OsStr, _: &[u8]| false;
        assert_eq!(
            fallback_lacking(&valid, &e, &read, &none),
            Some("20-c.conflist".into())
        );
        // One we could not merge into, with this content: skipped.
        let known = |n: &OsStr, _: &[u8]| n == "20-c.conflist";
        assert_eq!(fallback_lacking(&valid, &e, &read, &known), None);
        // The runtime's own file is the check's business, not this one's.
        let valid: Vec<OsString> = vec!["20-c.conflist".into(), "05-a.conflist".into()];
        assert_eq!(fallback_lacking(&valid, &e, &read, &none), None);
    }
}
