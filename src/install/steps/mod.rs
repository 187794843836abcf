//! The installer's state and its effectful steps over it: binaries, kubeconfig, plugin configuration
//! ([`mod@write`]), the validity check, the cleanup ([`teardown`]). Its fields are this module's: the loop that
//! drives the steps ([`crate::install::run`]) and the rest ask through methods.

pub mod binaries;
pub mod teardown;
pub mod write;

use crate::error::{Context, IoContext, Result};
use crate::fsutil;
use crate::install::config::check::{self, CheckCtx, Outcome};
use crate::install::config::entry::PluginEntry;
use crate::install::config::kubeconfig::{self, KubeconfigInputs};
use crate::install::config::select::{self, shown, Choice, Listing};
use crate::install::settings::options::Settings;
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
    settings: Settings,
    /// The executable installed as `istio-cni`.
    exe: PathBuf,
    /// CNI_CONF_NAME as the operator set it. Without it we follow libcni's choice whenever it changes
    /// (release-1.9's behaviour; master pins its first choice, a deviation we reject: README).
    configured: Option<OsString>,
    /// The conf-dir file our configuration was last written to (a name is bytes, as the runtime's).
    installed: Option<OsString>,
    /// Bin dirs holding our binary.
    bin_dirs: Vec<PathBuf>,
    /// This agent's place among the node's agents (none for `--once` and `--uninstall`).
    lease: Option<Lease>,
    /// Files the runtime falls back to that our entry could not be merged into, with the content tried
    /// (tried again once it changes; [`write`]).
    unmergeable: Vec<(OsString, Vec<u8>)>,
    /// Where the fallbacks we change are recorded as we found them, for the uninstall to give them back
    /// ([`crate::install::config::originals`]): `<run dir>/cni-conf-originals`.
    originals: PathBuf,
}

impl Installer {
    pub fn new(settings: Settings, exe: PathBuf) -> Installer {
        let configured = settings.cni_conf_name.clone().map(OsString::from);
        let originals = settings
            .run_dir
            .join(crate::install::config::originals::DIR);
        Installer {
            settings,
            exe,
            configured,
            installed: None,
            bin_dirs: Vec::new(),
            lease: None,
            unmergeable: Vec::new(),
            originals,
        }
    }

    /// Records of the fallbacks we change go to `dir` instead of the run dir.
    pub fn with_originals(mut self, dir: PathBuf) -> Installer {
        self.originals = dir;
        self
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// CNI_CONF_NAME, when set.
    pub fn configured(&self) -> Option<&OsStr> {
        self.configured.as_deref()
    }

    /// The conf-dir file our configuration was last written to.
    pub fn installed(&self) -> Option<&OsStr> {
        self.installed.as_deref()
    }

    /// As if our configuration had last been written to `name` (where a previous run left it).
    pub fn assume_installed(&mut self, name: OsString) {
        self.installed = Some(name);
    }

    /// The fallbacks our entry could not be merged into, with the content tried.
    pub fn unmergeable(&self) -> &[(OsString, Vec<u8>)] {
        &self.unmergeable
    }

    /// This agent's place among the node's agents, once joined.
    pub fn lease_mut(&mut self) -> Option<&mut Lease> {
        self.lease.as_mut()
    }

    /// Whether a newer agent owns the node's installation now.
    pub fn superseded(&mut self) -> bool {
        self.lease.as_mut().is_some_and(|l| l.newer().is_some())
    }

    /// Back from a newer agent: as after a restart, our entry goes where this agent's settings put it,
    /// and out of any other list (the newer agent's settings may have chosen another file).
    pub fn take_back(&mut self) {
        self.installed = None;
    }

    /// Joins the node's agents as the newest ([`crate::rundir::lease`]): from now on this agent owns the
    /// node's installation, and an older one still running writes nothing. Without a lease (a file system
    /// without open file description locks) the agent runs as before, alone in its own view.
    pub fn join(&mut self) {
        let s = &self.settings;
        let name = match s.handover.pod_name.as_str() {
            "" => format!("pid {}", std::process::id()),
            pod => format!("pod {pod}"),
        };
        match Lease::join(&s.run_dir, &name) {
            Ok(l) => {
                log::info!(
                    "joined the node's agents as generation {}: this agent owns the node's installation",
                    l.generation()
                );
                self.lease = Some(l);
            }
            Err(e) => {
                log::warn!("no lease, an older agent still running will not defer to this one: {e}")
            }
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
    pub(super) fn listing_quiet(&self) -> Result<Listing> {
        self.listing_without(None)
    }

    /// [`Installer::listing_quiet`] as the runtime would see the conf dir without the file `skip`; an
    /// empty dir is an empty listing then.
    pub(super) fn listing_without(&self, skip: Option<&OsStr>) -> Result<Listing> {
        let dir = self.conf_dir();
        let mut cands = select::list_candidates(dir)?;
        if let Some(skip) = skip {
            cands.retain(|c| c.name != skip);
            if cands.is_empty() {
                return Ok(Listing::default());
            }
        }
        select::valid_configs(&self.conf_dir_display(), &cands, &|n| {
            crate::install::config::plugin_dir::read(dir, n)
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
        let dirs = binaries::target_dirs(&s.bin_dir, s.secondary_bin_dir.as_deref());
        for d in &dirs {
            let out = binaries::install_one(
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
        let (ca_file, token_file) = (ca_path.display(), token_path.display());
        kubeconfig::check_usable(
            &text,
            &inputs,
            &ca_file.to_string(),
            &token_file.to_string(),
        )?;
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

    /// upstream `checkValidCNIConfig`, with the readiness invariant (see [`check::check`]); first, our
    /// binary must be one the runtime can run ([`Installer::binary_unusable`]).
    pub fn check(&self) -> Outcome {
        if let Some(reason) = self.binary_unusable() {
            return Outcome::Binary { reason };
        }
        let s = &self.settings;
        if self.owned_copy().is_some() {
            return Outcome::Invalid {
                reason: format!(
                    "{}/{} is the owned layout's copy of the primary and ISTIO_OWNED_CNI_CONFIG is off: \
                     it sorts first, so the container runtime loads this copy, not the primary's own \
                     file; removing it",
                    self.conf_dir_display(),
                    s.istio_owned_filename
                ),
            };
        }
        let listing = self.listing();
        let dir = self.conf_dir().to_path_buf();
        let entry = self.entry().to_object();
        let ctx = CheckCtx {
            dir: &self.conf_dir_display(),
            chained: s.chained,
            owned: s.istio_owned.then_some(OsStr::new(&s.istio_owned_filename)),
            configured: self.configured.as_deref(),
            installed: self.installed.as_deref(),
            entry: &entry,
            unmergeable: &self.unmergeable,
        };
        let read = |n: &OsStr| {
            fsutil::read_config(&dir.join(n), fsutil::MAX_CONFIG_BYTES)
                .ok()
                .flatten()
        };
        check::check(&ctx, &listing, &read)
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

#[cfg(test)]
mod tests;
