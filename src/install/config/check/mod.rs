//! Validation of the installed state, upstream master's `checkValidCNIConfig` (installer.md §2.10), pure:
//! the caller lists the conf dir and provides a reader.
//!
//! The readiness invariant (issue 11): in chained mode we are valid (ready) only while the file the
//! runtime will pick — libcni's first valid configuration — holds our entry. Without CNI_CONF_NAME a new
//! first file means "reinstall there" (we follow the runtime, release-1.9's rule; master pins its first
//! choice, a deviation we reject). With CNI_CONF_NAME pinned, a higher-priority file without our entry
//! makes us [`Outcome::Preempted`]: not ready, nothing rewritten, the operator told what to do.

use super::conflist::{self, PLUGIN_TYPE};
use super::select::{shown, Listing};
use crate::error::Result;
use crate::json::{self, Object, Value};
use std::ffi::{OsStr, OsString};

mod owned;
pub use owned::check_owned;

/// What the check needs to know about the installer's state.
#[derive(Debug, Clone)]
pub struct CheckCtx<'a> {
    /// The conf dir as printed in messages.
    pub dir: &'a str,
    pub chained: bool,
    /// The Istio-owned file name when owned mode is on.
    pub owned: Option<&'a OsStr>,
    /// CNI_CONF_NAME as the operator set it.
    pub configured: Option<&'a OsStr>,
    /// The file the Istio configuration was last written to (a name in `dir`).
    pub installed: Option<&'a OsStr>,
    /// Our current entry ([`super::entry::PluginEntry::to_object`]): the file the runtime uses must
    /// hold exactly this, once — an entry someone edited (or a second copy) is reinstalled.
    pub entry: &'a Object,
    /// Files the runtime falls back to that our entry could not be merged into, with the content tried
    /// (default layout: such a file does not make us not ready until its content changes).
    pub unmergeable: &'a [(OsString, Vec<u8>)],
}

impl CheckCtx<'_> {
    /// `<dir>/<name>`, for messages.
    fn path(&self, name: &OsStr) -> String {
        format!("{}/{}", self.dir, shown(name))
    }
}

/// The verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Installed and valid; `warning` reports a preemption that does not break the invariant (standalone
    /// mode, or a higher-priority file that holds our entry too).
    Valid { warning: Option<String> },
    /// A (re)install is needed.
    Invalid { reason: String },
    /// Not ready: our plugin binary in a bin dir we install into is missing, not a regular file or not
    /// executable by its owner, so the runtime cannot run it (CRI-O then skips every list holding our
    /// entry). The binaries are installed again; the configuration is not rewritten. Only
    /// [`crate::install::steps::Installer::check`] says so (the configuration check here never does).
    Binary { reason: String },
    /// Not ready and nothing to rewrite: CNI_CONF_NAME is pinned and the runtime uses another file
    /// without our entry. `runtime_file` is that file; `reason` tells the operator what to do.
    Preempted {
        runtime_file: std::ffi::OsString,
        reason: String,
    },
}

/// `Err`: why a (re)install is needed.
type Why<T = ()> = std::result::Result<T, String>;

fn invalid(reason: impl Into<String>) -> Outcome {
    Outcome::Invalid {
        reason: reason.into(),
    }
}

/// Whether a configuration text holds an `istio-cni` plugin (a list entry, or a `.conf` of that type).
pub fn holds_entry(bytes: &[u8]) -> bool {
    match super::libcni::parse(bytes, "CNI config") {
        Ok(Value::Object(o)) => {
            super::libcni::plugin_type(&o) == Some(PLUGIN_TYPE) || list_has_entry(&o)
        }
        _ => false,
    }
}

/// Whether a list's `plugins` holds an `istio-cni` plugin.
pub fn list_has_entry(o: &Object) -> bool {
    json::arr_of(o, "plugins").is_some_and(|a| !entries_of(a).is_empty())
}

/// The `istio-cni` plugins of a list (libcni's case-insensitive `type`).
fn entries_of(plugins: &json::Array) -> Vec<&Object> {
    plugins
        .iter()
        .filter_map(|p| match p {
            Value::Object(po) if super::libcni::plugin_type(po) == Some(PLUGIN_TYPE) => Some(po),
            _ => None,
        })
        .collect()
}

/// Why a list's `plugins` does not hold exactly our current entry once; `None` when it does.
fn entry_mismatch(plugins: &json::Array, entry: &Object, what: &str) -> Option<String> {
    let found = entries_of(plugins);
    let want = json::object_to_compact(entry);
    match found.as_slice() {
        [] => Some(format!("istio-cni plugin not found in Istio CNI config at {what}")),
        [one] if json::object_to_compact(one) == want => None,
        [_] => Some(format!(
            "the istio-cni entry in {what} is not the one this installer writes (edited by someone?)"
        )),
        many => Some(format!(
            "{what} holds {} istio-cni entries; the plugin would run more than once",
            many.len()
        )),
    }
}

