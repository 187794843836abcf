//! Installer settings: upstream's names as flags and environment variables (flag > env > default), every
//! value validated at start. Unknown flags and malformed values are errors that name the setting and the
//! bad value. An empty environment variable means "unset" for booleans and numbers (use the default) and
//! the empty string for text settings, where upstream master's `AllowEmptyEnv` gives the same result.
//!
//! The `REPAIR_*` settings (master names, and the dashed release-1.9 names as aliases) are read by the
//! repair agent's own parser, [`crate::repair::options::from_installer_env`].

pub use super::flags::{normalize_args, Flags};
use super::selectors::EnablementSelector;
use crate::error::{Error, Result};
use crate::iptables::Backend;
use crate::logging::levels::{self, Scopes};
use crate::settings::{self, EmptyEnv, Found};
pub use crate::settings::{parse_bool, parse_duration, parse_mode, parse_port, process_env, Env};
use log::LevelFilter;
use std::path::PathBuf;
use std::time::Duration;

/// The repair agent's settings as the installer reads them.
pub type RepairSettings = crate::repair::options::Options;

/// Validated installer settings.
#[derive(Debug, Clone)]
pub struct Settings {
    pub mounted_cni_net_dir: PathBuf,
    pub cni_net_dir: PathBuf,
    pub cni_conf_name: Option<String>,
    pub chained: bool,
    pub istio_owned: bool,
    pub istio_owned_filename: String,
    pub run_dir: PathBuf,
    pub kubeconfig_mode: u32,
    pub conf_group_read: bool,
    pub kube_ca_file: Option<PathBuf>,
    pub skip_tls_verify: bool,
    pub monitoring_port: u16,
    pub health_port: u16,
    pub exclude_namespaces: Option<Vec<String>>,
    pub pod_namespace: String,
    pub native_nftables: bool,
    /// The installer's own logging: per-scope levels, text or JSON lines.
    pub log: crate::logging::Config,
    /// Things worth a warning once logging runs (e.g. a level word we did not know).
    pub warnings: Vec<String>,
    pub plugin_log_level: String,
    /// AMBIENT_ENABLEMENT_SELECTOR, parsed; written into our entry even with ambient off, as upstream.
    pub enablement_selectors: Vec<EnablementSelector>,
    /// FORCE_IPTABLES_BINARY: record this backend instead of detecting the host's.
    pub forced_iptables_backend: Option<Backend>,
    pub k8s_protocol: String,
    pub k8s_host: String,
    pub k8s_port: String,
    pub node_name: String,
    pub bin_dir: PathBuf,
    pub secondary_bin_dir: Option<PathBuf>,
    pub skip_binaries: Vec<String>,
    pub update_binaries: bool,
    pub service_account_dir: PathBuf,
    pub once: bool,
    pub wait_timeout: Duration,
    pub uninstall: bool,
    pub repair: RepairSettings,
}

impl Settings {
    /// Mode of the files we create in the conf dir.
    pub fn created_mode(&self) -> u32 {
        if self.conf_group_read {
            0o640
        } else {
            0o600
        }
    }
}

fn check_plugin_level(name: &str, v: &str) -> Result<String> {
    match crate::logging::nearest_level(v) {
        Some(_) => Ok(v.trim().to_ascii_lowercase()),
        None => Err(Error::env(
            name,
            format!("{v:?} is not a log level (debug, info, warn, error, none)"),
        )),
    }
}

/// One setting: the flag, else the env var (set to "" counts, as `AllowEmptyEnv`), else `None`.
fn pick(flag: &Option<String>, env: Env<'_>, var: &str) -> Option<Found> {
    let flag = flag.clone().map(|v| (settings::flag_name(var), v));
    settings::pick(flag, env, &[var], EmptyEnv::Value)
}

/// Text setting with a default.
fn text(flag: &Option<String>, env: Env<'_>, var: &str, default: &str) -> String {
    pick(flag, env, var).map_or_else(|| default.to_string(), |f| f.value)
}

