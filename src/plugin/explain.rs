//! `istio-cni explain`: prints what ADD would apply, with no cluster.
//!
//! * `--pod POD.json [--conf CONF.json]`: the IPv4 `iptables-restore` document, then the IPv6 one when the
//!   pod's `status.podIPs` say IPv6 as ADD would see them in the pod's namespace (IPv4 listed first;
//!   plugin.md §4.3, with the proxy's `ISTIO_DUAL_STACK`); a pod that would
//!   not be redirected prints one `# no redirection: <reason>` line. Invalid annotations fail (stderr, exit 1)
//!   with the error ADD gives.
//! * `--capture CONFIG.json`: the documents for a raw capture configuration (conformance schema).
//! * `--nft` (or a `--conf` with `native_nftables: true`): the nftables script instead, byte for byte
//!   upstream's knftables transaction (the conformance `expected.nft`); ADD sends it as one netlink batch.
//!
//! Comment lines (`#`) with extra facts (TPROXY policy routing, which document is which) always come
//! *after* the documents, so stripping `#` lines leaves exactly the restore input.

use crate::cni::{conf, K8sArgs, NetConf};
use crate::error::{Context, Error, IoContext, Result};
use crate::json;
use crate::redirect::plan::{self, decide_pod, shortcut, Addresses, NodeEnv, PodPlan, Shortcut};
use crate::redirect::{render, CaptureConfig, PodInfo, TproxyRoute};
use argh::FromArgs;

/// Print the iptables-restore documents (or, with --nft, the nftables script) ADD would apply, without a cluster.
#[derive(FromArgs, Debug)]
#[argh(
    subcommand,
    name = "explain",
    usage = "(--pod <f> [--conf <f>] | --capture <f>) [--nft]",
    description = "Print the rules ADD would apply (iptables-restore, or nftables with --nft).",
    error_code(0, "printed"),
    error_code(
        1,
        "the inputs could not be read or are invalid (the error ADD would give)"
    ),
    error_code(2, "bad flags")
)]
pub struct ExplainArgs {
    /// a Kubernetes Pod as JSON (what the API server returns)
    #[argh(option)]
    pub pod: Option<String>,
    /// the network configuration as JSON [default: upstream's defaults]
    #[argh(option)]
    pub conf: Option<String>,
    /// a raw capture configuration as JSON (the conformance schema)
    #[argh(option)]
    pub capture: Option<String>,
    /// print the nftables script (native_nftables mode) instead of the iptables
    /// documents [default: false]
    #[argh(switch)]
    pub nft: bool,
}

/// The configuration explain assumes without `--conf`: no excluded namespaces, no agent namespace.
const DEFAULT_CONF: &str = r#"{"cniVersion":"1.1.0","name":"istio-cni","type":"istio-cni"}"#;

pub fn run(args: &ExplainArgs) -> i32 {
    let env = |k: &str| std::env::var(k).ok();
    match explain(args, &env) {
        Ok(out) => crate::applet::print_out("istio-cni explain", &out, 0),
        Err(Usage(msg)) => crate::applet::usage_error("istio-cni explain", msg),
        Err(Failed(e)) => {
            crate::applet::print_err(&format!("istio-cni explain: {e}\n"));
            1
        }
    }
}

