//! The installer's effectful steps over its state: binaries, kubeconfig, plugin configuration, the
//! validity check. The loop that drives them is in [`super::run`].

use super::config::check::{self, CheckCtx, Outcome};
use super::config::cleanup;
use super::config::conflist;
use super::config::entry::PluginEntry;
use super::config::kubeconfig::{self, KubeconfigInputs};
use super::config::select::{self, shown, Choice, Listing};
use super::options::Settings;
use crate::error::{Context, Error, IoContext, Result};
use crate::fsutil;
use crate::rundir::lease::Lease;
use crate::rundir::RunDir;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

/// The binary name the plugin is installed under.
pub const PLUGIN_BINARY: &str = "istio-cni";

/// The result of writing the plugin configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigWrite {
    /// Written (or already identical) at this conf-dir file name.
    Installed { name: OsString, changed: bool },
    /// No primary configuration yet (chained): wait for the conf dir to change.
    Waiting(String),
}

pub struct Installer {
    pub settings: Settings,
    /// The executable installed as `istio-cni`.
    pub exe: PathBuf,
    /// CNI_CONF_NAME as the operator set it. Without it we follow libcni's choice whenever it changes
    /// (release-1.9's behaviour; master pins its first choice, a deviation we reject: README).
    pub configured: Option<OsString>,
    /// The conf-dir file our configuration was last written to (a name is bytes, as the runtime's).
    pub installed: Option<OsString>,
    /// Bin dirs holding our binary.
    pub bin_dirs: Vec<PathBuf>,
    /// This agent's place among the node's agents (none for `--once` and `--uninstall`).
    pub lease: Option<Lease>,
}

impl Installer {
    pub fn new(settings: Settings, exe: PathBuf) -> Installer {
        let configured = settings.cni_conf_name.clone().map(OsString::from);
        Installer {
            settings,
            exe,
            configured,
            installed: None,
            bin_dirs: Vec::new(),
            lease: None,
        }
    }

    pub fn conf_dir(&self) -> &Path {
        &self.settings.mounted_cni_net_dir
    }

    fn conf_dir_display(&self) -> String {
        self.conf_dir().display().to_string()
    }

    pub fn entry(&self) -> PluginEntry {
        let s = &self.settings;
        PluginEntry {
            plugin_log_level: s.plugin_log_level.clone(),
            cni_agent_run_dir: s.run_dir.display().to_string(),
            ambient_enabled: false,
            exclude_namespaces: s.exclude_namespaces.clone(),
            pod_namespace: s.pod_namespace.clone(),
            native_nftables: s.native_nftables,
            enablement_selectors: s.enablement_selectors.clone(),
            enable_ambient_detection_retry: s.enable_ambient_detection_retry,
            pod_cache: s.pod_cache,
        }
    }

    pub fn kubeconfig_path(&self) -> PathBuf {
        RunDir::new(&self.settings.run_dir).kubeconfig()
    }

    /// The valid configurations of the conf dir.
    fn listing_quiet(&self) -> Result<Listing> {
        let dir = self.conf_dir();
        let cands = select::list_candidates(dir)?;
        select::valid_configs(&self.conf_dir_display(), &cands, &|n| {
            super::config::plugin_dir::read(dir, n)
        })
    }

    /// The valid configurations of the conf dir, logging the skipped ones.
    pub fn listing(&self) -> Result<Listing> {
        let dir = self.conf_dir();
        let l = self.listing_quiet()?;
        for (name, why) in &l.skipped {
            log::warn!(
                "Error loading CNI config file {}/{}: {why}",
                dir.display(),
                shown(name)
            );
        }
        Ok(l)
    }

    /// Installs our executable as `istio-cni` into the bin dirs.
    pub fn install_binaries(&mut self) -> Result<()> {
        let s = &self.settings;
        let dirs = super::binaries::target_dirs(&s.bin_dir, s.secondary_bin_dir.as_deref());
        for d in &dirs {
            let out = super::binaries::install_one(
                &self.exe,
                d,
                PLUGIN_BINARY,
                &s.skip_binaries,
                s.update_binaries,
            )
            .with_context(|| format!("copy binaries into {}", d.display()))?;
            log::info!("{}/{PLUGIN_BINARY}: {out:?}", d.display());
        }
        self.bin_dirs = dirs;
        Ok(())
    }