/// Whether a configuration text is a list holding exactly our current entry once.
pub fn holds_our_entry(bytes: &[u8], entry: &Object) -> bool {
    match super::libcni::parse(bytes, "CNI config") {
        Ok(Value::Object(o)) => {
            json::arr_of(&o, "plugins").is_some_and(|a| entry_mismatch(a, entry, "").is_none())
        }
        _ => false,
    }
}

/// Runs the check. `read(name)` returns the content of `<dir>/<name>`, `None` when missing.
pub fn check(
    ctx: &CheckCtx<'_>,
    listing: &Result<Listing>,
    read: &dyn Fn(&OsStr) -> Option<Vec<u8>>,
) -> Outcome {
    let (valid, blocked, skipped, older) = match listing {
        Ok(l) => (&l.valid, &l.blocked, &l.skipped, &l.older),
        Err(e) => return invalid(e.to_string()),
    };
    if let Some((name, why)) = blocked {
        return Outcome::Preempted {
            runtime_file: name.clone(),
            reason: format!(
                "{}/{} sorts before every file we can read and the container runtime may use it \
                 ({why}): pods started now may NOT be redirected. Remove it or shrink it below {} bytes",
                ctx.dir,
                shown(name),
                crate::fsutil::MAX_CONFIG_BYTES
            ),
        };
    }
    let Some(first) = valid.first() else {
        return invalid(format!("no networks found in {}", ctx.dir));
    };
    let older = older.as_ref().filter(|_| ctx.chained);
    if let Some(out) = older.and_then(|(f, why)| older_lacking(ctx, first, f, why, read)) {
        return out;
    }
    if let (true, Some(owned)) = (ctx.chained, ctx.owned) {
        return match (check_owned(ctx, valid, skipped, owned, read), older) {
            (Outcome::Valid { .. }, Some((f, _))) => Outcome::Preempted {
                runtime_file: f.clone(),
                reason: format!(
                    "{} sorts before the Istio-owned {} and libcni before v1.2 (Debian 12's containerd \
                     1.6, podman 4.3) loads it: our entry is in it too, but the owned layout is not in \
                     effect there. Remove or fix it",
                    ctx.path(f),
                    ctx.path(owned)
                ),
            },
            (out, _) => out,
        };
    }
    let (warning, preempted) = match runtime_choice(ctx, first, skipped, read) {
        Ok(found) => found,
        Err(why) => return invalid(why),
    };
    if let Err(why) = installed_is_ours(ctx, read) {
        return invalid(why);
    }
    if !ctx.chained {
        return Outcome::Valid { warning };
    }
    // Following the runtime (chained, default layout: owned returned above), every file it falls back
    // to must hold our entry too.
    if ctx.configured.is_none() {
        if let Some(f) = fallback_lacking(valid, ctx, read) {
            return invalid(format!(
                "{} lacks our entry, and the container runtime falls back to it if the files before it go",
                ctx.path(&f)
            ));
        }
    }
    preempted.unwrap_or(Outcome::Valid { warning })
}

/// A list libcni v1.3 skips (`why`) but v1.1 loads, sorting before every valid file (`older`,
/// [`super::select::Listing::older`]): Debian 12's containerd 1.6 and podman 4.3 use it instead of
/// `first`, so it must hold our entry. `None` when it does; else reinstall (our entry goes into it too),
/// or, when it cannot take our entry (its content tried, `ctx.unmergeable`) or CNI_CONF_NAME is pinned
/// (we write nowhere else), not ready with nothing to rewrite.
fn older_lacking(
    ctx: &CheckCtx<'_>,
    first: &OsStr,
    older: &OsStr,
    why: &str,
    read: &dyn Fn(&OsStr) -> Option<Vec<u8>>,
) -> Option<Outcome> {
    let bytes = read(older)?;
    if holds_our_entry(&bytes, ctx.entry) {
        return None;
    }
    let reason = format!(
        "{} sorts before {} and lacks our entry: libcni v1.3 skips it ({why}), but libcni before v1.2, \
         as in Debian 12's containerd 1.6 and podman 4.3, loads it",
        ctx.path(older),
        ctx.path(first)
    );
    let unmergeable = ctx
        .unmergeable
        .iter()
        .any(|(n, b)| n == older && *b == bytes);
    if unmergeable || (ctx.configured.is_some() && ctx.owned.is_none()) {
        return Some(Outcome::Preempted {
            runtime_file: older.to_os_string(),
            reason: format!(
                "{reason}; {}: pods started now by such a runtime are NOT redirected. Remove or fix it",
                if unmergeable {
                    "our entry cannot be added to it"
                } else {
                    "CNI_CONF_NAME is pinned elsewhere"
                }
            ),
        });
    }
    Some(invalid(format!("{reason}: it gets our entry too")))
}

