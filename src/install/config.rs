//! Installer settings: upstream's names as flags and environment variables (flag > env > default), every
//! value validated at start. Unknown flags and malformed values are errors that name the setting and the
//! bad value. An empty environment variable means "unset" for booleans and numbers (use the default) and
//! the empty string for text settings, where upstream master's `AllowEmptyEnv` gives the same result.
//!
//! Also parses the `REPAIR_*` settings (master names, and the dashed release-1.9 names as aliases) into
//! [`RepairSettings`] for the repair agent.

pub use super::flags::{normalize_args, Flags};
pub use super::repair_settings::{repair_settings, RepairSettings};
use crate::error::{Error, Result};
use log::LevelFilter;
use std::path::PathBuf;
use std::time::Duration;

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
    pub log_level: LevelFilter,
    pub plugin_log_level: String,
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

/// Looks up an environment variable.
pub type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

/// The process environment.
pub fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// Go's `strconv.ParseBool`.
pub fn parse_bool(name: &str, v: &str) -> Result<bool> {
    match v.trim() {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Ok(false),
        other => Err(Error::env(
            name,
            format!("{other:?} is not a boolean (true or false)"),
        )),
    }
}

/// A file mode: `0600`, `0o600` and `600` are octal (as chmod); plain decimal with digits 8/9 (`384`) is
/// taken as decimal, as upstream's integer flag.
pub fn parse_mode(name: &str, v: &str) -> Result<u32> {
    let t = v.trim();
    let bad = || Error::env(name, format!("{v:?} is not a file mode (e.g. 0600)"));
    let m = if let Some(o) = t.strip_prefix("0o").or_else(|| t.strip_prefix("0O")) {
        u32::from_str_radix(o, 8).map_err(|_| bad())?
    } else if t.bytes().all(|b| (b'0'..=b'7').contains(&b)) && !t.is_empty() {
        u32::from_str_radix(t, 8).map_err(|_| bad())?
    } else {
        t.parse::<u32>().map_err(|_| bad())?
    };
    if m > 0o7777 {
        return Err(bad());
    }
    Ok(m)
}

/// A duration: `250ms`, `30s`, `2m`, `1h`, or bare seconds.
pub fn parse_duration(name: &str, v: &str) -> Result<Duration> {
    let t = v.trim();
    let bad = || {
        Error::env(
            name,
            format!("{v:?} is not a duration (e.g. 30s, 500ms, 2m)"),
        )
    };
    let (num, unit) = match t.find(|c: char| !c.is_ascii_digit() && c != '.') {
        Some(i) => t.split_at(i),
        None => (t, "s"),
    };
    let n: f64 = num.parse().map_err(|_| bad())?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => return Err(bad()),
    };
    if !secs.is_finite() || !(0.0..=1e9).contains(&secs) {
        return Err(bad());
    }
    Ok(Duration::from_secs_f64(secs))
}

fn parse_port(name: &str, v: &str) -> Result<u16> {
    v.trim()
        .parse::<u16>()
        .map_err(|_| Error::env(name, format!("{v:?} is not a port number (0-65535)")))
}

fn parse_level(name: &str, v: &str) -> Result<LevelFilter> {
    crate::logging::parse_level(v).ok_or_else(|| {
        Error::env(
            name,
            format!("{v:?} is not a log level (debug, info, warn, error, none)"),
        )
    })
}

fn check_plugin_level(name: &str, v: &str) -> Result<String> {
    parse_level(name, v)?;
    Ok(v.trim().to_ascii_lowercase())
}

/// The plugin level from `--log_output_level` (`scope:level` pairs, comma-separated; the `cni-plugin`
/// scope, else `default`, else a bare level).
fn plugin_level_from_scopes(v: &str) -> Result<Option<String>> {
    let mut found = None;
    let mut default = None;
    for part in v.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.split_once(':') {
            Some(("cni-plugin", l)) => found = Some(check_plugin_level("--log_output_level", l)?),
            Some(("default", l)) | Some(("all", l)) => {
                default = Some(check_plugin_level("--log_output_level", l)?)
            }
            Some((_, l)) => {
                check_plugin_level("--log_output_level", l)?;
            }
            None => default = Some(check_plugin_level("--log_output_level", part)?),
        }
    }
    Ok(found.or(default))
}

/// Resolves one setting: the flag, else the env var, else `None`.
fn pick(flag: &Option<String>, env: Env<'_>, var: &str) -> Option<(String, String)> {
    match flag {
        Some(v) => Some((
            format!("--{}", var.to_ascii_lowercase().replace('_', "-")),
            v.clone(),
        )),
        None => env(var).map(|v| (var.to_string(), v)),
    }
}

/// Text setting with a default.
fn text(flag: &Option<String>, env: Env<'_>, var: &str, default: &str) -> String {
    pick(flag, env, var)
        .map(|(_, v)| v)
        .unwrap_or_else(|| default.to_string())
}

