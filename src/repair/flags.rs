//! The `istio-cni-repair` applet's command line. Go-style `--flag=value` and bare boolean flags are
//! accepted (rewritten for argh by [`crate::settings::normalize_args`]); every repair setting has its
//! master (`--repair-*`) and 1.9 name. The setting flags are declared once, in `setting_flags!`, which
//! makes both the argh fields and the by-name lookup [`Flags::get`] the settings table uses.

// The fields' doc comments are their --help text (argh), written for operators: `[required]` and `<node>`
// there are help conventions, not rustdoc links or HTML.
#![allow(rustdoc::broken_intra_doc_links, rustdoc::invalid_html_tags)]

use super::options::is_bool_flag;
use crate::settings::{self, ArgStyle, FlagKind};
use argh::FromArgs;

/// Declares [`Flags`]: the setting flags (each an `Option<String>` looked up by its dashed name), then
/// the applet's other fields as written.
macro_rules! setting_flags {
    (
        settings { $( $(#[doc = $doc:literal])+ $field:ident, )* }
        $( $(#[$other_meta:meta])+ pub $other:ident: $ty:ident $(<$inner:ident>)?, )*
    ) => {
        /// The Istio CNI repair agent: finds pods on this node whose istio-validation init container keeps
        /// failing (no redirection) and repairs them in place, deletes them, or labels them.
        #[derive(FromArgs, Debug, Default)]
        #[argh(
            usage = "[options]",
            description = "The repair agent: finds pods on this node whose istio-validation init container\n\
                           keeps failing (no redirection) and repairs them in place, deletes them, or\n\
                           labels them. Every setting has a master name (--repair-*, REPAIR_*) and a\n\
                           release-1.9 one (its variable keeps the flag's dashes); a flag beats the\n\
                           environment, and the master name beats the 1.9 one.",
            note = "A boolean flag is true bare, or takes a value: --label-pods=false,\n\
                    --label-pods false.\n\
                    Environment only:\n\
                    \x20 NATIVE_NFTABLES [default: false]: repair with nftables, as the plugin does\n\
                    \x20 EXCLUDE_NAMESPACES [default: \"\"]: comma-separated, the plugin's exclusions\n\
                    \x20   (the audit skips their pods as ADD does)\n\
                    \x20 POD_NAMESPACE [default: \"\"]: the agent's namespace (its own pods skipped)\n\
                    \x20 RUST_LOG: replaces the log level",
            error_code(0, "done (one-shot mode: every broken pod handled)"),
            error_code(1, "a broken pod could not be handled (one-shot mode), or the agent failed"),
            error_code(2, "bad flags or settings")
        )]
        pub struct Flags {
            $( $(#[doc = $doc])+ #[argh(option)] pub $field: Option<String>, )*
            $( $(#[$other_meta])+ pub $other: $ty $(<$inner>)?, )*
        }

        impl Flags {
            /// The explicit value of a repair setting flag, by its name without `--`.
            pub fn get(&self, name: &str) -> Option<String> {
                let fields: &[(&str, &Option<String>)] = &[ $( (stringify!($field), &self.$field), )* ];
                fields
                    .iter()
                    .find(|(field, _)| field.replace('_', "-") == name)
                    .and_then(|(_, v)| (*v).clone())
            }
        }
    };
}

setting_flags! {
    settings {
        /// run the agent [env: REPAIR_ENABLED] [default: true]
        repair_enabled,
        /// node whose pods are watched, from the pod's spec.nodeName
        /// [env: REPAIR_NODE_NAME] [required]
        repair_node_name,
        /// release-1.9 name of --repair-node-name [env: REPAIR_NODE-NAME] [required]
        node_name,
        /// label key for label mode [env: REPAIR_BROKEN_POD_LABEL_KEY]
        /// [default: cni.istio.io/uninitialized]
        repair_broken_pod_label_key,
        /// release-1.9 name of --repair-broken-pod-label-key
        /// [env: REPAIR_BROKEN-POD-LABEL-KEY] [default: cni.istio.io/uninitialized]
        broken_pod_label_key,
        /// label value for label mode [env: REPAIR_BROKEN_POD_LABEL_VALUE]
        /// [default: "true"]
        repair_broken_pod_label_value,
        /// release-1.9 name of --repair-broken-pod-label-value
        /// [env: REPAIR_BROKEN-POD-LABEL-VALUE] [default: "true"]
        broken_pod_label_value,
        /// repair broken pods in place [env: REPAIR_REPAIR_PODS] [default: false]
        repair_repair_pods,
        /// short name of --repair-repair-pods [env: REPAIR_REPAIR-PODS]
        /// [default: false]
        repair_pods,
        /// delete broken pods [env: REPAIR_DELETE_PODS] [default: false]
        repair_delete_pods,
        /// release-1.9 name of --repair-delete-pods [env: REPAIR_DELETE-PODS]
        /// [default: false]
        delete_pods,
        /// label broken pods [env: REPAIR_LABEL_PODS] [default: false]
        repair_label_pods,
        /// release-1.9 name of --repair-label-pods [env: REPAIR_LABEL-PODS]
        /// [default: false]
        label_pods,
        /// annotation a pod must carry, "" = any pod [env: REPAIR_SIDECAR_ANNOTATION]
        /// [default: sidecar.istio.io/status]
        repair_sidecar_annotation,
        /// release-1.9 name of --repair-sidecar-annotation
        /// [env: REPAIR_SIDECAR-ANNOTATION] [default: sidecar.istio.io/status]
        sidecar_annotation,
        /// init container to inspect, "" = all [env: REPAIR_INIT_CONTAINER_NAME]
        /// [default: istio-validation]
        repair_init_container_name,
        /// release-1.9 name of --repair-init-container-name
        /// [env: REPAIR_INIT-CONTAINER-NAME] [default: istio-validation]
        init_container_name,
        /// required termination message, "" = any
        /// [env: REPAIR_INIT_CONTAINER_TERMINATION_MESSAGE] [default: ""]
        repair_init_container_termination_message,
        /// release-1.9 name of --repair-init-container-termination-message
        /// [env: REPAIR_INIT-CONTAINER-TERMINATION-MESSAGE] [default: ""]
        init_container_termination_message,
        /// required exit code, 0 = any [env: REPAIR_INIT_CONTAINER_EXIT_CODE]
        /// [default: 126]
        repair_init_container_exit_code,
        /// release-1.9 name of --repair-init-container-exit-code
        /// [env: REPAIR_INIT-CONTAINER-EXIT-CODE] [default: 126]
        init_container_exit_code,
        /// label selector for the watched pods [env: REPAIR_LABEL_SELECTORS]
        /// [default: ""]
        repair_label_selectors,
        /// release-1.9 name of --repair-label-selectors [env: REPAIR_LABEL-SELECTORS]
        /// [default: ""]
        label_selectors,
        /// extra field selector; spec.nodeName=<node> is always added
        /// [env: REPAIR_FIELD_SELECTORS] [default: ""]
        repair_field_selectors,
        /// release-1.9 name of --repair-field-selectors [env: REPAIR_FIELD-SELECTORS]
        /// [default: ""]
        field_selectors,
        /// false: list once, act, print the counters, exit
        /// [env: REPAIR_RUN_AS_DAEMON] [default: true]
        repair_run_as_daemon,
        /// release-1.9 name of --repair-run-as-daemon [env: REPAIR_RUN-AS-DAEMON]
        /// [default: true]
        run_as_daemon,
    }
    /// kubeconfig file [env: KUBECONFIG] [default: the in-cluster configuration]
    #[argh(option)]
    pub kubeconfig: Option<String>,
    /// the host's /proc, to find pod network namespaces [default: /host/proc]
    #[argh(option)]
    pub host_proc: Option<String>,
    /// the plugin's run dir (its iptables backend record) [env: CNI_AGENT_RUN_DIR]
    /// [default: /var/run/istio-cni]
    #[argh(option)]
    pub cni_agent_run_dir: Option<String>,
    /// port for Prometheus /metrics, 0 = off [env: MONITORING_PORT]
    /// [default: 15014]
    #[argh(option)]
    pub monitoring_port: Option<String>,
    /// verify every running sidecar pod of the node once per interval (a Go
    /// duration), 0 = off [env: AUDIT_INTERVAL] [default: 60s]
    #[argh(option)]
    pub audit_interval: Option<String>,
    /// log level: debug, info, warn, error, none [default: info]
    #[argh(option)]
    pub log_level: Option<String>,
    /// print the version and exit
    #[argh(switch)]
    pub version: bool,
}

/// Go flag syntax → argh: `--a=b` → `--a b`; the boolean repair flags take every applet's forms (bare
/// is true, `--flag=false`, `--flag false`).
pub fn normalize(args: &[String]) -> Result<Vec<String>, String> {
    settings::normalize_args(
        args,
        ArgStyle {
            dashes_for_underscores: false,
            kind: &|n| {
                if is_bool_flag(n) {
                    FlagKind::Bool
                } else {
                    FlagKind::Value
                }
            },
        },
    )
}

#[cfg(test)]
mod tests {
    use super::super::options;
    use super::*;
    use crate::settings::tests::v;

    /// What the entry point parses: the normalised arguments through argh (output and exit code on `Err`).
    fn parse(name: &str, args: &[String]) -> Result<Flags, (String, i32)> {
        let args = normalize(args).map_err(|e| (e, 2))?;
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        Flags::from_args(&[name], &refs)
            .map_err(|e| (e.output, if e.status.is_ok() { 0 } else { 2 }))
    }

    #[test]
    fn go_style_flags() {
        let f = parse(
            "istio-cni-repair",
            &v(&[
                "--run-as-daemon=false",
                "--label-pods",
                "--node-name",
                "n1",
                "--repair-label-selectors=a=b",
            ]),
        )
        .unwrap();
        assert_eq!(f.run_as_daemon.as_deref(), Some("false"));
        assert_eq!(f.label_pods.as_deref(), Some("true"));
        assert_eq!(f.get("node-name").as_deref(), Some("n1"));
        assert_eq!(f.get("repair-label-selectors").as_deref(), Some("a=b"));
        let (o, daemon) = options::resolve(&|n| f.get(n), &|_| None).unwrap();
        assert!(!daemon && o.label_pods && o.node_name == "n1" && o.label_selectors == "a=b");
        let (_, code) = parse("istio-cni-repair", &v(&["--bogus"])).unwrap_err();
        assert_eq!(code, 2);
        let (help, code) = parse("istio-cni-repair", &v(&["--help"])).unwrap_err();
        assert_eq!(code, 0);
        assert!(
            help.contains("--repair-delete-pods") && help.contains("--label-pods"),
            "{help}"
        );
    }

    #[test]
    fn every_setting_flag_is_wired() {
        let mut n = 0;
        for s in options::SETTINGS {
            for name in s.flags {
                let f = parse("r", &v(&[&format!("--{name}=1")])).unwrap();
                assert_eq!(f.get(name).as_deref(), Some("1"), "--{name}");
                n += 1;
            }
        }
        assert_eq!(n, 27);
        // Only setting flags are looked up by name; underscores are not a spelling of them.
        let f = parse("r", &v(&["--kubeconfig=k", "--node-name=n"])).unwrap();
        assert_eq!(f.get("kubeconfig"), None);
        assert_eq!(f.get("node_name"), None);
    }
}
