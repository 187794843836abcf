//! Installer settings: upstream's names as flags and environment variables (flag > env > default), every
//! value validated at start. Unknown flags and malformed values are errors that name the setting and the
//! bad value. An empty environment variable means "unset" for booleans and numbers (use the default) and
//! the empty string for text settings, where upstream master's `AllowEmptyEnv` gives the same result.
//!
//! Also parses the `REPAIR_*` settings (master names, and the dashed release-1.9 names as aliases) into
//! [`RepairSettings`] for the repair agent.

use crate::error::{Error, Result};
use argh::FromArgs;
use log::LevelFilter;
use std::path::PathBuf;
use std::time::Duration;

/// The installer's command line. Every option also has an environment variable (upper-case, `-` → `_`).
#[derive(FromArgs, Debug, Default)]
pub struct Flags {
    /// conf dir as seen in this container [MOUNTED_CNI_NET_DIR, /host/etc/cni/net.d]
    #[argh(option)]
    pub mounted_cni_net_dir: Option<String>,
    /// the same dir as seen on the host, for messages [CNI_NET_DIR, /etc/cni/net.d]
    #[argh(option)]
    pub cni_net_dir: Option<String>,
    /// primary config file name, "" = auto-select [CNI_CONF_NAME]
    #[argh(option)]
    pub cni_conf_name: Option<String>,
    /// merge into the primary config (true) or write a standalone one [CHAINED_CNI_PLUGIN, true]
    #[argh(option)]
    pub chained_cni_plugin: Option<String>,
    /// write the merged list to our own file instead of editing the primary [ISTIO_OWNED_CNI_CONFIG, false]
    #[argh(option)]
    pub istio_owned_cni_config: Option<String>,
    /// name of the Istio-owned file [ISTIO_OWNED_CNI_CONFIG_FILENAME, 02-istio-cni.conflist]
    #[argh(option)]
    pub istio_owned_cni_config_filename: Option<String>,
    /// kubeconfig, log.sock and backend record dir [CNI_AGENT_RUN_DIR, /var/run/istio-cni]
    #[argh(option)]
    pub cni_agent_run_dir: Option<String>,
    /// kubeconfig file mode, octal [KUBECONFIG_MODE, 0600]
    #[argh(option)]
    pub kubeconfig_mode: Option<String>,
    /// 0640 instead of 0600 for files we create [CNI_CONF_GROUP_READ, false]
    #[argh(option)]
    pub cni_conf_group_read: Option<String>,
    /// CA file for the kubeconfig [KUBE_CA_FILE, <service account dir>/ca.crt]
    #[argh(option)]
    pub kube_ca_file: Option<String>,
    /// write insecure-skip-tls-verify into the kubeconfig [SKIP_TLS_VERIFY, false]
    #[argh(option)]
    pub skip_tls_verify: Option<String>,
    /// port of the Prometheus /metrics endpoint, 0 = any [MONITORING_PORT, 15014]
    #[argh(option)]
    pub monitoring_port: Option<String>,
    /// port of /healthz and /readyz, 0 = any [HEALTH_PORT, 8000]
    #[argh(option)]
    pub health_port: Option<String>,
    /// comma-separated namespaces the plugin skips [EXCLUDE_NAMESPACES]
    #[argh(option)]
    pub exclude_namespaces: Option<String>,
    /// this pod's namespace [POD_NAMESPACE]
    #[argh(option)]
    pub pod_namespace: Option<String>,
    /// the plugin programs nftables instead of iptables [NATIVE_NFTABLES, false]
    #[argh(option)]
    pub native_nftables: Option<String>,
    /// ambient mode; not supported by this build, must be false [AMBIENT_ENABLED, false]
    #[argh(option)]
    pub ambient_enabled: Option<String>,
    /// the installer's log level: debug, info, warn, error, none [LOG_LEVEL, info]
    #[argh(option)]
    pub log_level: Option<String>,
    /// istio logging scopes, e.g. "default:info,cni-plugin:debug"; cni-plugin sets the plugin level
    #[argh(option)]
    pub log_output_level: Option<String>,
    /// the plugin's log level [PLUGIN_LOG_LEVEL, info]
    #[argh(option)]
    pub plugin_log_level: Option<String>,
    /// accepted for compatibility; logs are text
    #[argh(switch)]
    pub log_as_json: bool,
    /// target dir for the plugin binary [CNI_BIN_DIR, /host/opt/cni/bin]
    #[argh(option)]
    pub cni_bin_dir: Option<String>,
    /// optional second bin dir, used when it exists and is writable [SECONDARY_BIN_DIR, /host/secondary-bin-dir]
    #[argh(option)]
    pub secondary_bin_dir: Option<String>,
    /// binary names not to install (comma or space separated) [SKIP_CNI_BINARIES]
    #[argh(option)]
    pub skip_cni_binaries: Option<String>,
    /// replace binaries that already exist [UPDATE_CNI_BINARIES, true]
    #[argh(option)]
    pub update_cni_binaries: Option<String>,
    /// service account dir [SERVICE_ACCOUNT_DIR, /var/run/secrets/kubernetes.io/serviceaccount]
    #[argh(option)]
    pub service_account_dir: Option<String>,
    /// one install pass, then exit 0 (installed) or non-zero
    #[argh(switch)]
    pub once: bool,
    /// with --once: how long to wait for a primary config, e.g. 30s, 2m [WAIT_TIMEOUT, 60s]
    #[argh(option)]
    pub wait_timeout: Option<String>,
    /// remove everything we installed, then exit
    #[argh(switch)]
    pub uninstall: bool,
    /// print the version and exit
    #[argh(switch)]
    pub version: bool,
}

