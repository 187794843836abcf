//! Where our entry goes, so that no file the container runtime could load lacks it (issue 32); pure.
//!
//! - **Default layout** (our entry merged into the primary's file): every valid configuration gets it, not
//!   only the runtime's current choice. When a higher-priority file disappears, the runtime falls back to
//!   the next valid one, which already holds our entry: no window. (A file appearing without our entry is
//!   the one window left: until we merge into it, the runtime may load it.)
//! - **Owned layout** (`ISTIO_OWNED_CNI_CONFIG=true`): our own file, sorting before the primary, holds the
//!   primary's plugins followed by ours ([`owned_text`]), always derived from the primary as it is now,
//!   never a stale copy. The primary is the file the runtime would load without ours ([`owned_primary`]),
//!   whatever CNI_CONF_NAME says: a pin naming another file keeps us not ready ([`pin_refusal`]) instead
//!   of moving the node to that file's network (issue 38, O1). With no primary at all it holds only our entry, marked [`NO_PRIMARY_KEY`]: the
//!   plugin refuses every ADD through it (fail closed), and the file keeps sorting first, so a primary
//!   appearing later is never loaded before we have derived the owned file from it. A valid file sorting
//!   before the owned one would be the runtime's choice: it gets our entry too ([`entry_files`]), and the
//!   installer reports not ready while it is there (the layout is not what the operator set up).

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

/// The primary the owned file is derived from: the runtime's own choice, its first valid file other than
/// the owned one; `None` when there is none. Never a file the runtime would not load first: the owned file
/// sorts before every other, so deriving it from another file would move the node to that file's network.
pub fn owned_primary(valid: &[OsString], owned: &OsStr) -> Option<OsString> {
    valid.iter().find(|n| n.as_os_str() != owned).cloned()
}

/// Why a pinned CNI_CONF_NAME (`pinned`: the file it names as found, itself or its `.conf`/`.conflist`
/// twin) is not the owned layout's primary ([`owned_primary`]); `None` when it is (or names the owned
/// file itself, which is ignored). `skipped`: the candidates the runtime skips, with the reason.
pub fn pin_refusal(
    valid: &[OsString],
    skipped: &[(OsString, String)],
    owned: &OsStr,
    pinned: &OsStr,
) -> Option<String> {
    let runtime = owned_primary(valid, owned);
    if pinned == owned || runtime.as_deref() == Some(pinned) {
        return None;
    }
    let why = match skipped.iter().find(|(n, _)| n == pinned) {
        Some((_, e)) => format!("the container runtime does not load it at all: {e}"),
        None if valid.iter().any(|n| n == pinned) => "the container runtime loads another file \
                                                      before it"
            .to_string(),
        None if !super::select::is_candidate_name(pinned) => {
            "the container runtime does not load it at all: not a .conf, .conflist or .json file"
                .to_string()
        }
        None => "it does not exist".to_string(),
    };
    let runtime = match &runtime {
        Some(r) => format!("its own choice {}", shown(r)),
        None => "no configuration of its own".to_string(),
    };
    Some(format!(
        "CNI_CONF_NAME={} is not the file the container runtime uses ({why}); the Istio-owned {} is \
         derived from {runtime} instead, so the node keeps its network. Set CNI_CONF_NAME to that file \
         or unset it",
        shown(pinned),
        shown(owned),
    ))
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

/// Whether `bytes`, the file at the owned file's name (`ISTIO_OWNED_CNI_CONFIG_FILENAME`), is an owned file
/// as we write it ([`owned_text`]; upstream's owned mode prints the same): a list whose last plugin is its
/// only `istio-cni` plugin, printed exactly as merging that plugin into the list without it prints it.
/// With the owned layout switched off, only such a file is taken for the layout's leftover copy (it
/// sorts first and would shadow the primary) and removed; a file at that name in any other form is
/// someone else's.
pub fn is_owned_copy(bytes: &[u8]) -> bool {
    let text = super::libcni::go_text(bytes);
    let Ok(Value::Object(o)) = json::parse_go_depth(&text, "CNI config") else {
        return false;
    };
    let Some(Value::Object(last)) = json::arr_of(&o, "plugins").and_then(|p| p.last()) else {
        return false;
    };
    if super::libcni::plugin_type(last) != Some(conflist::PLUGIN_TYPE)
        || conflist::count_entries(&text) != 1
    {
        return false;
    }
    let Ok(Some(without)) = conflist::remove_entry(&text, "CNI config") else {
        return false;
    };
    conflist::merge(&without, last).is_ok_and(|again| again.as_bytes() == bytes)
}

#[cfg(test)]
#[path = "layout_tests.rs"]
mod tests;
