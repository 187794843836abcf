//! The `istio-cni-repair` applet's command line. Go-style `--flag=value` and bare boolean flags are
//! accepted (rewritten for argh); every repair setting has its master (`--repair-*`) and 1.9 name.

use super::options::{self, is_bool_flag};
use argh::FromArgs;

/// The Istio CNI repair agent: finds pods on this node whose istio-validation init container keeps
/// failing (no redirection) and repairs them in place, deletes them, or labels them.
#[derive(FromArgs, Debug, Default)]
pub struct Flags {
    /// run the agent in this process (master; env REPAIR_ENABLED, default true)
    #[argh(option)]
    pub repair_enabled: Option<String>,
    /// node whose pods are watched (env REPAIR_NODE_NAME)
    #[argh(option)]
    pub repair_node_name: Option<String>,
    /// release-1.9 name of --repair-node-name (env REPAIR_NODE-NAME)
    #[argh(option)]
    pub node_name: Option<String>,
    /// label key for label mode (default cni.istio.io/uninitialized)
    #[argh(option)]
    pub repair_broken_pod_label_key: Option<String>,
    /// release-1.9 name of --repair-broken-pod-label-key
    #[argh(option)]
    pub broken_pod_label_key: Option<String>,
    /// label value for label mode (default true)
    #[argh(option)]
    pub repair_broken_pod_label_value: Option<String>,
    /// release-1.9 name of --repair-broken-pod-label-value
    #[argh(option)]
    pub broken_pod_label_value: Option<String>,
    /// repair broken pods in place (env REPAIR_REPAIR_PODS, default false)
    #[argh(option)]
    pub repair_repair_pods: Option<String>,
    /// short name of --repair-repair-pods
    #[argh(option)]
    pub repair_pods: Option<String>,
    /// delete broken pods (env REPAIR_DELETE_PODS / REPAIR_DELETE-PODS, default false)
    #[argh(option)]
    pub repair_delete_pods: Option<String>,
    /// release-1.9 name of --repair-delete-pods
    #[argh(option)]
    pub delete_pods: Option<String>,
    /// label broken pods (env REPAIR_LABEL_PODS / REPAIR_LABEL-PODS, default false)
    #[argh(option)]
    pub repair_label_pods: Option<String>,
    /// release-1.9 name of --repair-label-pods
    #[argh(option)]
    pub label_pods: Option<String>,
    /// annotation a pod must carry (default sidecar.istio.io/status; "" = any pod)
    #[argh(option)]
    pub repair_sidecar_annotation: Option<String>,
    /// release-1.9 name of --repair-sidecar-annotation
    #[argh(option)]
    pub sidecar_annotation: Option<String>,
    /// init container to inspect (default istio-validation; "" = all)
    #[argh(option)]
    pub repair_init_container_name: Option<String>,
    /// release-1.9 name of --repair-init-container-name
    #[argh(option)]
    pub init_container_name: Option<String>,
    /// required termination message (default "" = any)
    #[argh(option)]
    pub repair_init_container_termination_message: Option<String>,
    /// release-1.9 name of --repair-init-container-termination-message
    #[argh(option)]
    pub init_container_termination_message: Option<String>,
    /// required exit code (default 126; 0 = any)
    #[argh(option)]
    pub repair_init_container_exit_code: Option<String>,
    /// release-1.9 name of --repair-init-container-exit-code
    #[argh(option)]
    pub init_container_exit_code: Option<String>,
    /// label selector for the watched pods
    #[argh(option)]
    pub repair_label_selectors: Option<String>,
    /// release-1.9 name of --repair-label-selectors
    #[argh(option)]
    pub label_selectors: Option<String>,
    /// extra field selector (spec.nodeName=<node> is always added)
    #[argh(option)]
    pub repair_field_selectors: Option<String>,
    /// release-1.9 name of --repair-field-selectors
    #[argh(option)]
    pub field_selectors: Option<String>,
    /// false: list once, act, exit (env REPAIR_RUN_AS_DAEMON / REPAIR_RUN-AS-DAEMON, default true)
    #[argh(option)]
    pub repair_run_as_daemon: Option<String>,
    /// release-1.9 name of --repair-run-as-daemon
    #[argh(option)]
    pub run_as_daemon: Option<String>,
    /// kubeconfig file (default: KUBECONFIG, else in-cluster)
    #[argh(option)]
    pub kubeconfig: Option<String>,
    /// the host's /proc, to find pod network namespaces (default /host/proc)
    #[argh(option)]
    pub host_proc: Option<String>,
    /// the plugin's run dir (iptables backend record; env CNI_AGENT_RUN_DIR, default /var/run/istio-cni)
    #[argh(option)]
    pub cni_agent_run_dir: Option<String>,
    /// port for Prometheus /metrics, 0 = off (env MONITORING_PORT, default 15014)
    #[argh(option)]
    pub monitoring_port: Option<String>,
    /// log level: debug, info, warn, error (default info)
    #[argh(option)]
    pub log_level: Option<String>,
    /// print the version and exit
    #[argh(switch)]
    pub version: bool,
}