/// The repair agent's settings, read by the installer (REPAIR_ENABLED runs the agent in-process).
/// Names: master `REPAIR_<NAME>` (flag `--repair-<name>` upstream); the release-1.9 dashed env names
/// (`REPAIR_NODE-NAME`, …) are accepted as aliases when the master name is unset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepairSettings {
    /// REPAIR_ENABLED (true).
    pub enabled: bool,
    /// REPAIR_NODE_NAME / REPAIR_NODE-NAME (""; the DaemonSet sets it from spec.nodeName).
    pub node_name: String,
    /// REPAIR_LABEL_PODS / REPAIR_LABEL-PODS (false).
    pub label_pods: bool,
    /// REPAIR_DELETE_PODS / REPAIR_DELETE-PODS (false).
    pub delete_pods: bool,
    /// REPAIR_REPAIR_PODS (false, master's code default; the chart sets true; master only, env only).
    pub repair_pods: bool,
    /// REPAIR_BROKEN_POD_LABEL_KEY / REPAIR_BROKEN-POD-LABEL-KEY (cni.istio.io/uninitialized).
    pub broken_pod_label_key: String,
    /// REPAIR_BROKEN_POD_LABEL_VALUE / REPAIR_BROKEN-POD-LABEL-VALUE (true).
    pub broken_pod_label_value: String,
    /// REPAIR_SIDECAR_ANNOTATION / REPAIR_SIDECAR-ANNOTATION (sidecar.istio.io/status).
    pub sidecar_annotation: String,
    /// REPAIR_INIT_CONTAINER_NAME / REPAIR_INIT-CONTAINER-NAME (istio-validation).
    pub init_container_name: String,
    /// REPAIR_INIT_CONTAINER_TERMINATION_MESSAGE / REPAIR_INIT-CONTAINER-TERMINATION-MESSAGE ("").
    pub init_container_termination_message: String,
    /// REPAIR_INIT_CONTAINER_EXIT_CODE / REPAIR_INIT-CONTAINER-EXIT-CODE (126).
    pub init_container_exit_code: i32,
    /// REPAIR_LABEL_SELECTORS / REPAIR_LABEL-SELECTORS ("").
    pub label_selectors: String,
    /// REPAIR_FIELD_SELECTORS / REPAIR_FIELD-SELECTORS ("").
    pub field_selectors: String,
}

impl RepairSettings {
    /// The repair agent's options (field for field upstream's `RepairConfig`).
    pub fn to_options(&self) -> crate::repair::options::Options {
        crate::repair::options::Options {
            enabled: self.enabled,
            node_name: self.node_name.clone(),
            label_key: self.broken_pod_label_key.clone(),
            label_value: self.broken_pod_label_value.clone(),
            repair_pods: self.repair_pods,
            delete_pods: self.delete_pods,
            label_pods: self.label_pods,
            sidecar_annotation: self.sidecar_annotation.clone(),
            init_container_name: self.init_container_name.clone(),
            init_termination_msg: self.init_container_termination_message.clone(),
            init_exit_code: i64::from(self.init_container_exit_code),
            label_selectors: self.label_selectors.clone(),
            field_selectors: self.field_selectors.clone(),
        }
    }
}

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

