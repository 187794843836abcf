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
#[path = "layout_tests.rs"]
mod tests;