impl Flags {
    /// The explicit value of a repair setting flag, by its name without `--`.
    pub fn get(&self, name: &str) -> Option<String> {
        let v = match name {
            "repair-enabled" => &self.repair_enabled,
            "repair-node-name" => &self.repair_node_name,
            "node-name" => &self.node_name,
            "repair-broken-pod-label-key" => &self.repair_broken_pod_label_key,
            "broken-pod-label-key" => &self.broken_pod_label_key,
            "repair-broken-pod-label-value" => &self.repair_broken_pod_label_value,
            "broken-pod-label-value" => &self.broken_pod_label_value,
            "repair-repair-pods" => &self.repair_repair_pods,
            "repair-pods" => &self.repair_pods,
            "repair-delete-pods" => &self.repair_delete_pods,
            "delete-pods" => &self.delete_pods,
            "repair-label-pods" => &self.repair_label_pods,
            "label-pods" => &self.label_pods,
            "repair-sidecar-annotation" => &self.repair_sidecar_annotation,
            "sidecar-annotation" => &self.sidecar_annotation,
            "repair-init-container-name" => &self.repair_init_container_name,
            "init-container-name" => &self.init_container_name,
            "repair-init-container-termination-message" => {
                &self.repair_init_container_termination_message
            }
            "init-container-termination-message" => &self.init_container_termination_message,
            "repair-init-container-exit-code" => &self.repair_init_container_exit_code,
            "init-container-exit-code" => &self.init_container_exit_code,
            "repair-label-selectors" => &self.repair_label_selectors,
            "label-selectors" => &self.label_selectors,
            "repair-field-selectors" => &self.repair_field_selectors,
            "field-selectors" => &self.field_selectors,
            "repair-run-as-daemon" => &self.repair_run_as_daemon,
            "run-as-daemon" => &self.run_as_daemon,
            _ => return None,
        };
        v.clone()
    }
}

/// Go flag syntax → argh: `--a=b` → `--a b`; a bare boolean repair flag → `--flag true`.
pub fn normalize(args: &[String]) -> Vec<String> {
    let mut out = Vec::with_capacity(args.len() + 4);
    for a in args {
        match a.strip_prefix("--").map(|r| r.split_once('=')) {
            Some(Some((name, value))) => {
                out.push(format!("--{name}"));
                out.push(value.to_string());
            }
            Some(None) if is_bool_flag(&a[2..]) => {
                out.push(a.clone());
                out.push("true".into());
            }
            _ => out.push(a.clone()),
        }
    }
    out
}

/// Parses the command line (already past the applet name). `Err` carries argh's output and exit code.
pub fn parse(name: &str, args: &[String]) -> Result<Flags, (String, i32)> {
    let args = normalize(args);
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    Flags::from_args(&[name], &refs).map_err(|e| (e.output, if e.status.is_ok() { 0 } else { 2 }))
}

/// The applet entry point.
pub fn main(name: &str, args: &[String]) -> i32 {
    let flags = match parse(name, args) {
        Ok(f) => f,
        Err((text, code)) => {
            if code == 0 {
                print!("{text}");
            } else {
                eprint!("{text}");
            }
            return code;
        }
    };
    if flags.version {
        println!("{}", crate::cli::version_text(name));
        return 0;
    }
    let env = |k: &str| std::env::var(k).ok();
    let level = flags
        .log_level
        .as_deref()
        .and_then(crate::logging::parse_level)
        .unwrap_or(log::LevelFilter::Info);
    crate::logging::init(level);
    match run(&flags, &env) {
        Ok(0) => 0,
        Ok(n) => {
            log::error!("repair: {n} broken pod(s) could not be handled");
            1
        }
        Err(e) => {
            log::error!("{name}: {e}");
            eprintln!("{name}: {e}");
            1
        }
    }
}

fn run(flags: &Flags, env: &dyn Fn(&str) -> Option<String>) -> crate::Result<u32> {
    let (opts, daemon) = options::resolve(&|n| flags.get(n), env)?;
    let monitoring_port = match flags
        .monitoring_port
        .clone()
        .or_else(|| env("MONITORING_PORT"))
    {
        None => options::DEFAULT_MONITORING_PORT,
        Some(v) => v
            .trim()
            .parse::<u16>()
            .map_err(|_| crate::Error::env("MONITORING_PORT", format!("{v:?} is not a port")))?,
    };
    let native_nftables = match env("NATIVE_NFTABLES").filter(|v| !v.is_empty()) {
        None => false,
        Some(v) => options::parse_bool(v.trim()).ok_or_else(|| {
            crate::Error::env("NATIVE_NFTABLES", format!("{v:?} is not a boolean"))
        })?,
    };
    let rt = super::Runtime {
        host_proc: flags
            .host_proc
            .clone()
            .unwrap_or_else(|| options::DEFAULT_HOST_PROC.into())
            .into(),
        cni_agent_run_dir: flags
            .cni_agent_run_dir
            .clone()
            .or_else(|| env("CNI_AGENT_RUN_DIR").filter(|v| !v.is_empty()))
            .unwrap_or_else(|| crate::cni::conf::DEFAULT_AGENT_RUN_DIR.into()),
        native_nftables,
        monitoring_port: (monitoring_port != 0).then_some(monitoring_port),
        run_as_daemon: daemon,
    };
    if !opts.enabled {
        log::info!("repair: disabled (repair-enabled=false); nothing to do");
        return Ok(0);
    }
    let client = match &flags.kubeconfig {
        Some(p) => crate::kube::Client::from_kubeconfig(std::path::Path::new(p))?,
        None => crate::kube::Client::from_env()?,
    };
    if let (Some(port), true) = (rt.monitoring_port, rt.run_as_daemon) {
        let addr = super::metrics::serve(port)?;
        log::info!("repair: metrics on http://{addr}/metrics");
    }
    let failed = super::run(client, opts, &rt)?;
    // One-shot mode: the counters are the pass's summary, for scripts and tests.
    print!("{}", super::metrics::render());
    Ok(failed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
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
        for s in options::SETTINGS {
            for name in s.flags {
                let f = parse("r", &v(&[&format!("--{name}=1")])).unwrap();
                assert_eq!(f.get(name).as_deref(), Some("1"), "--{name}");
            }
        }
    }
}
