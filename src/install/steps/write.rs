//! Writing our configuration (upstream `createCNIConfigFile`) in each layout ([`crate::install::config::layout`]): the
//! standalone file, our entry merged into the primary and every file the runtime falls back to, or the
//! Istio-owned list derived from the primary. Effects; the decisions are [`crate::install::config::layout`] and
//! [`crate::install::config::select`].

use super::{write_if_changed, ConfigWrite, Installer};
use crate::error::{Context, Error, Result};
use crate::fsutil;
use crate::install::config::cleanup;
use crate::install::config::layout;
use crate::install::config::originals;
use crate::install::config::select::{self, shown, Choice};
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;

impl Installer {
    /// Writes our configuration (upstream `createCNIConfigFile`): merge into the primary, or the
    /// Istio-owned list, or the standalone file. Identical content is not rewritten. Following the
    /// runtime's choice (no CNI_CONF_NAME), every other valid file gets our entry too ([`layout`]).
    pub fn write_config(&mut self) -> Result<ConfigWrite> {
        let choice = self.choose();
        let s = &self.settings;
        if s.chained && s.istio_owned {
            return self.write_owned(choice);
        }
        let choice = match self.retire_owned_copy()? {
            true => self.choose(),
            false => choice,
        };
        let s = &self.settings;
        let name = match choice {
            Choice::Use(n) => n,
            Choice::Wait(why) => return Ok(ConfigWrite::Waiting(why)),
        };
        let dir = self.conf_dir().to_path_buf();
        if !s.chained {
            let text = self.entry().standalone_text();
            let changed = write_if_changed(&dir.join(&name), text.as_bytes(), s.created_mode())?;
            self.installed = Some(name.clone());
            return Ok(ConfigWrite::Installed { name, changed });
        }
        let (final_name, changed) = self.merge_into(&name, false)?;
        let previous = self.installed.replace(final_name.clone());
        if self.configured.is_none() {
            // The files the runtime falls back to keep (or get) our entry: one disappearing leaves none
            // without it.
            self.merge_fallbacks(&final_name);
        } else if let Some(old) = previous.filter(|o| *o != final_name) {
            // Pinned: the name moved (a `.conf` became its `.conflist`); nothing else holds our entry.
            match cleanup::remove_config(&dir, &old, false) {
                Ok(note) => log::info!(
                    "our configuration is now in {}/{} instead of {}: {note}",
                    dir.display(),
                    shown(&final_name),
                    shown(&old)
                ),
                Err(e) => log::warn!(
                    "could not take our entry out of the previous file {}: {e}",
                    shown(&old)
                ),
            }
        }
        Ok(ConfigWrite::Installed {
            name: final_name,
            changed,
        })
    }

