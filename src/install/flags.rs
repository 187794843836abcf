//! The installer's command line (argh): every option also has an environment variable (upper-case,
//! `-` → `_`); [`super::options::resolve`] applies flag > env > default.

use argh::FromArgs;

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
    /// kubeconfig file mode, a Go integer: 0600 (octal), 384 (decimal), 0o600, 0x180 [KUBECONFIG_MODE, 0600]
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
    /// written into the plugin's entry as given; ambient mode, so never acted on here
    /// [ENABLE_AMBIENT_DETECTION_RETRY, false]
    #[argh(option)]
    pub enable_ambient_detection_retry: Option<String>,
    /// the installer's log level (debug, info, warn, error, none, ...) or scopes "default:debug,cni-plugin:info" [LOG_LEVEL, info]
    #[argh(option)]
    pub log_level: Option<String>,
    /// istio logging scopes, e.g. "default:info,cni-plugin:debug"; cni-plugin sets the plugin level
    #[argh(option)]
    pub log_output_level: Option<String>,
    /// the plugin's log level [PLUGIN_LOG_LEVEL, info]
    #[argh(option)]
    pub plugin_log_level: Option<String>,
    /// write log lines as JSON (time, level, scope, msg) [LOG_AS_JSON, false]
    #[argh(switch)]
    pub log_as_json: bool,
    /// release-1.9/maistra entry template: refused, the entry is built from the settings [CNI_NETWORK_CONFIG]
    #[argh(option)]
    pub cni_network_config: Option<String>,
    /// release-1.9/maistra entry template file: refused [CNI_NETWORK_CONFIG_FILE]
    #[argh(option)]
    pub cni_network_config_file: Option<String>,
    /// release-1.9/maistra kubeconfig name in the conf dir: refused, see CNI_AGENT_RUN_DIR [KUBECFG_FILE_NAME]
    #[argh(option)]
    pub kubecfg_file_name: Option<String>,
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
    /// at SIGTERM always remove what we installed, even when our DaemonSet is only being rolled or restarted
    /// (AMBIENT_DISABLE_SAFE_UPGRADE is read too) [DISABLE_SAFE_UPGRADE, false]
    #[argh(option)]
    pub disable_safe_upgrade: Option<String>,
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

/// Normalises argv for argh: `--name=value` → `--name value`, and Istio's underscore spellings
/// (`--log_output_level`) → dashes.
pub fn normalize_args(args: &[String]) -> Vec<String> {
    crate::settings::normalize_args(
        args,
        crate::settings::ArgStyle {
            dashes_for_underscores: true,
            bare_true: &|_| false,
        },
    )
}