/// Typed setting: flag > env (blank env = unset) > default.
fn typed<T>(
    flag: &Option<String>,
    env: Env<'_>,
    var: &str,
    default: T,
    parse: impl Fn(&str, &str) -> Result<T>,
) -> Result<T> {
    settings::typed(pick(flag, env, var), default, parse)
}

/// An absolute directory or file setting with a default.
fn path(flag: &Option<String>, env: Env<'_>, var: &str, default: &str) -> Result<PathBuf> {
    abs_path(var, text(flag, env, var, default))
}

/// An optional absolute path: "" is none.
fn opt_path(
    flag: &Option<String>,
    env: Env<'_>,
    var: &str,
    default: &str,
) -> Result<Option<PathBuf>> {
    let v = text(flag, env, var, default);
    if v.is_empty() {
        return Ok(None);
    }
    abs_path(var, v).map(Some)
}

/// A list setting: split on `sep`, trimmed, empty items dropped.
fn list(flag: &Option<String>, env: Env<'_>, var: &str, sep: impl Fn(char) -> bool) -> Vec<String> {
    text(flag, env, var, "")
        .split(sep)
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

fn abs_path(name: &str, v: String) -> Result<PathBuf> {
    if !v.starts_with('/') {
        return Err(Error::env(name, format!("{v:?} is not an absolute path")));
    }
    Ok(PathBuf::from(v))
}

fn plain_file_name(name: &str, v: &str) -> Result<()> {
    if v.is_empty() || v.contains('/') || v == "." || v == ".." {
        return Err(Error::env(name, format!("{v:?} is not a plain file name")));
    }
    Ok(())
}

/// The plugin level, the installer's log configuration and warnings about level words we did not know.
///
/// `plugin_log_level` is PLUGIN_LOG_LEVEL (flag or env), else the `cni-plugin` scope of
/// `--log_output_level`, else `info`: a bare or `default:` level is the installer's own (upstream keeps
/// the plugin at `info` with `--log_output_level=debug`). The installer's scopes are
/// `--log_output_level`, then LOG_LEVEL (either form; seed-era and maistra docs set it) on top; unknown
/// words are warnings, never a refusal to start.
fn logging(f: &Flags, env: Env<'_>) -> Result<(String, crate::logging::Config, Vec<String>)> {
    let mut scopes = Scopes::default();
    let mut warnings = Vec::new();
    if let Some(spec) = &f.log_output_level {
        warnings.extend(scopes.extend(spec));
    }
    if let Some(found) = pick(&f.log_level, env, "LOG_LEVEL") {
        for w in scopes.extend(&found.value) {
            warnings.push(format!("{}: {w}", found.source));
        }
    }
    let explicit_plugin = typed(
        &f.plugin_log_level,
        env,
        "PLUGIN_LOG_LEVEL",
        None,
        |n, v| check_plugin_level(n, v).map(Some),
    )?;
    let scoped_plugin = scopes.level_of(levels::PLUGIN_SCOPES);
    let plugin_log_level = match (explicit_plugin, scoped_plugin) {
        (Some(l), _) => l,
        (None, Some(l)) => level_word(l).to_string(),
        (None, None) => "info".to_string(),
    };
    let relay_level = scoped_plugin.unwrap_or_else(|| {
        crate::logging::nearest_level(&plugin_log_level).unwrap_or(LevelFilter::Info)
    });
    let log = crate::logging::Config {
        default: scopes
            .level_of(levels::DEFAULT_SCOPES)
            .unwrap_or(LevelFilter::Info),
        install: scopes.level_of(levels::INSTALL_SCOPES),
        repair: scopes.level_of(levels::REPAIR_SCOPES),
        plugin: relay_level,
        json: f.log_as_json || typed(&None, env, "LOG_AS_JSON", false, parse_bool)?,
    };
    Ok((plugin_log_level, log, warnings))
}

/// The plugin's name for a level (what `plugin_log_level` holds).
fn level_word(l: LevelFilter) -> &'static str {
    match l {
        LevelFilter::Off => "none",
        LevelFilter::Error => "error",
        LevelFilter::Warn => "warn",
        LevelFilter::Info => "info",
        LevelFilter::Debug | LevelFilter::Trace => "debug",
    }
}