    /// Merges our entry into every valid file other than `primary` that lacks it (default layout). A file
    /// whose content we cannot merge into is logged once per content and skipped (the check skips it
    /// too): the runtime uses it only after every file before it is gone, and it never makes us not ready
    /// by itself. A file we failed to write is not skipped (the check says not ready; we retry).
    fn merge_fallbacks(&mut self, primary: &OsStr) {
        let dir = self.conf_dir().to_path_buf();
        let (valid, older) = self
            .listing_quiet()
            .map(|l| (l.valid, l.older.map(|(n, _)| n)))
            .unwrap_or_default();
        let entry = self.entry().to_object();
        self.unmergeable
            .retain(|(n, _)| valid.contains(n) || older.as_ref() == Some(n));
        // A list only an older libcni loads, sorting first, is what such a runtime uses (select::Listing).
        for f in older.into_iter().chain(layout::entry_files(&valid, None)) {
            if f == primary {
                continue;
            }
            let Ok(Some(bytes)) = fsutil::read_config(&dir.join(&f), fsutil::MAX_CONFIG_BYTES)
            else {
                continue;
            };
            if crate::install::config::check::holds_our_entry(&bytes, &entry)
                || self.unmergeable.iter().any(|(n, b)| *n == f && *b == bytes)
            {
                continue;
            }
            // As we found it, recorded before we change it: the uninstall gives it back (originals).
            let original = originals::Original {
                name: f.clone(),
                mode: fsutil::mode_of(&dir.join(&f))
                    .ok()
                    .flatten()
                    .unwrap_or(0o644),
                bytes: bytes.clone(),
                link: std::fs::read_link(dir.join(&f)).ok(),
            };
            if let Err(e) = originals::save(&self.originals, &original) {
                log::warn!(
                    "could not record {}/{} as we found it (the uninstall will only take our entry \
                     out of it): {e}",
                    dir.display(),
                    shown(&f)
                );
            }
            match self.merge_into(&f, false) {
                Ok((name, _)) => log::info!(
                    "our entry is in {}/{} too: the container runtime falls back to it if the files \
                     before it go",
                    dir.display(),
                    shown(&name)
                ),
                Err(e) => {
                    log::warn!(
                        "could not add our entry to {}/{}, a file the container runtime falls back to: \
                         {e}",
                        dir.display(),
                        shown(&f)
                    );
                    // Only the content can make a file unmergeable: after an I/O failure (a full
                    // disk, a busy file) the check keeps finding it without our entry (not ready),
                    // and the reinstall tries again.
                    if matches!(e.root(), Error::InvalidConfig(_) | Error::Decode(_)) {
                        // Its latest version only: a file rewritten again and again stays one entry.
                        self.unmergeable.retain(|(n, _)| *n != f);
                        self.unmergeable.push((f, bytes));
                    }
                }
            }
        }
    }

    /// The owned layout ([`layout`]): the files sorting before the owned one get our entry (the runtime
    /// would use them), then the owned file is derived from the primary as it is now, or, with no primary
    /// at all, holds our entry alone (fail closed). Only a pinned CNI_CONF_NAME that does not exist yet, or
    /// an unreadable file sorting first, is waited for.
    fn write_owned(&mut self, choice: Choice) -> Result<ConfigWrite> {
        let s = &self.settings;
        let dir = self.conf_dir().to_path_buf();
        let owned = OsString::from(&s.istio_owned_filename);
        let listing = self.listing_quiet();
        let valid = listing
            .as_ref()
            .map(|l| l.valid.clone())
            .unwrap_or_default();
        let older = listing.as_ref().ok().and_then(|l| l.older.clone());
        for f in older
            .map(|(n, _)| n)
            .filter(|n| n.as_bytes() < owned.as_bytes())
            .into_iter()
            .chain(layout::entry_files(&valid, Some(&owned)))
        {
            match self.merge_into(&f, false) {
                Ok((name, true)) => log::warn!(
                    "{}/{} sorts before the Istio-owned {} and the container runtime uses it: added our \
                     entry to it too",
                    dir.display(),
                    shown(&name),
                    shown(&owned)
                ),
                Ok(_) => {}
                Err(e) => log::error!(
                    "{}/{} sorts before the Istio-owned {} and the container runtime uses it, but our \
                     entry cannot be added: {e}",
                    dir.display(),
                    shown(&f),
                    shown(&owned)
                ),
            }
        }
        let runtime = layout::owned_primary(&valid, &owned);
        let no_primary = runtime.is_none()
            && match &listing {
                Ok(l) => l.blocked.is_none(),
                Err(_) => true,
            };
        // The owned file is derived from the runtime's own choice only: a pinned CNI_CONF_NAME naming
        // another file (one the runtime skips, or loads later) never becomes the node's network; the
        // check keeps us not ready, naming it (layout::pin_refusal).
        let choice = match (choice, runtime) {
            (Choice::Use(_), Some(r)) => Choice::Use(r),
            (Choice::Use(p), None) if p != owned => Choice::Wait(format!(
                "the container runtime does not load CNI_CONF_NAME={}",
                shown(&p)
            )),
            (c, _) => c,
        };
        let (name, changed) = match choice {
            Choice::Use(primary) if primary != owned => self.merge_into(&primary, true)?,
            Choice::Wait(why) if !no_primary => return Ok(ConfigWrite::Waiting(why)),
            Choice::Use(_) | Choice::Wait(_) => {
                let text = layout::owned_text(None, &self.entry().to_object())?;
                let changed =
                    write_if_changed(&dir.join(&owned), text.as_bytes(), s.created_mode())?;
                if changed {
                    log::warn!(
                        "no primary CNI config in {}: {} now holds only our entry, which refuses every \
                         pod until a primary appears (fail closed)",
                        dir.display(),
                        shown(&owned)
                    );
                }
                (owned, changed)
            }
        };
        self.installed = Some(name.clone());
        Ok(ConfigWrite::Installed { name, changed })
    }

