//! Installer settings: upstream's names as flags and environment variables (flag > env > default), every
//! value validated at start. Unknown flags and malformed values are errors that name the setting and the
//! bad value. An empty environment variable means "unset" for booleans and numbers (use the default) and
//! the empty string for text settings, where upstream master's `AllowEmptyEnv` gives the same result.
//!
//! The node's agents' settings (`REPAIR_*`, master names and the dashed release-1.9 names as aliases, and
//! `AUDIT_INTERVAL`) are read by their own parser, [`crate::agents::Options::from_installer`].

use super::flags::Flags;
use super::readers::{env_bool, list, named, opt_path, path, plain_file_name};
use crate::error::{Error, Result};
use crate::install::config::selectors::EnablementSelector;
use crate::iptables::Backend;
use crate::settings::{parse_bool, parse_duration, parse_kubeconfig_mode, parse_port, Env, Named};
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
    /// The installer's own logging: per-scope levels, text or JSON lines.
    pub log: crate::logging::Config,
    /// Things worth a warning once logging runs (e.g. a level word we did not know).
    pub warnings: Vec<String>,
    pub plugin_log_level: String,
    /// AMBIENT_ENABLEMENT_SELECTOR, parsed; written into our entry even with ambient off, as upstream.
    pub enablement_selectors: Vec<EnablementSelector>,
    /// ENABLE_AMBIENT_DETECTION_RETRY, written into our entry as given, as upstream.
    pub enable_ambient_detection_retry: bool,
    /// FORCE_IPTABLES_BINARY: record this backend instead of detecting the host's.
    pub forced_iptables_backend: Option<Backend>,
    /// IPTABLES_NODE_BINARIES: the plugin programs iptables mode through the node's `iptables-restore` and
    /// `-save` (on its PATH) instead of the kernel's interfaces.
    pub iptables_node_binaries: bool,
    pub k8s_protocol: String,
    pub k8s_host: String,
    pub k8s_port: String,
    /// This node (`node_name`): the pod watch's, the in-process repair agent's and the SIGTERM
    /// decision's; "" = none known.
    pub node_name: String,
    pub bin_dir: PathBuf,
    pub secondary_bin_dir: Option<PathBuf>,
    pub skip_binaries: Vec<String>,
    pub update_binaries: bool,
    pub service_account_dir: PathBuf,
    pub once: bool,
    pub wait_timeout: Duration,
    pub uninstall: bool,
    /// The in-process agents' settings: the repair agent's (`REPAIR_*`), the audit's (`AUDIT_INTERVAL`).
    pub agents: crate::agents::Options,
    /// What the SIGTERM decision (replacement or uninstall) needs.
    pub handover: Handover,
    /// POD_CACHE_ENABLED (default true): serve this node's pods to the plugin from one watch.
    pub pod_cache: bool,
}

/// Settings of the SIGTERM decision ([`crate::install::handover`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Handover {
    /// POD_NAME (the chart's `fieldRef`): our pod, whose `ownerReferences` name our DaemonSet.
    pub pod_name: String,
    /// `Some("DISABLE_SAFE_UPGRADE=true")` (or upstream's ambient-mode name) when turned off: always clean up.
    pub disabled_by: Option<String>,
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