/// FORCE_IPTABLES_BINARY (upstream's override of the backend detection): `iptables-nft`,
/// `iptables-legacy` or `iptables` (also `nft`, `legacy`, `plain`); empty is unset.
fn forced_backend(env: Env<'_>) -> Result<Option<Backend>> {
    let Some(v) = env("FORCE_IPTABLES_BINARY").filter(|v| !v.trim().is_empty()) else {
        return Ok(None);
    };
    Backend::from_binary_name(&v).map(Some).ok_or_else(|| {
        Error::env(
            "FORCE_IPTABLES_BINARY",
            format!("{v:?} is not an iptables binary (iptables-nft, iptables-legacy or iptables)"),
        )
    })
}

/// Resolves and validates every setting, concern by concern.
pub fn resolve(f: &Flags, env: Env<'_>) -> Result<Settings> {
    super::legacy::refuse_legacy(
        &[
            ("CNI_NETWORK_CONFIG", &f.cni_network_config),
            ("CNI_NETWORK_CONFIG_FILE", &f.cni_network_config_file),
            ("KUBECFG_FILE_NAME", &f.kubecfg_file_name),
        ],
        env,
    )?;
    let conf = conf_files(f, env)?;
    refuse_ambient(f, env)?;
    let (plugin_log_level, log, warnings) = logging(f, env)?;
    let bins = binaries(f, env)?;
    let exclude = list(&f.exclude_namespaces, env, "EXCLUDE_NAMESPACES", |c| {
        c == ','
    });
    Ok(Settings {
        // Where the CNI configuration goes.
        mounted_cni_net_dir: conf.mounted,
        cni_net_dir: conf.host,
        cni_conf_name: conf.name,
        chained: conf.chained,
        istio_owned: conf.istio_owned,
        istio_owned_filename: conf.owned_name,
        conf_group_read: typed(
            &f.cni_conf_group_read,
            env,
            "CNI_CONF_GROUP_READ",
            false,
            parse_bool,
        )?,
        // The plugin's run dir and the kubeconfig written there.
        run_dir: path(
            &f.cni_agent_run_dir,
            env,
            "CNI_AGENT_RUN_DIR",
            "/var/run/istio-cni",
        )?,
        kubeconfig_mode: typed(
            &f.kubeconfig_mode,
            env,
            "KUBECONFIG_MODE",
            0o600,
            parse_mode,
        )?,
        kube_ca_file: opt_path(&f.kube_ca_file, env, "KUBE_CA_FILE", "")?,
        skip_tls_verify: typed(
            &f.skip_tls_verify,
            env,
            "SKIP_TLS_VERIFY",
            false,
            parse_bool,
        )?,
        service_account_dir: path(
            &f.service_account_dir,
            env,
            "SERVICE_ACCOUNT_DIR",
            "/var/run/secrets/kubernetes.io/serviceaccount",
        )?,
        k8s_protocol: env("KUBERNETES_SERVICE_PROTOCOL").unwrap_or_default(),
        k8s_host: env("KUBERNETES_SERVICE_HOST").unwrap_or_default(),
        k8s_port: env("KUBERNETES_SERVICE_PORT").unwrap_or_default(),
        node_name: node_name(env),
        // The plugin's entry.
        exclude_namespaces: (!exclude.is_empty()).then_some(exclude),
        pod_namespace: text(&f.pod_namespace, env, "POD_NAMESPACE", ""),
        native_nftables: typed(
            &f.native_nftables,
            env,
            "NATIVE_NFTABLES",
            false,
            parse_bool,
        )?,
        plugin_log_level,
        enablement_selectors: super::selectors::parse(
            &env("AMBIENT_ENABLEMENT_SELECTOR").unwrap_or_default(),
        )?,
        forced_iptables_backend: forced_backend(env)?,
        // The installer's own logging and servers.
        log,
        warnings,
        monitoring_port: typed(
            &f.monitoring_port,
            env,
            "MONITORING_PORT",
            15014,
            parse_port,
        )?,
        health_port: typed(&f.health_port, env, "HEALTH_PORT", 8000, parse_port)?,
        // Binaries.
        bin_dir: bins.dir,
        secondary_bin_dir: bins.secondary,
        skip_binaries: bins.skip,
        update_binaries: bins.update,
        // How this run ends.
        once: f.once,
        wait_timeout: typed(
            &f.wait_timeout,
            env,
            "WAIT_TIMEOUT",
            Duration::from_secs(60),
            parse_duration,
        )?,
        uninstall: f.uninstall,
        repair: crate::repair::options::from_installer_env(env)?,
    })
}