/// A repair env value: master name, else the 1.9 dashed alias.
fn repair_env(env: Env<'_>, master: &str) -> Option<(String, String)> {
    if let Some(v) = env(master) {
        return Some((master.to_string(), v));
    }
    let suffix = master.strip_prefix("REPAIR_")?;
    let alias = format!("REPAIR_{}", suffix.replace('_', "-"));
    env(&alias).map(|v| (alias, v))
}

/// Parses the REPAIR_* settings.
pub fn repair_settings(env: Env<'_>) -> Result<RepairSettings> {
    let t = |var: &str, d: &str| {
        repair_env(env, var)
            .map(|(_, v)| v)
            .unwrap_or_else(|| d.into())
    };
    let b = |var: &str, d: bool| -> Result<bool> {
        match repair_env(env, var) {
            Some((_, v)) if v.trim().is_empty() => Ok(d),
            Some((n, v)) => parse_bool(&n, &v),
            None => Ok(d),
        }
    };
    let exit_code = match repair_env(env, "REPAIR_INIT_CONTAINER_EXIT_CODE") {
        Some((_, v)) if v.trim().is_empty() => 126,
        Some((n, v)) => v
            .trim()
            .parse::<i32>()
            .map_err(|_| Error::env(n, format!("{v:?} is not an integer exit code")))?,
        None => 126,
    };
    Ok(RepairSettings {
        enabled: b("REPAIR_ENABLED", true)?,
        node_name: t("REPAIR_NODE_NAME", ""),
        label_pods: b("REPAIR_LABEL_PODS", false)?,
        delete_pods: b("REPAIR_DELETE_PODS", false)?,
        repair_pods: b("REPAIR_REPAIR_PODS", false)?,
        broken_pod_label_key: t("REPAIR_BROKEN_POD_LABEL_KEY", "cni.istio.io/uninitialized"),
        broken_pod_label_value: t("REPAIR_BROKEN_POD_LABEL_VALUE", "true"),
        sidecar_annotation: t("REPAIR_SIDECAR_ANNOTATION", "sidecar.istio.io/status"),
        init_container_name: t("REPAIR_INIT_CONTAINER_NAME", "istio-validation"),
        init_container_termination_message: t("REPAIR_INIT_CONTAINER_TERMINATION_MESSAGE", ""),
        init_container_exit_code: exit_code,
        label_selectors: t("REPAIR_LABEL_SELECTORS", ""),
        field_selectors: t("REPAIR_FIELD_SELECTORS", ""),
    })
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

/// Normalises argv for argh: `--name=value` → `--name value`, and Istio's underscore spellings
/// (`--log_output_level`) → dashes.
pub fn normalize_args(args: &[String]) -> Vec<String> {
    let mut out = Vec::with_capacity(args.len());
    for a in args {
        if let Some(rest) = a.strip_prefix("--") {
            let (name, value) = match rest.split_once('=') {
                Some((n, v)) => (n, Some(v)),
                None => (rest, None),
            };
            out.push(format!("--{}", name.replace('_', "-")));
            if let Some(v) = value {
                out.push(v.to_string());
            }
        } else {
            out.push(a.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env_of(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn resolve_with(flags: &Flags, pairs: &[(&str, &str)]) -> Result<Settings> {
        let m = env_of(pairs);
        let env = move |k: &str| m.get(k).cloned();
        resolve(flags, &env)
    }

    #[test]
    fn defaults_are_upstreams() {
        let s = resolve_with(&Flags::default(), &[]).unwrap();
        assert_eq!(s.mounted_cni_net_dir, PathBuf::from("/host/etc/cni/net.d"));
        assert_eq!(s.run_dir, PathBuf::from("/var/run/istio-cni"));
        assert!(s.chained && !s.conf_group_read && !s.skip_tls_verify);
        assert_eq!(
            (s.kubeconfig_mode, s.monitoring_port, s.health_port),
            (0o600, 15014, 8000)
        );
        assert_eq!(s.exclude_namespaces, None);
        assert_eq!(s.plugin_log_level, "info");
        assert!(s.update_binaries && s.repair.enabled && !s.repair.repair_pods);
        assert_eq!(s.repair.init_container_exit_code, 126);
    }

    #[test]
    fn flag_beats_env_beats_default() {
        let f = Flags {
            cni_conf_name: Some("flag.conflist".into()),
            ..Flags::default()
        };
        let s = resolve_with(
            &f,
            &[
                ("CNI_CONF_NAME", "env.conf"),
                ("CHAINED_CNI_PLUGIN", "false"),
            ],
        )
        .unwrap();
        assert_eq!(s.cni_conf_name.as_deref(), Some("flag.conflist"));
        assert!(!s.chained);
        let s = resolve_with(&Flags::default(), &[("CNI_CONF_NAME", "env.conf")]).unwrap();
        assert_eq!(s.cni_conf_name.as_deref(), Some("env.conf"));
    }

    #[test]
    fn malformed_values_name_the_setting() {
        let e = resolve_with(&Flags::default(), &[("CHAINED_CNI_PLUGIN", "yes")]).unwrap_err();
        assert!(
            e.to_string().contains("CHAINED_CNI_PLUGIN") && e.to_string().contains("yes"),
            "{e}"
        );
        let e = resolve_with(&Flags::default(), &[("MONITORING_PORT", "99999")]).unwrap_err();
        assert!(e.to_string().contains("MONITORING_PORT"), "{e}");
        let e = resolve_with(&Flags::default(), &[("KUBECONFIG_MODE", "rw")]).unwrap_err();
        assert!(e.to_string().contains("KUBECONFIG_MODE"), "{e}");
        let e = resolve_with(
            &Flags::default(),
            &[("REPAIR_INIT_CONTAINER_EXIT_CODE", "x")],
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("REPAIR_INIT_CONTAINER_EXIT_CODE"),
            "{e}"
        );
        let e = resolve_with(&Flags::default(), &[("AMBIENT_ENABLED", "true")]).unwrap_err();
        assert!(e.to_string().contains("AMBIENT_ENABLED"), "{e}");
        assert!(resolve_with(&Flags::default(), &[("CNI_CONF_NAME", "../x")]).is_err());
        assert!(resolve_with(&Flags::default(), &[("LOG_LEVEL", "loud")]).is_err());
    }

    #[test]
    fn modes_and_lists() {
        assert_eq!(parse_mode("m", "0600").unwrap(), 0o600);
        assert_eq!(parse_mode("m", "640").unwrap(), 0o640);
        assert_eq!(parse_mode("m", "0o644").unwrap(), 0o644);
        assert_eq!(parse_mode("m", "384").unwrap(), 0o600);
        let s = resolve_with(
            &Flags::default(),
            &[
                ("EXCLUDE_NAMESPACES", " a, ,b "),
                ("SKIP_CNI_BINARIES", "x y,z"),
            ],
        )
        .unwrap();
        assert_eq!(s.exclude_namespaces, Some(vec!["a".into(), "b".into()]));
        assert_eq!(s.skip_binaries, vec!["x", "y", "z"]);
        assert_eq!(
            parse_duration("d", "250ms").unwrap(),
            Duration::from_millis(250)
        );
        assert_eq!(parse_duration("d", "2m").unwrap(), Duration::from_secs(120));
        assert!(parse_duration("d", "2 weeks").is_err());
    }

    #[test]
    fn repair_names_of_both_eras() {
        let s = resolve_with(
            &Flags::default(),
            &[
                ("REPAIR_NODE-NAME", "n19"),
                ("REPAIR_DELETE_PODS", "true"),
                ("REPAIR_LABEL-PODS", "1"),
            ],
        )
        .unwrap();
        assert_eq!(s.repair.node_name, "n19");
        assert!(s.repair.delete_pods && s.repair.label_pods);
        // The same values as the repair agent's own parser reads from that environment.
        let m = env_of(&[
            ("REPAIR_NODE-NAME", "n19"),
            ("REPAIR_DELETE_PODS", "true"),
            ("REPAIR_LABEL-PODS", "1"),
        ]);
        let theirs = crate::repair::options::from_env(&|k: &str| m.get(k).cloned()).unwrap();
        assert_eq!(s.repair.to_options(), theirs);
        let d = resolve_with(&Flags::default(), &[]).unwrap();
        assert_eq!(
            d.repair.to_options(),
            crate::repair::options::Options::default()
        );
        let s = resolve_with(
            &Flags::default(),
            &[("REPAIR_NODE-NAME", "n19"), ("REPAIR_NODE_NAME", "master")],
        )
        .unwrap();
        assert_eq!(s.repair.node_name, "master");
    }

    #[test]
    fn scopes_and_equals_args() {
        let a = normalize_args(&[
            "--log_output_level=default:info,cni-plugin:debug".into(),
            "--once".into(),
        ]);
        assert_eq!(
            a,
            vec![
                "--log-output-level",
                "default:info,cni-plugin:debug",
                "--once"
            ]
        );
        let f = Flags {
            log_output_level: Some("default:info,cni-plugin:debug".into()),
            ..Flags::default()
        };
        assert_eq!(resolve_with(&f, &[]).unwrap().plugin_log_level, "debug");
    }
}