/// Resolves and validates every setting, concern by concern. Long: one field a line in the struct's order,
/// grouped by concern (a split would scatter the one table an operator's setting is looked up in).
pub fn resolve(f: &Flags, env: Env<'_>) -> Result<Settings> {
    let r = named(env);
    let conf = conf_unless_refused(f, &r, env)?;
    let (plugin_log_level, log, mut warnings) = super::log_settings::resolve(f, &r)?;
    warnings.extend(empty_chained(f, env));
    let bins = binaries(f, &r)?;
    let exclude = list(&r, &f.exclude_namespaces, "EXCLUDE_NAMESPACES", |c| {
        c == ','
    });
    let mut settings = Settings {
        // Where the CNI configuration goes.
        mounted_cni_net_dir: conf.mounted,
        cni_net_dir: conf.host,
        cni_conf_name: conf.name,
        chained: conf.chained,
        istio_owned: conf.istio_owned,
        istio_owned_filename: conf.owned_name,
        conf_group_read: r.bool(&f.cni_conf_group_read, "CNI_CONF_GROUP_READ", false)?,
        // The plugin's run dir, and the kubeconfig written there.
        run_dir: path(
            &r,
            &f.cni_agent_run_dir,
            "CNI_AGENT_RUN_DIR",
            "/var/run/istio-cni",
        )?,
        kubeconfig_mode: r.typed(
            &f.kubeconfig_mode,
            "KUBECONFIG_MODE",
            0o600,
            parse_kubeconfig_mode,
        )?,
        kube_ca_file: opt_path(&r, &f.kube_ca_file, "KUBE_CA_FILE", "")?,
        skip_tls_verify: r.bool(&f.skip_tls_verify, "SKIP_TLS_VERIFY", false)?,
        service_account_dir: path(
            &r,
            &f.service_account_dir,
            "SERVICE_ACCOUNT_DIR",
            "/var/run/secrets/kubernetes.io/serviceaccount",
        )?,
        k8s_protocol: env("KUBERNETES_SERVICE_PROTOCOL").unwrap_or_default(),
        k8s_host: env("KUBERNETES_SERVICE_HOST").unwrap_or_default(),
        k8s_port: env("KUBERNETES_SERVICE_PORT").unwrap_or_default(),
        node_name: String::new(),
        // The plugin's entry.
        exclude_namespaces: (!exclude.is_empty()).then_some(exclude),
        pod_namespace: r.text(&f.pod_namespace, "POD_NAMESPACE", ""),
        native_nftables: r.bool(&f.native_nftables, "NATIVE_NFTABLES", false)?,
        plugin_log_level,
        enablement_selectors: crate::install::config::selectors::parse(
            &env("AMBIENT_ENABLEMENT_SELECTOR").unwrap_or_default(),
        )?,
        enable_ambient_detection_retry: r.bool(
            &f.enable_ambient_detection_retry,
            "ENABLE_AMBIENT_DETECTION_RETRY",
            false,
        )?,
        forced_iptables_backend: forced_backend(env)?,
        iptables_node_binaries: env_bool(env, "IPTABLES_NODE_BINARIES")?,
        // The installer's own logging and servers.
        log,
        warnings,
        monitoring_port: r.typed(&f.monitoring_port, "MONITORING_PORT", 15014, parse_port)?,
        health_port: r.typed(&f.health_port, "HEALTH_PORT", 8000, parse_port)?,
        // The plugin binary.
        bin_dir: bins.dir,
        secondary_bin_dir: bins.secondary,
        skip_binaries: bins.skip,
        update_binaries: bins.update,
        // How this run ends.
        once: f.once,
        wait_timeout: r.typed(
            &f.wait_timeout,
            "WAIT_TIMEOUT",
            WAIT_TIMEOUT,
            parse_duration,
        )?,
        uninstall: f.uninstall,
        agents: crate::agents::Options::from_installer(&r, &f.audit_interval)?,
        handover: handover(f, &r, env)?,
        pod_cache: r.bool(&None, "POD_CACHE_ENABLED", true)?,
    };
    settings.node_name = node_name(&settings.agents.repair.node_name, env);
    settings
        .agents
        .repair
        .node_name
        .clone_from(&settings.node_name);
    Ok(settings)
}

/// The old installers' settings refused ([`super::legacy`]), the conf files, ambient mode refused: in
/// that order, the first error wins.
fn conf_unless_refused(f: &Flags, r: &Named<'_>, env: Env<'_>) -> Result<ConfFiles> {
    let legacy = [
        ("CNI_NETWORK_CONFIG", &f.cni_network_config),
        ("CNI_NETWORK_CONFIG_FILE", &f.cni_network_config_file),
        ("KUBECFG_FILE_NAME", &f.kubecfg_file_name),
    ];
    super::legacy::refuse_legacy(&legacy, env)?;
    let conf = conf_files(f, r)?;
    if r.bool(&f.ambient_enabled, "AMBIENT_ENABLED", false)? {
        return Err(Error::env(
            "AMBIENT_ENABLED",
            "ambient mode is not supported by this installer; set it to false",
        ));
    }
    Ok(conf)
}

/// The warning for CHAINED_CNI_PLUGIN set but empty: almost always a templating slip, and standalone
/// would replace the node's network (README).
fn empty_chained(f: &Flags, env: Env<'_>) -> Option<String> {
    (f.chained_cni_plugin.is_none() && env("CHAINED_CNI_PLUGIN").is_some_and(|v| v.trim().is_empty()))
        .then(|| {
            "CHAINED_CNI_PLUGIN is set but empty: chaining into the primary CNI configuration (the default); \
             upstream's install-cni reads an empty value as false and writes a standalone configuration \
             instead. Set it to true or false."
                .into()
        })
}