/// Where the CNI configuration goes.
struct ConfFiles {
    mounted: PathBuf,
    host: PathBuf,
    name: Option<String>,
    chained: bool,
    istio_owned: bool,
    owned_name: String,
}

fn conf_files(f: &Flags, env: Env<'_>) -> Result<ConfFiles> {
    let mounted = path(
        &f.mounted_cni_net_dir,
        env,
        "MOUNTED_CNI_NET_DIR",
        "/host/etc/cni/net.d",
    )?;
    let host = path(&f.cni_net_dir, env, "CNI_NET_DIR", "/etc/cni/net.d")?;
    let conf_name = text(&f.cni_conf_name, env, "CNI_CONF_NAME", "");
    let name = if conf_name.is_empty() {
        None
    } else {
        plain_file_name("CNI_CONF_NAME", &conf_name)?;
        Some(conf_name)
    };
    let chained = typed(
        &f.chained_cni_plugin,
        env,
        "CHAINED_CNI_PLUGIN",
        true,
        parse_bool,
    )?;
    let istio_owned = typed(
        &f.istio_owned_cni_config,
        env,
        "ISTIO_OWNED_CNI_CONFIG",
        false,
        parse_bool,
    )?;
    let owned_var = "ISTIO_OWNED_CNI_CONFIG_FILENAME";
    let mut owned_name = text(&f.istio_owned_cni_config_filename, env, owned_var, "");
    if owned_name.is_empty() {
        owned_name = "02-istio-cni.conflist".into();
    }
    plain_file_name(owned_var, &owned_name)?;
    Ok(ConfFiles {
        mounted,
        host,
        name,
        chained,
        istio_owned: istio_owned && chained,
        owned_name,
    })
}

fn refuse_ambient(f: &Flags, env: Env<'_>) -> Result<()> {
    if typed(
        &f.ambient_enabled,
        env,
        "AMBIENT_ENABLED",
        false,
        parse_bool,
    )? {
        return Err(Error::env(
            "AMBIENT_ENABLED",
            "ambient mode is not supported by this installer; set it to false",
        ));
    }
    Ok(())
}

/// KUBERNETES_NODE_NAME, else the host name (upstream's `os.Hostname()`).
fn node_name(env: Env<'_>) -> String {
    match env("KUBERNETES_NODE_NAME").filter(|s| !s.is_empty()) {
        Some(n) => n,
        None => std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_default(),
    }
}

/// Where the plugin binary is installed.
struct Binaries {
    dir: PathBuf,
    secondary: Option<PathBuf>,
    skip: Vec<String>,
    update: bool,
}

fn binaries(f: &Flags, env: Env<'_>) -> Result<Binaries> {
    let secondary_default = "/host/secondary-bin-dir";
    Ok(Binaries {
        dir: path(&f.cni_bin_dir, env, "CNI_BIN_DIR", "/host/opt/cni/bin")?,
        secondary: opt_path(
            &f.secondary_bin_dir,
            env,
            "SECONDARY_BIN_DIR",
            secondary_default,
        )?,
        skip: list(&f.skip_cni_binaries, env, "SKIP_CNI_BINARIES", |c| {
            c == ',' || c.is_whitespace()
        }),
        update: typed(
            &f.update_cni_binaries,
            env,
            "UPDATE_CNI_BINARIES",
            true,
            parse_bool,
        )?,
    })
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
