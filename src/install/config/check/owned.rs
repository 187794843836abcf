//! The owned layout's check ([`check_owned`]): the Istio-owned file is written as derived, and it is
//! the file the runtime uses.

use super::super::layout;
use super::super::select::shown;
use super::{holds_entry, holds_our_entry, invalid, CheckCtx, Outcome, Why};
use std::ffi::{OsStr, OsString};

/// The owned layout's check (upstream's owned-mode rules, made strict): every valid file sorting before
/// the owned one holds our entry (else reinstall: the runtime loads it instead of ours), the owned file
/// exists and is exactly [`layout::owned_text`] of the primary as it is now (else reinstall: never a stale
/// copy, `owned_written`), and then we are ready only when nothing sorts before it, a pinned
/// CNI_CONF_NAME names the primary (the runtime's own choice, [`layout::pin_refusal`]) and a primary
/// exists. `read(name)`: the file's bytes, `None` when missing.
pub fn check_owned(
    ctx: &CheckCtx<'_>,
    valid: &[OsString],
    skipped: &[(OsString, String)],
    owned: &OsStr,
    read: &dyn Fn(&OsStr) -> Option<Vec<u8>>,
) -> Outcome {
    let before = layout::entry_files(valid, Some(owned));
    let primary = match owned_written(ctx, valid, &before, owned, read) {
        Ok(primary) => primary,
        Err(why) => return invalid(why),
    };
    if let Some(f) = before.first() {
        return Outcome::Preempted {
            runtime_file: f.clone(),
            reason: format!(
                "{} sorts before the Istio-owned {} and the container runtime uses it: our entry is in it \
                 too, so pods are still redirected, but the owned layout is not in effect (the other \
                 CNI's next rewrite of that file drops our entry until we add it back). Remove or rename \
                 it, or set ISTIO_OWNED_CNI_CONFIG_FILENAME to a name that sorts before it",
                ctx.path(f),
                ctx.path(owned)
            ),
        };
    }
    // A pinned name that does not exist is looked up through its `.conf`/`.conflist` twin, as written.
    let pin = ctx.configured.map(|c| match read(c) {
        None => super::super::select::twin(c)
            .filter(|t| read(t).is_some())
            .unwrap_or_else(|| c.to_os_string()),
        Some(_) => c.to_os_string(),
    });
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
                ctx.path(owned)
            ),
        };
    }
    Outcome::Valid { warning: None }
}

/// Whether the owned file holds what we would write now: every file `before` it holds our entry, it is
/// valid and holds our entry, and it is [`layout::owned_text`] of the primary as it is now. `Ok`: the
/// primary (derived from the runtime's own choice only); `Err`: why to reinstall.
fn owned_written(
    ctx: &CheckCtx<'_>,
    valid: &[OsString],
    before: &[OsString],
    owned: &OsStr,
    read: &dyn Fn(&OsStr) -> Option<Vec<u8>>,
) -> Why<Option<OsString>> {
    let not_first = || {
        let first = valid.first().map(|f| shown(f).into_owned());
        format!(
            "istio owned CNI config does not exist or is not the highest priority. Got {} instead",
            first.as_deref().unwrap_or("nothing")
        )
    };
    let holds = |n: &OsStr| read(n).is_some_and(|b| holds_our_entry(&b, ctx.entry));
    if let Some(f) = before.iter().find(|f| !holds(f)) {
        return Err(format!(
            "{}: {} sorts before it, so the container runtime uses it: it gets our entry too",
            not_first(),
            ctx.path(f)
        ));
    }
    if !valid.iter().any(|n| n == owned) {
        return Err(not_first());
    }
    let path = ctx.path(owned);
    let bytes = read(owned).ok_or_else(|| format!("CNI config file removed: {path}"))?;
    if !holds_entry(&bytes) {
        return Err(format!(
            "istio-cni plugin not found in Istio CNI config at {path}"
        ));
    }
    let primary = layout::owned_primary(valid, owned);
    let primary_text = match &primary {
        Some(p) => match read(p) {
            Some(b) => Some(super::super::libcni::go_text(&b)),
            None => return Err(format!("primary CNI config {} removed", ctx.path(p))),
        },
        None => None,
    };
    let want = layout::owned_text(primary_text.as_deref(), ctx.entry).map_err(|e| e.to_string())?;
    if bytes == want.as_bytes() {
        return Ok(primary);
    }
    Err(match &primary {
        Some(p) => format!(
            "{path} is not {} with our entry: the primary changed since it was written (or our \
             settings did); deriving it again",
            ctx.path(p)
        ),
        None => format!(
            "{path} still copies a primary CNI config that no longer exists; replacing it with our \
             entry alone, which refuses every pod until a primary appears (fail closed)"
        ),
    })
}
