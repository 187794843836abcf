//! The operators' one-shot: `install-cni audit [--json]` (in the agent's container, `kubectl exec`): lists
//! this node's pods once, decides them as the agent's audit does (a pod it kept in the run dir from the pod
//! as kept, [`super::persist`], only read), verifies every running sidecar pod as a round does (no pauses), and prints one
//! line per pod, `<ns>/<name> <verdict>[ <rule or reason>]`, or with `--json` one JSON array. It only
//! reads: no Event, no action, no metric. Exit codes ([`EXIT_UNREDIRECTED`], [`EXIT_UNVERIFIABLE`]): 0 every
//! pod redirected, 1 a pod missing or bypassed (whatever the others), 3 none of those but a pod unverifiable,
//! 2 bad arguments.

use super::verdict::{self, Verdict};
use super::{lock, round, AuditSink};
use crate::cni::NetConf;
use crate::error::{Context, Result};
use crate::kube::podwatch::{self, Fanout, Selection};
use crate::kube::Client;
use crate::repair::detect::Detector;
use std::path::Path;

/// The one-shot's help, in argh's layout.
pub const HELP: &str = "Usage: install-cni audit [--json] [--host-proc=<dir>]\n\n\
Verify this node's running sidecar pods once, with the agent's settings, and print\n\
<ns>/<name> <verdict> [<rule or reason>] per pod. Only reads.\n\n\
Options:\n\
\x20 --json            one JSON array of {pod, verdict, detail}\n\
\x20 --host-proc       the host's /proc [default: /host/proc]\n\n\
Exit 0 when every pod is redirected, 1 when a pod is missing or bypassed, 3 when none is\n\
but a pod is unverifiable (its redirection could not be checked), 2 on bad arguments.\n";

/// The one-shot's exit when a pod is missing or bypassed (it wins over an unverifiable one).
pub const EXIT_UNREDIRECTED: i32 = 1;
/// The one-shot's exit when no pod is missing or bypassed but one is unverifiable.
pub const EXIT_UNVERIFIABLE: i32 = 3;

/// The one-shot's arguments.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Args {
    pub json: bool,
    pub host_proc: Option<String>,
}

/// The arguments after `audit`; `Err` names the bad argument, `Ok(None)`: help.
pub fn parse_args(args: &[String]) -> std::result::Result<Option<Args>, String> {
    let mut a = Args::default();
    for arg in args {
        match arg.as_str() {
            "--json" => a.json = true,
            "--help" => return Ok(None),
            other => match other.strip_prefix("--host-proc=") {
                Some(p) => a.host_proc = Some(p.to_string()),
                None => return Err(format!("unrecognized argument: {other}")),
            },
        }
    }
    Ok(Some(a))
}

/// Lists the node's pods and verifies each: `(key, verdict)` in key order.
pub fn audit(
    client: &Client,
    det: Detector,
    node: &str,
    host_proc: &Path,
    conf: &NetConf,
) -> Result<Vec<(String, Verdict)>> {
    // Decided as the agent's audit decides them: a pod it kept, from the pod as it kept it (only read).
    let store = super::Store::restored(super::persist::load(&conf.run_dir().audit_decisions()));
    let sel = Selection {
        label: None,
        field: format!("spec.nodeName={node}"),
        what: "audit",
    };
    let mut sink = Fanout::new(vec![Box::new(AuditSink {
        det,
        conf: conf.clone(),
        store: store.clone(),
    })]);
    let mut timing = podwatch::timing::Timing::start();
    podwatch::list_all(client, &sel, &mut sink, &mut timing).context("audit: list pods")?;
    let pods = std::mem::take(&mut lock(&store).pods);
    let scan = crate::repair::procfs::Scan::read(host_proc).ok();
    Ok(pods
        .into_iter()
        .filter_map(|(k, p)| round::verify(&p, host_proc, conf, scan.as_ref()).map(|v| (k, v)))
        .collect())
}

/// The output and the exit code for `verdicts` (see [`HELP`]).
pub fn report(verdicts: &[(String, Verdict)], json: bool) -> (String, i32) {
    let code = if verdicts.iter().any(|(_, v)| v.unredirected()) {
        EXIT_UNREDIRECTED
    } else if verdicts
        .iter()
        .any(|(_, v)| matches!(v, Verdict::Unverifiable(_)))
    {
        EXIT_UNVERIFIABLE
    } else {
        0
    };
    let text = if json {
        let items: Vec<String> = verdicts.iter().map(|(k, v)| verdict::json(k, v)).collect();
        format!("[{}]\n", items.join(","))
    } else {
        verdicts
            .iter()
            .map(|(k, v)| verdict::line(k, v) + "\n")
            .collect()
    };
    (text, code)
}
