//! Our entry out of the conf dir at cleanup ([`crate::install::steps::teardown`]): only our entry removed from the
//! primary (atomic, mode kept), or our own file (standalone or Istio-owned) deleted.
//!
//! When the file we wrote to has vanished meanwhile (the primary CNI removed its config), there is nothing
//! to edit: that is logged and the other steps run as usual. Nothing is re-created.

use super::conflist::{self, PLUGIN_TYPE};
use super::select::{self, shown};
use crate::error::{Context, Result};
use crate::fsutil;
use crate::json::Value;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Removes our entry from (or, for our own files, deletes) the file `name` of the conf dir.
/// Returns a line for the log.
pub fn remove_config(dir: &Path, name: &OsStr, delete_whole_file: bool) -> Result<String> {
    let path = dir.join(name);
    let what = path.display().to_string();
    // The primary's CNI may rewrite the file meanwhile: the edit is swapped in only over the version it
    // was made from, and redone otherwise (never a lost update, also at shutdown).
    for _ in 0..50 {
        let stamp = fsutil::stamp(&path)?;
        let Some(bytes) = fsutil::read_config(&path, fsutil::MAX_CONFIG_BYTES)? else {
            return Ok(format!(
                "CNI config file {what} no longer exists; nothing to remove from it"
            ));
        };
        let Some(stamp) = stamp else { continue };
        if delete_whole_file {
            fsutil::remove_if_exists(&path)
                .with_context(|| format!("failed to remove CNI config file {what}"))?;
            return Ok(format!("removed CNI config file {what}"));
        }
        let text = super::libcni::go_text(&bytes);
        let updated = conflist::remove_entry(&text, &what)
            .with_context(|| format!("failed to read CNI config map from file {what}"))?;
        match updated {
            None => return Ok(format!("no istio-cni entry in {what}; left unchanged")),
            Some(new) if conflist::has_empty_plugins(&new) => {
                // Only our entry was in it: libcni rejects `"plugins": []`, so the file goes.
                fsutil::remove_if_exists(&path)
                    .with_context(|| format!("failed to remove CNI config file {what}"))?;
                return Ok(format!("removed {what}: it held only the istio-cni entry"));
            }
            Some(new) => {
                let mode = fsutil::mode_of(&path)?.unwrap_or(0o600);
                if fsutil::replace_if_unchanged(&path, new.as_bytes(), mode, stamp, &bytes)
                    .with_context(|| format!("failed to write updated CNI config to file {what}"))?
                {
                    return Ok(format!("removed the istio-cni entry from {what}"));
                }
            }
        }
    }
    Err(crate::error::Error::other(format!(
        "{what} kept changing while we removed our entry from it"
    )))
}

/// Which file at cleanup is the Istio-owned one, deleted whole.
#[derive(Debug, Clone, Copy)]
pub enum Owned<'a> {
    /// None (standalone mode).
    None,
    /// The owned layout is on: the file of this name.
    Named(&'a OsStr),
    /// The owned layout is off: the file of this name only when it is the layout's copy as we write it
    /// ([`super::layout::is_owned_copy`]); any other file there only loses our entry.
    Copy(&'a OsStr),
}

/// `--uninstall` without a record of what was written: every candidate file that is ours (top-level type
/// `istio-cni`, or the Istio-owned file: `owned`) is deleted; every list holding an `istio-cni` plugin
/// loses it.
pub fn scan_and_remove(dir: &Path, owned: Owned<'_>) -> Result<Vec<String>> {
    let mut notes = Vec::new();
    let mut first_err = None;
    let mut cands = select::list_candidates(dir)?;
    cands.sort_by(|a, b| a.name.as_bytes().cmp(b.name.as_bytes()));
    for c in cands {
        let Ok(bytes) = &c.content else { continue };
        let Ok(Value::Object(o)) = super::libcni::parse(bytes, &shown(&c.name)) else {
            continue;
        };
        let ours_whole = super::libcni::plugin_type(&o) == Some(PLUGIN_TYPE)
            || match owned {
                Owned::None => false,
                Owned::Named(n) => c.name == n,
                Owned::Copy(n) => c.name == n && super::layout::is_owned_copy(bytes),
            };
        if ours_whole || super::check::list_has_entry(&o) {
            match remove_config(dir, &c.name, ours_whole) {
                Ok(n) => notes.push(n),
                Err(e) => {
                    log::error!("{e}");
                    first_err.get_or_insert(e);
                }
            }
        }
    }
    first_err.map_or(Ok(notes), Err)
}
