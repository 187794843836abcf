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

use super::conflist::{self, UPSTREAM_CNI_VERSION};
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

#[cfg(test)]
#[path = "layout_tests.rs"]
mod tests;
