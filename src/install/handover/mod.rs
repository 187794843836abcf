//! At SIGTERM: is this agent being replaced (a rolling update of its DaemonSet, a restart) or uninstalled?
//! Pure: what the API said about our DaemonSet and node ([`Facts`]) in, [`Decision`] out, with the rule
//! that decided. The lookups are [`lookup`]; `cli` acts on the verdict.
//!
//! Upstream's ambient mode (1.30.3, `cni/pkg/nodeagent/server.go` `ShouldStopCleanup`) skips its cleanup
//! while its DaemonSet exists, is not being deleted and still matches the node; we apply that rule to
//! sidecar mode, where upstream always cleans up. Keeping the entry, binary and kubeconfig means a pod
//! created before the next agent is ready is still redirected by the plugin (it needs no agent), or fails
//! closed once the old pod's token is rejected; removing them would let it start unredirected.
//!
//! The rows are asked in order: the run dir's lease first (no API call, and before the `disabled` setting:
//! an agent stopping while another one runs never removes what that one maintains), the API last.
//!
//! | facts | verdict | rule |
//! |---|---|---|
//! | a newer agent runs on this node (a `maxSurge` roll: it owns the installation now) | **keep** | `superseded` |
//! | another agent still runs here (an older one takes the node back, or one stopping at the same time decides) | **keep** | `handed-over` |
//! | safe upgrade turned off | cleanup | `disabled` |
//! | no DaemonSet to look for (no namespace, no credentials, our pod has no DaemonSet owner) | cleanup | `not-a-daemonset-pod` |
//! | DaemonSet not found | cleanup | `daemonset-gone` |
//! | DaemonSet has a `deletionTimestamp` | cleanup | `daemonset-deleting` |
//! | its template no longer runs on this node (selector, affinity, taints) | cleanup | `not-scheduled-here` |
//! | the node is not found | cleanup | `node-gone` |
//! | 401 (our token is no longer accepted) | cleanup | `unauthorized` |
//! | 403 on our own pod and on the DaemonSet (the RBAC is gone: an uninstall deleting it first) | cleanup | `rbac-gone` |
//! | DaemonSet present, not deleting, runs here | **keep** | `replacement` |
//! | no answer (403, timeouts, unreachable, 5xx) | cleanup; keep with `ISTIO_OWNED_CNI_CONFIG` | `no-answer` |

pub mod lookup;
pub mod supersede;

use crate::json::{self, Object};
use crate::kube::scheduling::{self, Fit};
use crate::kube::ApiErrorExt;
use std::fmt;

/// What one GET gave.
#[derive(Debug, Clone)]
pub enum Lookup {
    Found(Object),
    NotFound,
    /// 401: the API no longer accepts our token (our pod object, or our service account, is gone).
    Unauthorized(String),
    /// 403: no permission; no answer, and the message says which grant is missing.
    Forbidden(String),
    /// Anything else: timeouts, refused connections, 5xx, a body we could not read.
    Failed(String),
}

impl Lookup {
    /// Classifies a GET's result.
    pub fn from_result(r: crate::Result<Object>) -> Lookup {
        match r {
            Ok(o) => Lookup::Found(o),
            Err(e) => match e.api_status() {
                Some(404) => Lookup::NotFound,
                Some(401) => Lookup::Unauthorized(e.to_string()),
                Some(403) => Lookup::Forbidden(e.to_string()),
                _ => Lookup::Failed(e.to_string()),
            },
        }
    }

    /// Worth asking again within the budget (a definite answer is not).
    pub fn retriable(&self) -> bool {
        matches!(self, Lookup::Forbidden(_) | Lookup::Failed(_))
    }
}