/// The one rule for this node's name: NODE_NAME, else KUBERNETES_NODE_NAME, else the repair agent's
/// REPAIR_NODE_NAME (or its 1.9 name); trimmed. The charts set them from the pod's `spec.nodeName`. Never
/// the host name, which in the DaemonSet's pod is the pod's name.
fn node_name(repair_node: &str, env: Env<'_>) -> String {
    [env("NODE_NAME"), env("KUBERNETES_NODE_NAME")]
        .into_iter()
        .flatten()
        .chain([repair_node.to_string()])
        .map(|n| n.trim().to_string())
        .find(|n| !n.is_empty())
        .unwrap_or_default()
}

/// DISABLE_SAFE_UPGRADE (flag `--disable-safe-upgrade`), else upstream's ambient-mode
/// AMBIENT_DISABLE_SAFE_UPGRADE; POD_NAME.
fn handover(f: &Flags, r: &Named<'_>, env: Env<'_>) -> Result<Handover> {
    let ours = r.find(&f.disable_safe_upgrade, "DISABLE_SAFE_UPGRADE");
    let off = |var: &str, found: Option<crate::settings::Found>| -> Result<Option<String>> {
        let on = crate::settings::typed(found, false, parse_bool)?;
        Ok(on.then(|| format!("{var}=true")))
    };
    let disabled_by = if ours.as_ref().is_some_and(|x| !x.value.trim().is_empty()) {
        off("DISABLE_SAFE_UPGRADE", ours)?
    } else {
        off(
            "AMBIENT_DISABLE_SAFE_UPGRADE",
            r.find(&None, "AMBIENT_DISABLE_SAFE_UPGRADE"),
        )?
    };
    Ok(Handover {
        pod_name: env("POD_NAME").unwrap_or_default().trim().to_string(),
        disabled_by,
    })
}

const WAIT_TIMEOUT: Duration = Duration::from_secs(60);

/// Where the CNI configuration goes.
struct ConfFiles {
    mounted: PathBuf,
    host: PathBuf,
    name: Option<String>,
    chained: bool,
    istio_owned: bool,
    owned_name: String,
}

fn conf_files(f: &Flags, r: &Named<'_>) -> Result<ConfFiles> {
    let mounted = path(
        r,
        &f.mounted_cni_net_dir,
        "MOUNTED_CNI_NET_DIR",
        "/host/etc/cni/net.d",
    )?;
    let host = path(r, &f.cni_net_dir, "CNI_NET_DIR", "/etc/cni/net.d")?;
    let conf_name = r.text(&f.cni_conf_name, "CNI_CONF_NAME", "");
    let name = if conf_name.is_empty() {
        None
    } else {
        plain_file_name("CNI_CONF_NAME", &conf_name)?;
        Some(conf_name)
    };
    let chained = r.bool(&f.chained_cni_plugin, "CHAINED_CNI_PLUGIN", true)?;
    let istio_owned = r.bool(&f.istio_owned_cni_config, "ISTIO_OWNED_CNI_CONFIG", false)?;
    let mut owned_name = r.text(
        &f.istio_owned_cni_config_filename,
        "ISTIO_OWNED_CNI_CONFIG_FILENAME",
        "",
    );
    if owned_name.is_empty() {
        owned_name = "02-istio-cni.conflist".into();
    }
    plain_file_name("ISTIO_OWNED_CNI_CONFIG_FILENAME", &owned_name)?;
    Ok(ConfFiles {
        mounted,
        host,
        name,
        chained,
        istio_owned: istio_owned && chained,
        owned_name,
    })
}

/// Where the plugin binary is installed.
struct Binaries {
    dir: PathBuf,
    secondary: Option<PathBuf>,
    skip: Vec<String>,
    update: bool,
}

fn binaries(f: &Flags, r: &Named<'_>) -> Result<Binaries> {
    Ok(Binaries {
        dir: path(r, &f.cni_bin_dir, "CNI_BIN_DIR", "/host/opt/cni/bin")?,
        secondary: opt_path(
            r,
            &f.secondary_bin_dir,
            "SECONDARY_BIN_DIR",
            "/host/secondary-bin-dir",
        )?,
        skip: list(r, &f.skip_cni_binaries, "SKIP_CNI_BINARIES", |c| {
            c == ',' || c.is_whitespace()
        }),
        update: r.bool(&f.update_cni_binaries, "UPDATE_CNI_BINARIES", true)?,
    })
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

#[cfg(test)]
#[path = "options_tests.rs"]
pub(in crate::install) mod tests;
