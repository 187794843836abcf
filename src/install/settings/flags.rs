//! The installer's command line (argh): every option also has an environment variable (upper-case,
//! `-` → `_`); [`super::options::resolve`] applies flag > env > default.

// The fields' doc comments are their --help text (argh), written for operators: `[required]` and `<node>`
// there are help conventions, not rustdoc links or HTML.
#![allow(rustdoc::broken_intra_doc_links, rustdoc::invalid_html_tags)]

use crate::settings::FlagKind;
use argh::FromArgs;

/// The installer's command line. Every setting also has an environment variable (upper-case, `-` → `_`);
/// the help names it and the default.
#[derive(FromArgs, Debug, Default)]
#[argh(
    usage = "[options]",
    description = "The DaemonSet installer: copies this binary as the istio-cni plugin into the CNI\n\
                   bin dir, writes its kubeconfig, adds its entry to the runtime's primary CNI\n\
                   configuration, keeps them there, and at SIGTERM removes them or leaves them for\n\
                   its replacement. A flag beats its environment variable, which beats the default.",
    note = "A boolean flag is true bare, or takes a value: --once=false, --once false.\n\
            install-cni audit --help: the audit once, for operators\n\
            Environment only:\n\
            \x20 REPAIR_ENABLED [default: true]: the repair agent runs in this process with\n\
            \x20   the REPAIR_* settings of istio-cni-repair --help (REPAIR_NODE_NAME, ...)\n\
            \x20 POD_CACHE_ENABLED [default: true]: serve this node's pods to the plugin\n\
            \x20 NODE_NAME, else KUBERNETES_NODE_NAME, else REPAIR_NODE_NAME: this node\n\
            \x20 POD_NAME: this pod, whose DaemonSet the SIGTERM decision reads\n\
            \x20 KUBERNETES_SERVICE_HOST, KUBERNETES_SERVICE_PORT,\n\
            \x20   KUBERNETES_SERVICE_PROTOCOL [default: https]: the plugin's API server\n\
            \x20 FORCE_IPTABLES_BINARY: iptables-nft, iptables-legacy or iptables, recorded\n\
            \x20   as the node's backend instead of detecting it\n\
            \x20 IPTABLES_NODE_BINARIES [default: false]: the plugin runs the node's\n\
            \x20   iptables-restore/-save instead of writing the kernel's tables itself\n\
            \x20 AMBIENT_ENABLEMENT_SELECTOR: written into the plugin's entry\n\
            \x20 HTTPS_PROXY, NO_PROXY: this process's API connections go through the\n\
            \x20   proxy, as client-go's do\n\
            \x20 RUST_LOG: replaces the log levels",
    error_code(0, "installed (--once), uninstalled, or stopped by SIGTERM/SIGINT"),
    error_code(1, "installing or cleaning up failed"),
    error_code(2, "bad flags or settings (nothing was written)")
)]
pub struct Flags {
    /// conf dir as seen in this container [env: MOUNTED_CNI_NET_DIR]
    /// [default: /host/etc/cni/net.d]
    #[argh(option)]
    pub mounted_cni_net_dir: Option<String>,
    /// the same dir as seen on the host, for messages [env: CNI_NET_DIR]
    /// [default: /etc/cni/net.d]
    #[argh(option)]
    pub cni_net_dir: Option<String>,
    /// primary config file name, "" = the runtime's choice [env: CNI_CONF_NAME]
    /// [default: ""]
    #[argh(option)]
    pub cni_conf_name: Option<String>,
    /// merge into the primary config (true) or write a standalone one
    /// [env: CHAINED_CNI_PLUGIN] [default: true]
    #[argh(option)]
    pub chained_cni_plugin: Option<String>,
    /// write the merged list to our own file instead of editing the primary
    /// [env: ISTIO_OWNED_CNI_CONFIG] [default: false]
    #[argh(option)]
    pub istio_owned_cni_config: Option<String>,
    /// name of the Istio-owned file [env: ISTIO_OWNED_CNI_CONFIG_FILENAME]
    /// [default: 02-istio-cni.conflist]
    #[argh(option)]
    pub istio_owned_cni_config_filename: Option<String>,
    /// kubeconfig, log.sock and backend record dir [env: CNI_AGENT_RUN_DIR]
    /// [default: /var/run/istio-cni]
    #[argh(option)]
    pub cni_agent_run_dir: Option<String>,
    /// kubeconfig file mode, a Go integer: 0600 (octal), 384 (decimal), 0o600, 0x180
    /// [env: KUBECONFIG_MODE] [default: 0600]
    #[argh(option)]
    pub kubeconfig_mode: Option<String>,
    /// 0640 instead of 0600 for files we create [env: CNI_CONF_GROUP_READ]
    /// [default: false]
    #[argh(option)]
    pub cni_conf_group_read: Option<String>,
    /// CA file for the kubeconfig [env: KUBE_CA_FILE]
    /// [default: <service account dir>/ca.crt]
    #[argh(option)]
    pub kube_ca_file: Option<String>,
    /// write insecure-skip-tls-verify into the kubeconfig [env: SKIP_TLS_VERIFY]
    /// [default: false]
    #[argh(option)]
    pub skip_tls_verify: Option<String>,
    /// port of the Prometheus /metrics endpoint, 0 = any [env: MONITORING_PORT]
    /// [default: 15014]
    #[argh(option)]
    pub monitoring_port: Option<String>,
    /// verify every running sidecar pod of the node once per interval (a Go
    /// duration), 0 = off [env: AUDIT_INTERVAL] [default: 60s]
    #[argh(option)]
    pub audit_interval: Option<String>,
    /// port of /healthz and /readyz, 0 = any [env: HEALTH_PORT] [default: 8000]
    #[argh(option)]
    pub health_port: Option<String>,
    /// comma-separated namespaces the plugin skips [env: EXCLUDE_NAMESPACES]
    /// [default: ""]
    #[argh(option)]
    pub exclude_namespaces: Option<String>,
    /// this pod's namespace [env: POD_NAMESPACE] [default: ""]
    #[argh(option)]
    pub pod_namespace: Option<String>,
    /// the plugin programs nftables instead of iptables [env: NATIVE_NFTABLES]
    /// [default: false]
    #[argh(option)]
    pub native_nftables: Option<String>,
    /// ambient mode; not supported by this build, must be false
    /// [env: AMBIENT_ENABLED] [default: false]
    #[argh(option)]
    pub ambient_enabled: Option<String>,
    /// written into the plugin's entry as given; ambient mode, so never acted on here
    /// [env: ENABLE_AMBIENT_DETECTION_RETRY] [default: false]
    #[argh(option)]
    pub enable_ambient_detection_retry: Option<String>,
    /// the installer's log level (debug, info, warn, error, none, ...) or scopes
    /// "default:debug,cni-plugin:info", after --log_output_level [env: LOG_LEVEL]
    /// [default: info]
    #[argh(option)]
    pub log_level: Option<String>,
    /// scoped log levels, e.g. "default:info,cni-plugin:debug" (scopes: default,
    /// install, repair, cni-plugin, all); cni-plugin sets the plugin's level
    /// [default: info]
    #[argh(option)]
    pub log_output_level: Option<String>,
    /// the plugin's log level [env: PLUGIN_LOG_LEVEL] [default: info]
    #[argh(option)]
    pub plugin_log_level: Option<String>,
    /// write log lines as JSON (time, level, scope, msg) [env: LOG_AS_JSON]
    /// [default: false]
    #[argh(option)]
    pub log_as_json: Option<String>,
    /// release-1.9/maistra entry template: refused, the entry is built from the
    /// settings [env: CNI_NETWORK_CONFIG] [default: unset]
    #[argh(option)]
    pub cni_network_config: Option<String>,
    /// release-1.9/maistra entry template file: refused
    /// [env: CNI_NETWORK_CONFIG_FILE] [default: unset]
    #[argh(option)]
    pub cni_network_config_file: Option<String>,
    /// release-1.9/maistra kubeconfig name in the conf dir: refused, see
    /// CNI_AGENT_RUN_DIR [env: KUBECFG_FILE_NAME] [default: unset]
    #[argh(option)]
    pub kubecfg_file_name: Option<String>,
    /// target dir for the plugin binary [env: CNI_BIN_DIR]
    /// [default: /host/opt/cni/bin]
    #[argh(option)]
    pub cni_bin_dir: Option<String>,
    /// optional second bin dir, used when it exists and is writable
    /// [env: SECONDARY_BIN_DIR] [default: /host/secondary-bin-dir]
    #[argh(option)]
    pub secondary_bin_dir: Option<String>,
    /// binary names not to install (comma or space separated)
    /// [env: SKIP_CNI_BINARIES] [default: ""]
    #[argh(option)]
    pub skip_cni_binaries: Option<String>,
    /// replace binaries that already exist [env: UPDATE_CNI_BINARIES]
    /// [default: true]
    #[argh(option)]
    pub update_cni_binaries: Option<String>,
    /// service account dir [env: SERVICE_ACCOUNT_DIR]
    /// [default: /var/run/secrets/kubernetes.io/serviceaccount]
    #[argh(option)]
    pub service_account_dir: Option<String>,
    /// at SIGTERM always remove what we installed, even when our DaemonSet is only
    /// being rolled or restarted [env: DISABLE_SAFE_UPGRADE, else
    /// AMBIENT_DISABLE_SAFE_UPGRADE] [default: false]
    #[argh(option)]
    pub disable_safe_upgrade: Option<String>,
    /// one install pass, then exit 0 (installed) or 1; a missing conf dir is an
    /// error, not created [default: false]
    #[argh(switch)]
    pub once: bool,
    /// with --once: how long to wait for a primary config, e.g. 30s, 2m
    /// [env: WAIT_TIMEOUT] [default: 60s]
    #[argh(option)]
    pub wait_timeout: Option<String>,
    /// remove everything we installed, then exit [default: false]
    #[argh(switch)]
    pub uninstall: bool,
    /// print the version and exit
    #[argh(switch)]
    pub version: bool,
}

/// The installer's boolean settings (bare = true; see [`crate::settings::normalize_args`]).
const BOOLS: &[&str] = &[
    "chained-cni-plugin",
    "istio-owned-cni-config",
    "cni-conf-group-read",
    "skip-tls-verify",
    "native-nftables",
    "ambient-enabled",
    "enable-ambient-detection-retry",
    "log-as-json",
    "update-cni-binaries",
    "disable-safe-upgrade",
];

/// What each installer flag is, for [`normalize_args`].
pub fn kind(name: &str) -> FlagKind {
    match name {
        "once" | "uninstall" => FlagKind::Switch,
        n if BOOLS.contains(&n) => FlagKind::Bool,
        _ => FlagKind::Value,
    }
}

/// Normalises argv for argh: `--name=value` → `--name value`, Istio's underscore spellings
/// (`--log_output_level`) → dashes, and the boolean forms ([`crate::settings::normalize_args`]).
pub fn normalize_args(args: &[String]) -> Result<Vec<String>, String> {
    crate::settings::normalize_args(
        args,
        crate::settings::ArgStyle {
            dashes_for_underscores: true,
            kind: &kind,
        },
    )
}