/// What the lookups established.
#[derive(Debug, Clone)]
pub enum Facts {
    /// Another live agent on this node (the run dir's lease, [`crate::rundir::lease`]): only the last agent
    /// out decides by the other rows, so a stopping agent never removes what a running one maintains.
    /// `newer`: it started after us and owns the installation.
    Peer { newer: bool, who: String },
    /// The operator turned safe upgrade off (the setting as written, e.g. `DISABLE_SAFE_UPGRADE=true`).
    Disabled(String),
    /// There is no DaemonSet to look for; says why.
    NotADaemonSetPod(String),
    /// 403 reading our own pod and then the DaemonSet: the service account may no longer read pods, which
    /// the plugin needs for every sidecar pod (an uninstall that deleted the RBAC before our pod stopped).
    /// Keeping our files would fail every such pod on the node; nothing runs here to remove them later.
    RbacGone { pod: String, daemonset: String },
    /// The DaemonSet `namespace/name` (`named_by`: how the name was found) and, when needed, the node.
    Looked {
        namespace: String,
        name: String,
        named_by: String,
        ds: Lookup,
        node_name: String,
        /// `None`: not looked up (not needed, or no time left).
        node: Option<Lookup>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Leave the entry, the binary and the kubeconfig for the next agent.
    Keep,
    /// Remove them, as an uninstall does.
    Cleanup,
}

/// The rule of the table that decided (module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    Superseded,
    HandedOver,
    Disabled,
    NotADaemonSetPod,
    DaemonSetGone,
    DaemonSetDeleting,
    NotScheduledHere,
    NodeGone,
    Unauthorized,
    RbacGone,
    Replacement,
    NoAnswer,
}

impl Rule {
    pub fn name(self) -> &'static str {
        match self {
            Rule::Superseded => "superseded",
            Rule::HandedOver => "handed-over",
            Rule::Disabled => "disabled",
            Rule::NotADaemonSetPod => "not-a-daemonset-pod",
            Rule::DaemonSetGone => "daemonset-gone",
            Rule::DaemonSetDeleting => "daemonset-deleting",
            Rule::NotScheduledHere => "not-scheduled-here",
            Rule::NodeGone => "node-gone",
            Rule::Unauthorized => "unauthorized",
            Rule::RbacGone => "rbac-gone",
            Rule::Replacement => "replacement",
            Rule::NoAnswer => "no-answer",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub verdict: Verdict,
    pub rule: Rule,
    /// Why, for the log line.
    pub reason: String,
}

impl Decision {
    fn new(verdict: Verdict, rule: Rule, reason: impl Into<String>) -> Decision {
        Decision {
            verdict,
            rule,
            reason: reason.into(),
        }
    }
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.verdict {
            Verdict::Keep => write!(
                f,
                "leaving the istio-cni entry, the plugin binary and the kubeconfig in place for the next agent"
            )?,
            Verdict::Cleanup => write!(
                f,
                "removing the istio-cni entry, the plugin binary and the kubeconfig"
            )?,
        }
        write!(f, ": {} (rule {})", self.reason, self.rule.name())
    }
}

/// The table's last row: no answer. Cleanup (upstream's default), or keep with `ISTIO_OWNED_CNI_CONFIG`
/// (upstream's default in owned mode).
fn no_answer(why: String, istio_owned: bool) -> Decision {
    if istio_owned {
        Decision::new(
            Verdict::Keep,
            Rule::NoAnswer,
            format!("{why}; ISTIO_OWNED_CNI_CONFIG is set, so the default is to keep, as upstream"),
        )
    } else {
        Decision::new(
            Verdict::Cleanup,
            Rule::NoAnswer,
            format!("{why}; cleaning up, as upstream does without an answer"),
        )
    }
}

/// The hint a 403 gets: which grant gives safe upgrades.
fn forbidden(what: &str, grant: &str, e: &str) -> String {
    format!("{what}: {e} (grant `{grant}` to the agent's service account for safe upgrades; see the Upgrade section of manifests/README.md)")
}

fn unauthorized(e: &str) -> Decision {
    Decision::new(
        Verdict::Cleanup,
        Rule::Unauthorized,
        format!("the API server no longer accepts our token ({e}): our pod or our service account is gone"),
    )
}

/// Decides from `facts`; `istio_owned` is `ISTIO_OWNED_CNI_CONFIG` (the default when there is no answer).
/// The rows before the API's answer are here; the DaemonSet's are `daemonset_rows`, the node's
/// `node_rows`.
pub fn decide(facts: &Facts, istio_owned: bool) -> Decision {
    match facts {
        Facts::Peer { newer: true, who } => Decision::new(
            Verdict::Keep,
            Rule::Superseded,
            format!("a newer agent ({who}) runs on this node and owns its installation"),
        ),
        Facts::Peer { newer: false, who } => Decision::new(
            Verdict::Keep,
            Rule::HandedOver,
            format!("another agent ({who}) still runs on this node and keeps its installation"),
        ),
        Facts::Disabled(setting) => Decision::new(
            Verdict::Cleanup,
            Rule::Disabled,
            format!("safe upgrade is turned off ({setting})"),
        ),
        Facts::NotADaemonSetPod(why) => {
            Decision::new(Verdict::Cleanup, Rule::NotADaemonSetPod, why.clone())
        }
        Facts::RbacGone { pod, daemonset } => Decision::new(
            Verdict::Cleanup,
            Rule::RbacGone,
            format!(
                "our service account may read neither our pod ({pod}) nor our DaemonSet ({daemonset}): \
                 its RBAC is gone, an uninstall; the plugin could read no pod either, so keeping our \
                 files would fail every pod on this node"
            ),
        ),
        Facts::Looked {
            namespace,
            name,
            named_by,
            ds,
            node_name,
            node,
        } => {
            let daemonset = format!("{namespace}/{name} ({named_by})");
            match daemonset_rows(namespace, &daemonset, ds, istio_owned) {
                Ok(ds) => node_rows(&daemonset, ds, node_name, node.as_ref(), istio_owned),
                Err(d) => d,
            }
        }
    }
}