/// When the runtime's file (`first`) is not the one we installed: the warning saying so and, with
/// CNI_CONF_NAME pinned in chained mode, the [`Outcome::Preempted`] to report once the installed file
/// checks out (`None` when `first` holds our entry). `Err`: reinstall in `first` (chained, not pinned).
fn runtime_choice(
    ctx: &CheckCtx<'_>,
    first: &OsStr,
    skipped: &[(OsString, String)],
    read: &dyn Fn(&OsStr) -> Option<Vec<u8>>,
) -> Why<(Option<String>, Option<Outcome>)> {
    if Some(first) == ctx.installed {
        return Ok((None, None));
    }
    let path_of = |n: &OsStr| ctx.path(n);
    let installed_path = ctx.installed.map(path_of).unwrap_or_default();
    let warning = Some(format!(
        "CNI config file \"{installed_path}\" preempted by \"{}\"",
        path_of(first)
    ));
    if !ctx.chained || ctx.owned.is_some() {
        return Ok((warning, None));
    }
    let Some(configured) = ctx.configured else {
        return Err(format!(
            "perform initial update of highest priority config {} using existing configuration from file {} \
             (the container runtime uses it; our entry moves there from {})",
            path_of(first),
            shown(first),
            ctx.installed.map(path_of).as_deref().unwrap_or("nowhere")
        ));
    };
    if read(first).is_some_and(|b| holds_our_entry(&b, ctx.entry)) {
        return Ok((warning, None));
    }
    let skip = skipped
        .iter()
        .find(|(n, _)| Some(n.as_os_str()) == ctx.installed);
    let why = match skip {
        // A pinned file the runtime does not load at all (a list in a .json, say).
        Some((_, e)) => format!(
            "it does not load CNI_CONF_NAME={} at all: {e}",
            shown(configured)
        ),
        None => format!("it sorts before CNI_CONF_NAME={}", shown(configured)),
    };
    let preempted = Outcome::Preempted {
        runtime_file: first.to_os_string(),
        reason: format!(
            "the container runtime now uses {} ({why}) and it has no istio-cni entry: pods \
             started now are NOT redirected. Remove or rename that file, or set CNI_CONF_NAME={} \
             (or unset CNI_CONF_NAME to follow the runtime's choice)",
            path_of(first),
            shown(first)
        ),
    };
    Ok((warning, Some(preempted)))
}

/// Whether the file we installed is still what we wrote; `Err`: why not (missing, not an object, edited
/// (standalone), or (chained) a plugin list that is unreadable or lacks our entry exactly once).
fn installed_is_ours(ctx: &CheckCtx<'_>, read: &dyn Fn(&OsStr) -> Option<Vec<u8>>) -> Why {
    let Some(installed) = ctx.installed else {
        // Upstream says "CNI config file removed: " with an empty path here.
        return Err(match ctx.configured {
            Some(c) => format!("our entry is not written yet (CNI_CONF_NAME={})", shown(c)),
            None => "our entry is not written yet".to_string(),
        });
    };
    let path = ctx.path(installed);
    let bytes = read(installed).ok_or_else(|| format!("CNI config file removed: {path}"))?;
    let obj = match super::libcni::parse(&bytes, &path) {
        Ok(Value::Object(o)) => o,
        Ok(_) => return Err(format!("{path}: not a JSON object")),
        Err(e) => return Err(e.to_string()),
    };
    if !ctx.chained {
        let mut want = ctx.entry.clone();
        want.insert(
            "cniVersion".into(),
            json::string(conflist::UPSTREAM_CNI_VERSION),
        );
        if json::to_compact(&Value::Object(obj)) != json::to_compact(&Value::Object(want)) {
            return Err(format!("istio-cni CNI config file modified: {path}"));
        }
        return Ok(());
    }
    let plugins = json::arr_of(&obj, "plugins")
        .ok_or_else(|| format!("{path}: error reading plugin list from CNI config"))?;
    for p in plugins.iter() {
        let Value::Object(po) = p else {
            return Err(format!(
                "{path}: error reading plugin from CNI config plugin list"
            ));
        };
        // libcni matches the key ignoring case (`"TYPE"` runs the plugin); so do we (upstream reads
        // only `type` and then never becomes ready: a deviation, README).
        match super::libcni::field(po, "type") {
            Some(Value::String(_)) => {}
            Some(other) => {
                return Err(format!(
                    "plugin type {} not a string",
                    json::to_compact(other)
                ))
            }
            None => return Err("plugin type <nil> not a string".to_string()),
        }
    }
    entry_mismatch(plugins, ctx.entry, &path).map_or(Ok(()), Err)
}

/// Default layout: the first valid file after the runtime's own (`valid[0]`, checked above) that lacks
/// our entry (exactly once), skipping those in `ctx.unmergeable` with this content.
fn fallback_lacking(
    valid: &[OsString],
    ctx: &CheckCtx<'_>,
    read: &dyn Fn(&OsStr) -> Option<Vec<u8>>,
) -> Option<OsString> {
    valid.iter().skip(1).find_map(|f| {
        let b = read(f)?;
        let known = ctx.unmergeable.iter().any(|(n, ub)| n == f && *ub == b);
        (!holds_our_entry(&b, ctx.entry) && !known).then(|| f.clone())
    })
}

#[cfg(test)]
mod tests;