    /// The kubeconfig's text and what the log says of it (server, CA fingerprint), from the settings, the
    /// token and the CA; nothing is written (the start checks it before writing anything).
    pub fn kubeconfig_text(&self) -> Result<(String, String)> {
        let s = &self.settings;
        let sa = &s.service_account_dir;
        let token_path = sa.join("token");
        let ca_path = s.kube_ca_file.clone().unwrap_or_else(|| sa.join("ca.crt"));
        let unread = KubeconfigInputs {
            protocol: &s.k8s_protocol,
            host: &s.k8s_host,
            port: &s.k8s_port,
            ca: None,
            skip_tls_verify: true,
            token: b"",
        };
        // Host/port errors come first (upstream order), before any file is read.
        if s.k8s_host.is_empty() || s.k8s_port.is_empty() {
            kubeconfig::render(&unread)?;
        }
        let ca = if s.skip_tls_verify {
            None
        } else {
            Some(
                std::fs::read(&ca_path)
                    .io_context(|| format!("read CA file {}", ca_path.display()))?,
            )
        };
        let token = std::fs::read(&token_path)
            .io_context(|| format!("read service account token {}", token_path.display()))?;
        let inputs = KubeconfigInputs {
            ca: ca.as_deref(),
            skip_tls_verify: s.skip_tls_verify,
            token: &token,
            ..unread
        };
        let text = kubeconfig::render(&inputs)?;
        Ok((text, kubeconfig::log_summary(&inputs)))
    }

    /// Writes the kubeconfig when its content changed; returns whether it was written.
    pub fn write_kubeconfig(&self) -> Result<bool> {
        let s = &self.settings;
        let (text, summary) = self.kubeconfig_text()?;
        let path = self.kubeconfig_path();
        // The first write of a process always happens, so the file is this agent's own (an older agent
        // stopping removes only its own: crate::rundir).
        let same = crate::rundir::claimed(&path).is_some()
            && fsutil::read_opt(&path)?.is_some_and(|old| old == text.as_bytes())
            && fsutil::mode_of(&path)? == Some(s.kubeconfig_mode);
        if same {
            return Ok(false);
        }
        fsutil::write_atomic(&path, text.as_bytes(), s.kubeconfig_mode)?;
        crate::rundir::claim(&path);
        log::info!("wrote kubeconfig {} ({summary})", path.display());
        Ok(true)
    }

    /// Chooses where our configuration goes (upstream `getCNIConfigFilepath`, one evaluation).
    pub fn choose(&self) -> Choice {
        let s = &self.settings;
        let dir = self.conf_dir().to_path_buf();
        let listing = if s.chained && self.configured.is_none() {
            self.listing()
        } else {
            Ok(Listing::default())
        };
        let owned = s.istio_owned.then_some(OsStr::new(&s.istio_owned_filename));
        select::choose(
            s.chained,
            self.configured.as_deref(),
            &listing,
            owned,
            &|n| dir.join(n).is_file(),
        )
    }

    /// Writes our configuration (upstream `createCNIConfigFile`): merge into the primary, or the
    /// Istio-owned list, or the standalone file. Identical content is not rewritten. When the primary
    /// moved to another file (the runtime's choice changed), our entry is taken out of the old one.
    pub fn write_config(&mut self) -> Result<ConfigWrite> {
        let name = match self.choose() {
            Choice::Use(n) => n,
            Choice::Wait(why) => return Ok(ConfigWrite::Waiting(why)),
        };
        let s = &self.settings;
        let dir = self.conf_dir().to_path_buf();
        if !s.chained {
            let text = self.entry().standalone_text();
            let changed = write_if_changed(&dir.join(&name), text.as_bytes(), s.created_mode())?;
            self.installed = Some(name.clone());
            return Ok(ConfigWrite::Installed { name, changed });
        }
        let (final_name, changed) = self.merge_into(&name)?;
        let previous = self.installed.replace(final_name.clone());
        let follows = self.configured.is_none() && !self.settings.istio_owned;
        if previous.is_none() && follows {
            for note in cleanup::remove_from_others(&dir, &final_name) {
                log::info!("{note}");
            }
        }
        if let Some(old) = previous.filter(|o| *o != final_name && !self.settings.istio_owned) {
            match cleanup::remove_config(&dir, &old, false) {
                Ok(note) => log::info!(
                    "the container runtime now uses {}/{} instead of {}: {note}",
                    dir.display(),
                    shown(&final_name),
                    shown(&old)
                ),
                Err(e) => log::warn!(
                    "could not take our entry out of the previous primary {}: {e}",
                    shown(&old)
                ),
            }
        }
        Ok(ConfigWrite::Installed {
            name: final_name,
            changed,
        })
    }