    /// Merges our entry into the file `name` (or, `to_owned`, writes the Istio-owned list from it: the
    /// primary); returns the file written and whether it changed. The source is re-verified right before
    /// the rename; when its CNI rewrote it meanwhile, the merge is redone on the new content (no lost
    /// update).
    fn merge_into(&self, name: &OsStr, to_owned: bool) -> Result<(OsString, bool)> {
        const ATTEMPTS: usize = 50;
        let s = &self.settings;
        let dir = self.conf_dir().to_path_buf();
        let src = dir.join(name);
        let entry = self.entry().to_object();
        for _ in 0..ATTEMPTS {
            let Some(stamp) = fsutil::stamp(&src)? else {
                return Err(Error::config(format!(
                    "CNI config file {} disappeared before our entry could be added",
                    src.display()
                )));
            };
            let Some(bytes) = fsutil::read_config(&src, fsutil::MAX_CONFIG_BYTES)? else {
                continue;
            };
            let existing = crate::install::config::libcni::go_text(&bytes);
            let merged = layout::owned_text(Some(&existing), &entry)
                .with_context(|| format!("create CNI config file {}", src.display()))?;
            if to_owned {
                let owned = OsString::from(&s.istio_owned_filename);
                let changed =
                    write_if_changed(&dir.join(&owned), merged.as_bytes(), s.created_mode())?;
                return Ok((owned, changed));
            }
            let mode = fsutil::mode_of(&src)?.unwrap_or(s.created_mode());
            let loads = |n: &OsStr, b: &[u8]| {
                select::validate(n, b, &|d| crate::install::config::plugin_dir::read(&dir, d))
                    .is_ok()
            };
            let ours_or_absent = |n: &OsStr| {
                fsutil::read_config(&dir.join(n), fsutil::MAX_CONFIG_BYTES).is_ok_and(|b| {
                    b.map_or(true, |b| crate::install::config::check::holds_entry(&b))
                })
            };
            let valid = self.listing_quiet().map(|l| l.valid).unwrap_or_default();
            let target =
                select::merge_target(name, &bytes, &merged, &valid, &loads, &ours_or_absent)
                    .map_err(Error::config)?;
            if let Some(list) = target {
                // .conf (or .json) → .conflist: write the list first, then drop the single-plugin file
                // (crash-safe order: until the unlink the original is unmodified, and whichever of the
                // two the runtime loads holds the primary's plugin).
                write_if_changed(&dir.join(&list), merged.as_bytes(), mode)?;
                if fsutil::stamp(&src)? != Some(stamp) {
                    continue;
                }
                fsutil::remove_if_exists(&src)?;
                return Ok((list, true));
            }
            if merged.as_bytes() == bytes.as_slice() {
                return Ok((name.to_os_string(), false));
            }
            if fsutil::replace_if_unchanged(&src, merged.as_bytes(), mode, stamp, &bytes)? {
                return Ok((name.to_os_string(), true));
            }
            log::info!(
                "{} changed while we merged into it; merging again",
                src.display()
            );
        }
        Err(Error::other(format!(
            "{} keeps changing while we merge into it ({ATTEMPTS} attempts)",
            src.display()
        )))
    }