/// The DaemonSet's rows: gone, being deleted, unreadable (no answer) decide (`Err`); a
/// DaemonSet present and not deleting is handed back for the node's rows.
fn daemonset_rows<'a>(
    ns: &str,
    daemonset: &str,
    ds: &'a Lookup,
    istio_owned: bool,
) -> Result<&'a Object, Decision> {
    let ds = match ds {
        Lookup::Found(o) => o,
        Lookup::NotFound => {
            return Err(Decision::new(
                Verdict::Cleanup,
                Rule::DaemonSetGone,
                format!("DaemonSet {daemonset} not found: an uninstall"),
            ))
        }
        Lookup::Unauthorized(e) => return Err(unauthorized(e)),
        Lookup::Forbidden(e) => {
            let grant = format!("get daemonsets.apps in namespace {ns}");
            let why = forbidden(&format!("DaemonSet {daemonset}"), &grant, e);
            return Err(no_answer(why, istio_owned));
        }
        Lookup::Failed(e) => {
            let why = format!("DaemonSet {daemonset}: no answer: {e}");
            return Err(no_answer(why, istio_owned));
        }
    };
    let meta = json::obj_of(ds, "metadata");
    match meta.and_then(|m| json::str_of(m, "deletionTimestamp")) {
        Some(t) => Err(Decision::new(
            Verdict::Cleanup,
            Rule::DaemonSetDeleting,
            format!("DaemonSet {daemonset} is being deleted (since {t}): an uninstall"),
        )),
        None => Ok(ds),
    }
}

/// The node's rows, for a DaemonSet present and not deleting: gone, unauthorized, and whether its
/// template still runs there (no answer when that depends on a node we could not read).
fn node_rows(
    daemonset: &str,
    ds: &Object,
    node_name: &str,
    node: Option<&Lookup>,
    istio_owned: bool,
) -> Decision {
    let empty = Object::new();
    let template = json::obj_of(ds, "spec")
        .and_then(|s| json::obj_of(s, "template"))
        .unwrap_or(&empty);
    let fits = |n| scheduling::daemon_pod_fits(template, n);
    // The fit, and why it is not known when it needs the node.
    let (fit, unknown) = match node {
        Some(Lookup::Found(n)) => (fits(Some(n)), format!("node {node_name} is unknown")),
        Some(Lookup::NotFound) => {
            return Decision::new(
                Verdict::Cleanup,
                Rule::NodeGone,
                format!("node {node_name} not found: the node is being removed"),
            )
        }
        Some(Lookup::Unauthorized(e)) => return unauthorized(e),
        Some(Lookup::Forbidden(e)) => (
            fits(None),
            format!(
                "whether it still runs on this node depends on the node: {}",
                forbidden(&format!("node {node_name}"), "get nodes", e)
            ),
        ),
        Some(Lookup::Failed(e)) => (fits(None), format!("node {node_name}: no answer: {e}")),
        None => (
            fits(None),
            format!("node {node_name} was not looked up in time"),
        ),
    };
    match fit {
        Fit::Runs => Decision::new(
            Verdict::Keep,
            Rule::Replacement,
            format!("DaemonSet {daemonset} is present, not being deleted, and still runs on node {node_name}: a restart or an upgrade, its next pod takes over"),
        ),
        Fit::DoesNotRun(why) => Decision::new(
            Verdict::Cleanup,
            Rule::NotScheduledHere,
            format!("DaemonSet {daemonset} no longer runs on node {node_name}: {why}"),
        ),
        Fit::NeedsNode => no_answer(
            format!("DaemonSet {daemonset} is present, but {unknown}"),
            istio_owned,
        ),
    }
}

#[cfg(test)]
mod tests;
