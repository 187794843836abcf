//! Validation of the installed state, upstream master's `checkValidCNIConfig` (installer.md §2.10), pure:
//! the caller lists the conf dir and provides a reader.
//!
//! The readiness invariant (issue 11): in chained mode we are valid (ready) only while the file the
//! runtime will pick — libcni's first valid configuration — holds our entry. Without CNI_CONF_NAME a new
//! first file means "reinstall there" (we follow the runtime, release-1.9's rule; master pins its first
//! choice, a deviation we reject). With CNI_CONF_NAME pinned, a higher-priority file without our entry
//! makes us [`Outcome::Preempted`]: not ready, nothing rewritten, the operator told what to do.

use super::conflist::{self, PLUGIN_TYPE};
use super::layout;
use super::select::{shown, Listing};
use crate::error::Result;
use crate::json::{self, Object, Value};
use std::ffi::{OsStr, OsString};

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

/// The verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Installed and valid; `warning` reports a preemption that does not break the invariant (standalone
    /// mode, or a higher-priority file that holds our entry too).
    Valid { warning: Option<String> },
    /// A (re)install is needed.
    Invalid { reason: String },
    /// Not ready and nothing to rewrite: CNI_CONF_NAME is pinned and the runtime uses another file
    /// without our entry. `runtime_file` is that file; `reason` tells the operator what to do.
    Preempted {
        runtime_file: std::ffi::OsString,
        reason: String,
    },
}

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
    let (valid, blocked, skipped) = match listing {
        Ok(l) => (&l.valid, &l.blocked, &l.skipped),
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
    if let (true, Some(owned)) = (ctx.chained, ctx.owned) {
        return check_owned(ctx, valid, skipped, owned, read);
    }
    let path_of = |n: &OsStr| format!("{}/{}", ctx.dir, shown(n));
    let installed_path = ctx.installed.map(path_of).unwrap_or_default();
    let mut warning = None;
    let mut preempted = None;
    if Some(first.as_os_str()) != ctx.installed {
        if ctx.chained && ctx.owned.is_none() {
            let Some(configured) = ctx.configured else {
                return invalid(format!(
                    "perform initial update of highest priority config {} using existing configuration from file {} \
                     (the container runtime uses it; our entry moves there from {})",
                    path_of(first),
                    shown(first),
                    ctx.installed.map(path_of).as_deref().unwrap_or("nowhere")
                ));
            };
            if !read(first).is_some_and(|b| holds_our_entry(&b, ctx.entry)) {
                // Reported once the installed file itself checks out (upstream's errors come first).
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
                preempted = Some(Outcome::Preempted {
                    runtime_file: first.clone(),
                    reason: format!(
                        "the container runtime now uses {} ({why}) and it has no istio-cni entry: pods \
                         started now are NOT redirected. Remove or rename that file, or set CNI_CONF_NAME={} \
                         (or unset CNI_CONF_NAME to follow the runtime's choice)",
                        path_of(first),
                        shown(first)
                    ),
                });
            }
        }
        warning = Some(format!(
            "CNI config file \"{installed_path}\" preempted by \"{}\"",
            path_of(first)
        ));
    }
    let Some(installed) = ctx.installed else {
        // Upstream says "CNI config file removed: " with an empty path here.
        return invalid(match ctx.configured {
            Some(c) => format!("our entry is not written yet (CNI_CONF_NAME={})", shown(c)),
            None => "our entry is not written yet".to_string(),
        });
    };
    let Some(bytes) = read(installed) else {
        return invalid(format!("CNI config file removed: {installed_path}"));
    };
    let obj = match super::libcni::parse(&bytes, &installed_path) {
        Ok(Value::Object(o)) => o,
        Ok(_) => return invalid(format!("{installed_path}: not a JSON object")),
        Err(e) => return invalid(e.to_string()),
    };
    if !ctx.chained {
        let mut want = ctx.entry.clone();
        want.insert(
            "cniVersion".into(),
            json::string(conflist::UPSTREAM_CNI_VERSION),
        );
        if json::to_compact(&Value::Object(obj)) != json::to_compact(&Value::Object(want)) {
            return invalid(format!(
                "istio-cni CNI config file modified: {installed_path}"
            ));
        }
        return Outcome::Valid { warning };
    }
    let Some(plugins) = json::arr_of(&obj, "plugins") else {
        return invalid(format!(
            "{installed_path}: error reading plugin list from CNI config"
        ));
    };
    for p in plugins.iter() {
        let Value::Object(po) = p else {
            return invalid(format!(
                "{installed_path}: error reading plugin from CNI config plugin list"
            ));
        };
        // libcni matches the key ignoring case (`"TYPE"` runs the plugin); so do we (upstream reads
        // only `type` and then never becomes ready: a deviation, README).
        let ty = super::libcni::field(po, "type");
        match ty {
            Some(Value::String(_)) => {}
            Some(other) => {
                return invalid(format!(
                    "plugin type {} not a string",
                    json::to_compact(other)
                ))
            }
            None => return invalid("plugin type <nil> not a string"),
        }
    }
    if let Some(why) = entry_mismatch(plugins, ctx.entry, &installed_path) {
        return invalid(why);
    }
    // Following the runtime (chained, default layout: owned returned above), every file it falls back
    // to must hold our entry too.
    if ctx.configured.is_none() {
        if let Some(f) = fallback_lacking(valid, ctx, read) {
            return invalid(format!(
                "{} lacks our entry, and the container runtime falls back to it if the files before it go",
                path_of(&f)
            ));
        }
    }
    preempted.unwrap_or(Outcome::Valid { warning })
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

/// The owned layout's check (upstream's owned-mode rules, made strict): every valid file sorting before
/// the owned one holds our entry (else reinstall: the runtime loads it instead of ours), the owned file
/// exists and is exactly [`layout::owned_text`] of the primary as it is now (else reinstall: never a stale copy),
/// and then we are ready only when nothing sorts before it, a pinned CNI_CONF_NAME names the primary (the
/// runtime's own choice, [`layout::pin_refusal`]) and a primary exists. `read(name)`: the file's
/// bytes, `None` when missing.
pub fn check_owned(
    ctx: &CheckCtx<'_>,
    valid: &[OsString],
    skipped: &[(OsString, String)],
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
    let before = layout::entry_files(valid, Some(owned));
    let holds = |n: &OsStr| read(n).is_some_and(|b| holds_our_entry(&b, ctx.entry));
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
    if !holds_entry(&bytes) {
        return invalid(format!(
            "istio-cni plugin not found in Istio CNI config at {}",
            path_of(owned)
        ));
    }
    // Derived from the runtime's own choice only; a pinned name that does not exist is looked up through
    // its `.conf`/`.conflist` twin, as written.
    let primary = layout::owned_primary(valid, owned);
    let pin = ctx.configured.map(|c| match read(c) {
        None => super::select::twin(c)
            .filter(|t| read(t).is_some())
            .unwrap_or_else(|| c.to_os_string()),
        Some(_) => c.to_os_string(),
    });
    let primary_text = match &primary {
        Some(p) => match read(p) {
            Some(b) => Some(super::libcni::go_text(&b)),
            None => return invalid(format!("primary CNI config {} removed", path_of(p))),
        },
        None => None,
    };
    let want = match layout::owned_text(primary_text.as_deref(), ctx.entry) {
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
    if let Some(why) = pin.and_then(|p| layout::pin_refusal(valid, skipped, owned, &p)) {
        return Outcome::Preempted {
            runtime_file: primary.unwrap_or_else(|| owned.to_os_string()),
            reason: why,
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
mod tests;