    /// The file at the owned file's name, when it is the owned layout's copy ([`layout::is_owned_copy`])
    /// and the default layout is in effect (chained, `ISTIO_OWNED_CNI_CONFIG` off, CNI_CONF_NAME not
    /// naming it): its bytes and stamp.
    pub(super) fn owned_copy(&self) -> Option<(Vec<u8>, fsutil::Stamp)> {
        let s = &self.settings;
        let owned = OsStr::new(&s.istio_owned_filename);
        if !s.chained || s.istio_owned || self.configured.as_deref() == Some(owned) {
            return None;
        }
        let path = self.conf_dir().join(owned);
        let stamp = fsutil::stamp(&path).ok().flatten()?;
        let bytes = fsutil::read_config(&path, fsutil::MAX_CONFIG_BYTES)
            .ok()
            .flatten()?;
        layout::is_owned_copy(&bytes).then_some((bytes, stamp))
    }

    /// The owned layout switched off: its copy of the primary would still sort first, so the runtime
    /// would keep loading a stale copy and never see the primary's changes. The file the runtime loads
    /// without it gets our entry first, then the copy goes (only the version judged ours), so the
    /// runtime's file holds our entry throughout. Returns whether it went.
    pub(super) fn retire_owned_copy(&mut self) -> Result<bool> {
        let Some((bytes, stamp)) = self.owned_copy() else {
            return Ok(false);
        };
        let dir = self.conf_dir().to_path_buf();
        let owned = OsString::from(&self.settings.istio_owned_filename);
        let path = dir.join(&owned);
        // What the runtime loads once the copy is gone: the conf dir listed without it. A list only an
        // older libcni loads, sorting first there (select::Listing::older), is Debian 12's runtimes' choice.
        let l = self.listing_without(Some(&owned))?;
        let (valid, older) = (l.valid, l.older.map(|(n, _)| n));
        let next = layout::owned_primary(&valid, &owned);
        for f in older.iter().chain(next.iter()) {
            self.merge_into(f, false).with_context(|| {
                format!(
                    "{} is the owned layout's copy (ISTIO_OWNED_CNI_CONFIG is off now) and stays until \
                     {}, which the container runtime loads without it, has our entry",
                    path.display(),
                    shown(f)
                )
            })?;
        }
        let unchanged = fsutil::stamp(&path)? == Some(stamp)
            && fsutil::read_config(&path, fsutil::MAX_CONFIG_BYTES)?.as_deref()
                == Some(bytes.as_slice());
        if !unchanged {
            return Err(Error::other(format!(
                "{} changed while we removed the owned layout's copy; looking again",
                path.display()
            )));
        }
        fsutil::remove_if_exists(&path)?;
        log::warn!(
            "removed {}: the owned layout's copy of the primary (ISTIO_OWNED_CNI_CONFIG is off), which \
             sorted first and hid the primary's own file from the container runtime; it now loads {}",
            path.display(),
            next.as_deref()
                .map(shown)
                .unwrap_or_else(|| "no configuration (none is left)".into())
        );
        if self.installed.as_deref() == Some(owned.as_os_str()) {
            self.installed = None;
        }
        Ok(true)
    }

    /// At a stop that keeps everything for the next agent pod (a rolling update): an owned file holding
    /// our entry alone (no primary) would refuse that pod's own sandbox, and then nothing would derive
    /// the owned file from a primary appearing later. It goes; the runtime then has no network at all
    /// (pods still fail) until a primary appears, and the next agent starts through that.
    pub fn release_no_primary(&self) {
        let s = &self.settings;
        if !(s.chained && s.istio_owned) {
            return;
        }
        let path = self.conf_dir().join(&s.istio_owned_filename);
        let Ok(alone) = layout::owned_text(None, &self.entry().to_object()) else {
            return;
        };
        if fsutil::read_config(&path, fsutil::MAX_CONFIG_BYTES)
            .is_ok_and(|b| b.as_deref() == Some(alone.as_bytes()))
        {
            match fsutil::remove_if_exists(&path) {
                Ok(_) => log::info!(
                    "removed {}: it held our entry alone (no primary CNI config) and would refuse the \
                     next agent pod",
                    path.display()
                ),
                Err(e) => log::warn!("could not remove {}: {e}", path.display()),
            }
        }
    }
}