pub enum ExplainError {
    /// Wrong combination of flags.
    Usage(&'static str),
    /// The inputs could not be read or are invalid (the error ADD would give).
    Failed(Error),
}
use ExplainError::{Failed, Usage};

impl From<Error> for ExplainError {
    fn from(e: Error) -> Self {
        Failed(e)
    }
}

/// The whole output for `args`; `env` is the node environment ADD would see.
pub fn explain(
    args: &ExplainArgs,
    env: &dyn Fn(&str) -> Option<String>,
) -> std::result::Result<String, ExplainError> {
    match (&args.pod, &args.conf, &args.capture) {
        (None, None, Some(c)) => Ok(explain_capture(c, args.nft)?),
        (Some(p), c, None) => Ok(explain_pod(p, c.as_deref(), env, args.nft)?),
        (_, _, Some(_)) => Err(Usage("--capture cannot be combined with --pod or --conf")),
        (None, _, None) => Err(Usage("give --pod (optionally with --conf) or --capture")),
    }
}

fn read(path: &str) -> Result<String> {
    std::fs::read_to_string(path).io_context(|| format!("read {path}"))
}

fn explain_capture(path: &str, nft: bool) -> Result<String> {
    let o = json::parse_object(&read(path)?, path)?;
    let cfg = CaptureConfig::from_json(&o).with_context(|| path.to_string())?;
    output(&cfg, nft, &[])
}

/// The iptables documents, or with `nft` the nftables script, then the comment lines: which text is
/// which, the TPROXY routes, `notes`.
fn output(cfg: &CaptureConfig, nft: bool, notes: &[String]) -> Result<String> {
    let (mut out, about) = if nft {
        let script = crate::nftables::script(&crate::nftables::generate(cfg)?);
        let about = format!(
            "# above: the nftables script (nft -f), applied natively as one netlink batch; IPv6 {}",
            if cfg.enable_ipv6 {
                "enabled, ::6/128 is added to lo"
            } else {
                "not enabled"
            }
        );
        (script, about)
    } else {
        let d = render(cfg)?;
        match &d.v6 {
            Some(v6) => (d.v4 + v6, "# above: the IPv4 document (iptables-restore --noflush), then the IPv6 document (ip6tables-restore --noflush); ::6/128 is added to lo".into()),
            None => (d.v4, "# above: the IPv4 document (iptables-restore --noflush); IPv6 is not enabled".into()),
        }
    };
    let routes = cfg
        .tproxy_route()
        .map(|t| route_notes(&t))
        .unwrap_or_default();
    for n in [about].iter().chain(&routes).chain(notes) {
        out.push_str(n);
        out.push('\n');
    }
    Ok(out)
}

fn explain_pod(
    pod_path: &str,
    conf_path: Option<&str>,
    env: &dyn Fn(&str) -> Option<String>,
    nft: bool,
) -> Result<String> {
    let netconf: NetConf = match conf_path {
        Some(p) => conf::parse(&read(p)?).with_context(|| format!("network configuration {p}"))?,
        None => conf::parse(DEFAULT_CONF)?,
    };
    let pod = json::parse_object(&read(pod_path)?, pod_path)?;
    let info = PodInfo::from_pod(&pod).with_context(|| pod_path.to_string())?;
    let args = K8sArgs {
        pod_name: info.name.clone(),
        pod_namespace: info.namespace.clone(),
        ..K8sArgs::default()
    };
    if let Some(s) = shortcut(&netconf, &args) {
        let why = match s {
            Shortcut::OwnAgent => "the istio-cni agent's own pod".to_string(),
            Shortcut::NotKubernetes => {
                "not a Kubernetes pod (metadata.name or metadata.namespace is empty)".to_string()
            }
            Shortcut::ExcludedNamespace => {
                format!("namespace {} is in exclude_namespaces", info.namespace)
            }
        };
        return Ok(format!("# no redirection: {why}\n"));
    }
    plan::refuse_ambient(&netconf, &args)?;
    let r = match decide_pod(&info)? {
        PodPlan::Skip(why) => return Ok(format!("# no redirection: {why}\n")),
        PodPlan::Redirect(r) => r,
    };
    let mut notes = Vec::new();
    let addrs = if info.pod_ips.is_empty() {
        notes.push(
            "# the pod has no status.podIPs: assuming IPv4 only (ADD decides from the pod's netns addresses)"
                .to_string(),
        );
        Addresses::Ipv4Only
    } else {
        // The pod's IPs all sit on its one interface: decided as ADD decides inside the namespace.
        Addresses::PodIps(&info.pod_ips)
    };
    let cfg = plan::capture(&r, addrs, &NodeEnv::take(env))?;
    output(&cfg, nft || netconf.native_nftables, &notes)
}

fn route_notes(t: &TproxyRoute) -> Vec<String> {
    let mut v = vec![format!(
        "# tproxy routing (IPv4): ip -4 rule add fwmark {m} lookup {t}; ip -4 route add local 0.0.0.0/0 dev lo table {t}",
        m = t.mark,
        t = t.table
    )];
    if t.ipv6 {
        v.push(format!(
            "# tproxy routing (IPv6): ip -6 rule add fwmark {m} lookup {t}; ip -6 route add local ::/0 dev lo table {t}",
            m = t.mark,
            t = t.table
        ));
    }
    v
}

#[cfg(test)]
#[path = "explain_tests.rs"]
mod tests;