/// Typed setting: flag > env (empty env = unset) > default.
fn typed<T>(
    flag: &Option<String>,
    env: Env<'_>,
    var: &str,
    default: T,
    parse: impl Fn(&str, &str) -> Result<T>,
) -> Result<T> {
    match pick(flag, env, var) {
        Some((_, v)) if v.trim().is_empty() && flag.is_none() => Ok(default),
        Some((name, v)) => parse(&name, &v),
        None => Ok(default),
    }
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

/// Resolves and validates every setting.
pub fn resolve(f: &Flags, env: Env<'_>) -> Result<Settings> {
    let mounted = abs_path(
        "MOUNTED_CNI_NET_DIR",
        text(
            &f.mounted_cni_net_dir,
            env,
            "MOUNTED_CNI_NET_DIR",
            "/host/etc/cni/net.d",
        ),
    )?;
    let cni_net_dir = abs_path(
        "CNI_NET_DIR",
        text(&f.cni_net_dir, env, "CNI_NET_DIR", "/etc/cni/net.d"),
    )?;
    let conf_name = text(&f.cni_conf_name, env, "CNI_CONF_NAME", "");
    let cni_conf_name = if conf_name.is_empty() {
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
    let mut owned_name = text(
        &f.istio_owned_cni_config_filename,
        env,
        "ISTIO_OWNED_CNI_CONFIG_FILENAME",
        "",
    );
    if owned_name.is_empty() {
        owned_name = "02-istio-cni.conflist".into();
    }
    plain_file_name("ISTIO_OWNED_CNI_CONFIG_FILENAME", &owned_name)?;
    let ambient = typed(
        &f.ambient_enabled,
        env,
        "AMBIENT_ENABLED",
        false,
        parse_bool,
    )?;
    if ambient {
        return Err(Error::env(
            "AMBIENT_ENABLED",
            "ambient mode is not supported by this installer; set it to false",
        ));
    }
    let run_dir = abs_path(
        "CNI_AGENT_RUN_DIR",
        text(
            &f.cni_agent_run_dir,
            env,
            "CNI_AGENT_RUN_DIR",
            "/var/run/istio-cni",
        ),
    )?;
    let exclude = text(&f.exclude_namespaces, env, "EXCLUDE_NAMESPACES", "");
    let exclude: Vec<String> = exclude
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect();
    let log_level = typed(
        &f.log_level,
        env,
        "LOG_LEVEL",
        LevelFilter::Info,
        parse_level,
    )?;
    let mut plugin_log_level = typed(
        &f.plugin_log_level,
        env,
        "PLUGIN_LOG_LEVEL",
        "info".to_string(),
        check_plugin_level,
    )?;
    if let Some(scopes) = &f.log_output_level {
        if let Some(l) = plugin_level_from_scopes(scopes)? {
            if f.plugin_log_level.is_none() {
                plugin_log_level = l;
            }
        }
    }
    let sa_dir = abs_path(
        "SERVICE_ACCOUNT_DIR",
        text(
            &f.service_account_dir,
            env,
            "SERVICE_ACCOUNT_DIR",
            "/var/run/secrets/kubernetes.io/serviceaccount",
        ),
    )?;
    let ca = text(&f.kube_ca_file, env, "KUBE_CA_FILE", "");
    let secondary = text(
        &f.secondary_bin_dir,
        env,
        "SECONDARY_BIN_DIR",
        "/host/secondary-bin-dir",
    );
    let node_name = match env("KUBERNETES_NODE_NAME").filter(|s| !s.is_empty()) {
        Some(n) => n,
        None => std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_default(),
    };
    let skip = text(&f.skip_cni_binaries, env, "SKIP_CNI_BINARIES", "");
    Ok(Settings {
        mounted_cni_net_dir: mounted,
        cni_net_dir,
        cni_conf_name,
        chained,
        istio_owned: istio_owned && chained,
        istio_owned_filename: owned_name,
        run_dir,
        kubeconfig_mode: typed(
            &f.kubeconfig_mode,
            env,
            "KUBECONFIG_MODE",
            0o600,
            parse_mode,
        )?,
        conf_group_read: typed(
            &f.cni_conf_group_read,
            env,
            "CNI_CONF_GROUP_READ",
            false,
            parse_bool,
        )?,
        kube_ca_file: if ca.is_empty() {
            None
        } else {
            Some(abs_path("KUBE_CA_FILE", ca)?)
        },
        skip_tls_verify: typed(
            &f.skip_tls_verify,
            env,
            "SKIP_TLS_VERIFY",
            false,
            parse_bool,
        )?,
        monitoring_port: typed(
            &f.monitoring_port,
            env,
            "MONITORING_PORT",
            15014,
            parse_port,
        )?,
        health_port: typed(&f.health_port, env, "HEALTH_PORT", 8000, parse_port)?,
        exclude_namespaces: if exclude.is_empty() {
            None
        } else {
            Some(exclude)
        },
        pod_namespace: text(&f.pod_namespace, env, "POD_NAMESPACE", ""),
        native_nftables: typed(
            &f.native_nftables,
            env,
            "NATIVE_NFTABLES",
            false,
            parse_bool,
        )?,
        log_level,
        plugin_log_level,
        k8s_protocol: env("KUBERNETES_SERVICE_PROTOCOL").unwrap_or_default(),
        k8s_host: env("KUBERNETES_SERVICE_HOST").unwrap_or_default(),
        k8s_port: env("KUBERNETES_SERVICE_PORT").unwrap_or_default(),
        node_name,
        bin_dir: abs_path(
            "CNI_BIN_DIR",
            text(&f.cni_bin_dir, env, "CNI_BIN_DIR", "/host/opt/cni/bin"),
        )?,
        secondary_bin_dir: if secondary.is_empty() {
            None
        } else {
            Some(abs_path("SECONDARY_BIN_DIR", secondary)?)
        },
        skip_binaries: skip
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect(),
        update_binaries: typed(
            &f.update_cni_binaries,
            env,
            "UPDATE_CNI_BINARIES",
            true,
            parse_bool,
        )?,
        service_account_dir: sa_dir,
        once: f.once,
        wait_timeout: typed(
            &f.wait_timeout,
            env,
            "WAIT_TIMEOUT",
            Duration::from_secs(60),
            parse_duration,
        )?,
        uninstall: f.uninstall,
        repair: repair_settings(env)?,
    })
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