    /// Merges our entry into the primary `name` (or writes the Istio-owned list from it); returns the file
    /// written and whether it changed. The primary is re-verified right before the rename; when its CNI
    /// rewrote it meanwhile, the merge is redone on the new content (no lost update).
    fn merge_into(&self, name: &OsStr) -> Result<(OsString, bool)> {
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
            let existing = super::config::libcni::go_text(&bytes);
            let merged = conflist::merge(&existing, &entry)
                .with_context(|| format!("create CNI config file {}", src.display()))?;
            if s.istio_owned {
                let owned = OsString::from(&s.istio_owned_filename);
                let changed =
                    write_if_changed(&dir.join(&owned), merged.as_bytes(), s.created_mode())?;
                return Ok((owned, changed));
            }
            let mode = fsutil::mode_of(&src)?.unwrap_or(s.created_mode());
            let loads = |n: &OsStr, b: &[u8]| {
                select::validate(n, b, &|d| super::config::plugin_dir::read(&dir, d)).is_ok()
            };
            let ours_or_absent = |n: &OsStr| {
                fsutil::read_config(&dir.join(n), fsutil::MAX_CONFIG_BYTES)
                    .is_ok_and(|b| b.map_or(true, |b| super::config::check::holds_entry(&b)))
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

    /// upstream `checkValidCNIConfig`, with the readiness invariant (see [`check::check`]).
    pub fn check(&mut self) -> Outcome {
        let s = &self.settings;
        let dir_display = self.conf_dir_display();
        let listing = self.listing();
        let dir = self.conf_dir().to_path_buf();
        let entry = self.entry().to_object();
        let ctx = CheckCtx {
            dir: &dir_display,
            chained: s.chained,
            owned: s.istio_owned.then_some(OsStr::new(&s.istio_owned_filename)),
            configured: self.configured.as_deref(),
            installed: self.installed.as_deref(),
            entry: &entry,
        };
        check::check(&ctx, &listing, &|n| {
            fsutil::read_config(&dir.join(n), fsutil::MAX_CONFIG_BYTES)
                .ok()
                .flatten()
        })
    }

    /// Removes stale temp files at start. In the conf dir, which the primary CNI shares, our own temp
    /// names (`<name>.tmp.<pid>.<n>`: only this installer makes them) go at once; Go-style
    /// `<name>.tmp.<digits>` ones (an upstream installer's) only when older than a minute, so a primary's
    /// in-flight write is never touched. In the run dir, the kubeconfig's temp files go at once.
    pub fn sweep_conf_temps(&self) -> Result<()> {
        let owned = self.settings.istio_owned_filename.clone();
        let old = |m: &std::fs::Metadata| {
            m.modified()
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age > std::time::Duration::from_secs(60))
        };
        for p in fsutil::remove_stale_temps_where(self.conf_dir(), |owner, name, meta| {
            (select::is_candidate_name(OsStr::new(owner)) || owner == owned)
                && (fsutil::is_own_temp_name(name) || old(meta))
        })? {
            log::info!("removed stale temp file {}", p.display());
        }
        for p in
            fsutil::remove_stale_temps(&self.settings.run_dir, |owner| owner == RunDir::KUBECONFIG)?
        {
            log::info!("removed stale temp file {}", p.display());
        }
        Ok(())
    }
}

/// Writes atomically unless the file already has exactly these bytes and this mode.
pub fn write_if_changed(path: &Path, data: &[u8], mode: u32) -> Result<bool> {
    if fsutil::read_config(path, fsutil::MAX_CONFIG_BYTES)
        .ok()
        .flatten()
        .is_some_and(|old| old == data)
        && fsutil::mode_of(path)? == Some(mode)
    {
        return Ok(false);
    }
    fsutil::write_atomic_through(path, data, mode)?;
    Ok(true)
}
