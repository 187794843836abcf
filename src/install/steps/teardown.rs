//! Cleanup on SIGTERM/SIGINT (when the SIGTERM decision, [`crate::install::handover`], says so) and `--uninstall`
//! (installer.md §2.12): our entry out of the conf dir ([`crate::install::config::cleanup`]), then the kubeconfig,
//! our `istio-cni` binary (no other binary), the sockets and the backend record (a running agent's cleanup
//! only those still its own: [`crate::rundir`]). Every step runs even when an earlier one failed; the
//! first error is returned at the end.

use super::{Installer, PLUGIN_BINARY};
use crate::error::{Error, Result};
use crate::fsutil;
use crate::install::config::cleanup;
use crate::rundir::lease::{self, Lease};
use std::ffi::OsStr;
use std::path::Path;

impl Installer {
    /// Full cleanup for an installer: config, kubeconfig, binary, sockets, backend record (a running
    /// agent's: only the run-dir files still its own).
    pub fn cleanup(&self) -> Result<()> {
        let s = &self.settings;
        let mut first_err: Option<Error> = None;
        let mut note = |r: Result<String>| match r {
            Ok(n) => log::info!("cleanup: {n}"),
            Err(e) => {
                log::error!("cleanup: {e}");
                first_err.get_or_insert(e);
            }
        };
        let dir = self.conf_dir();
        // Chained, our entry may be in several files (every file the runtime falls back to, a file
        // sorting before the owned one: config::layout): after the file we wrote last, every other one
        // loses it too.
        let owned = s.chained && s.istio_owned;
        // The files the runtime falls back to that we changed go back as we found them (name, bytes,
        // mode), unless their owner changed them since: then only our entry is taken out, below.
        if s.chained {
            match crate::install::config::originals::restore_all(dir, &self.originals) {
                Ok(notes) => notes.into_iter().for_each(|n| note(Ok(n))),
                Err(e) => note(Err(e)),
            }
        }
        let owned_name = OsStr::new(&s.istio_owned_filename);
        // With the owned layout off, its copy left behind goes in the scan below, whole (taking only
        // our entry out would leave a stale copy of the primary sorting first).
        let leftover = s.chained && !owned && self.installed.as_deref() == Some(owned_name);
        if let Some(name) = self.installed.as_ref().filter(|_| !leftover) {
            note(cleanup::remove_config(dir, name, !s.chained || owned));
        }
        if s.chained || self.installed.is_none() {
            let owned_file = match (s.chained, owned) {
                (true, true) => cleanup::Owned::Named(owned_name),
                (true, false) => cleanup::Owned::Copy(owned_name),
                (false, _) => cleanup::Owned::None,
            };
            match cleanup::scan_and_remove(dir, owned_file) {
                Ok(notes) if notes.is_empty() && self.installed.is_none() => {
                    note(Ok("no Istio CNI configuration found".into()))
                }
                Ok(notes) => notes.into_iter().for_each(|n| note(Ok(n))),
                Err(e) => note(Err(e)),
            }
        }
        // A running agent removes only the run-dir files it put there (crate::rundir): a newer agent
        // sharing the dir keeps its own. `--uninstall` put nothing there and removes them all, and so does
        // the last agent out (it holds the whole lease: every other agent is gone or keeping, and writes
        // nothing more), or an uninstall during a roll would leave the other agent's kubeconfig behind.
        let alone = self.lease.as_ref().is_some_and(Lease::alone);
        let remove_record = |p: &Path| crate::rundir::remove_record(p, s.uninstall || alone);
        note(remove_record(&self.kubeconfig_path()).map(|n| format!("kubeconfig {n}")));
        let dirs = if self.bin_dirs.is_empty() {
            super::binaries::target_dirs(&s.bin_dir, s.secondary_bin_dir.as_deref())
        } else {
            self.bin_dirs.clone()
        };
        for d in dirs {
            let p = d.join(PLUGIN_BINARY);
            note(fsutil::remove_if_exists(&p).map(|r| {
                format!(
                    "binary {}: {}",
                    p.display(),
                    if r { "removed" } else { "absent" }
                )
            }));
        }
        // The sockets and the iptables backend record (a later install records it afresh).
        for f in crate::rundir::RunDir::RECORDS {
            note(remove_record(&s.run_dir.join(f)));
        }
        match &self.lease {
            Some(l) => note(l.remove()),
            None if s.uninstall => note(lease::remove_unheld(&s.run_dir)),
            None => {}
        }
        first_err.map_or(Ok(()), Err)
    }
}
