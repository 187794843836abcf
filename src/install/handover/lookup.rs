//! The lookups behind the SIGTERM decision ([`crate::install::handover`]): our own pod (for its DaemonSet owner and
//! node), the DaemonSet, and the node when the answer depends on it, over the in-cluster client. Every
//! request is bounded ([`ATTEMPT`]), failures without an answer are retried with backoff, a 403 at most
//! [`FORBIDDEN_ATTEMPTS`] times, and the whole lookup ends within [`BUDGET`] (a helper thread, so a stuck
//! transport cannot hold the shutdown): well inside the default 30 s grace period.

use super::super::handover::{self, Decision, Facts, Lookup};
use super::super::settings::options::Settings;
use crate::json::{self, Object, Value};
use crate::kube::{Backoff, Client, Config, Timeouts};
use crate::rundir::lease::Lease;
use std::time::{Duration, Instant};

/// The lookups' deadline; the decision is made within [`BUDGET`] + `GRACE` of the signal.
pub const BUDGET: Duration = Duration::from_secs(4);
/// Time allowed past the budget for a transport that overshoots its own timeout.
const GRACE: Duration = Duration::from_secs(1);
/// One request's limit (connect, TLS, answer).
pub const ATTEMPT: Duration = Duration::from_millis(1500);
/// A 403 is asked again this many times in all (an RBAC cache catching up), not until the deadline.
pub const FORBIDDEN_ATTEMPTS: u32 = 3;
/// Shortest attempt worth making.
const MIN_ATTEMPT: Duration = Duration::from_millis(50);
/// Upstream's DaemonSet name, the fallback when our own pod cannot be read.
pub const DEFAULT_DAEMONSET: &str = "istio-cni-node";

/// Looks up what the decision needs and decides (logging nothing: the caller logs the decision): first
/// whether another agent runs on this node (`lease`, [`Lease::at_stop`]: no API call then), then the API.
pub fn decide_at_stop(s: &Settings, lease: Option<&mut Lease>) -> Decision {
    let facts = match lease.and_then(Lease::at_stop) {
        Some(p) => Facts::Peer {
            newer: p.newer,
            who: p.who,
        },
        None => facts(s),
    };
    handover::decide(&facts, s.istio_owned)
}

/// What the API says, within [`BUDGET`] + `GRACE`.
pub fn facts(s: &Settings) -> Facts {
    let h = &s.handover;
    if let Some(setting) = &h.disabled_by {
        return Facts::Disabled(setting.clone());
    }
    if s.pod_namespace.is_empty() {
        return Facts::NotADaemonSetPod(
            "POD_NAMESPACE is not set, so there is no DaemonSet to look for".into(),
        );
    }
    let cfg = Config::in_cluster_from(
        Some(s.k8s_host.clone()),
        Some(s.k8s_port.clone()),
        &s.service_account_dir,
    );
    let timeouts = Timeouts {
        connect: Duration::from_secs(1),
        total: ATTEMPT,
        ..Timeouts::default()
    };
    let client = match cfg.and_then(|c| Client::with_timeouts(c, timeouts)) {
        Ok(c) => c,
        Err(e) => {
            return Facts::NotADaemonSetPod(format!(
                "no in-cluster API access to look for our DaemonSet: {e}"
            ))
        }
    };
    let ask = Ask {
        ns: s.pod_namespace.clone(),
        pod: h.pod_name.clone(),
        node: s.node_name.clone(),
    };
    let deadline = Instant::now() + BUDGET;
    let (tx, rx) = std::sync::mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name("handover".into())
        .spawn(move || {
            let _ = tx.send(gather(&client, &ask, deadline));
        });
    if let Err(e) = spawned {
        return Facts::NotADaemonSetPod(format!("cannot start the lookup thread: {e}"));
    }
    rx.recv_timeout(BUDGET + GRACE)
        .unwrap_or_else(|_| Facts::Looked {
            namespace: s.pod_namespace.clone(),
            name: DEFAULT_DAEMONSET.into(),
            named_by: "upstream's default name".into(),
            ds: Lookup::Failed(format!(
                "no answer within {:.0} s",
                (BUDGET + GRACE).as_secs_f64()
            )),
            node_name: s.node_name.clone(),
            node: None,
        })
}

/// What to ask about.
struct Ask {
    ns: String,
    /// POD_NAME ("" when not set).
    pod: String,
    /// The node from the environment ("" when not set); our pod's `spec.nodeName` wins.
    node: String,
}

/// GETs until a definite answer, the deadline, or (403) [`FORBIDDEN_ATTEMPTS`].
fn get_until(
    deadline: Instant,
    what: &str,
    get: impl Fn(Duration) -> crate::Result<Object>,
) -> Lookup {
    let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(1));
    let mut forbidden = 0;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let l = Lookup::from_result(get(ATTEMPT.min(left).max(MIN_ATTEMPT)));
        if !l.retriable() {
            return l;
        }
        if matches!(l, Lookup::Forbidden(_)) {
            forbidden += 1;
            if forbidden >= FORBIDDEN_ATTEMPTS {
                return l;
            }
        }
        let delay = backoff.next_delay();
        if Instant::now() + delay + MIN_ATTEMPT >= deadline {
            return l;
        }
        log::debug!("{what}: no answer yet, asking again in {delay:?}: {l:?}");
        std::thread::sleep(delay);
    }
}

/// The controlling DaemonSet in a pod's `ownerReferences`.
pub fn daemonset_owner(pod: &Object) -> Option<String> {
    let refs = json::obj_of(pod, "metadata").and_then(|m| json::arr_of(m, "ownerReferences"))?;
    let owners: Vec<&Object> = refs
        .iter()
        .filter_map(|r| match r {
            Value::Object(o) => Some(o),
            _ => None,
        })
        .filter(|o| {
            json::str_of(o, "kind") == Some("DaemonSet")
                && json::str_of(o, "apiVersion").is_some_and(|v| v.starts_with("apps/"))
        })
        .collect();
    let controller = owners
        .iter()
        .find(|o| matches!(o.get("controller"), Some(Value::Bool(true))));
    controller
        .or(owners.first())
        .and_then(|o| json::str_of(o, "name"))
        .filter(|n| !n.is_empty())
        .map(str::to_string)
}

/// The DaemonSet's name as our pod gives it.
struct Named {
    name: String,
    /// How the name was found.
    named_by: String,
    /// The node our pod runs on, when it says.
    node: Option<String>,
    /// Reading our pod was forbidden (with the DaemonSet's 403 too: the RBAC is gone).
    forbidden: Option<String>,
}

/// Our DaemonSet's name from our pod's owner, or upstream's default name when the pod cannot be read
/// (within half of what is left before `deadline`); `Err`: the facts are already known.
fn our_daemonset(c: &Client, ask: &Ask, deadline: Instant) -> Result<Named, Box<Facts>> {
    let default = |named_by: String, forbidden| Named {
        name: DEFAULT_DAEMONSET.to_string(),
        named_by: format!("upstream's default name; {named_by}"),
        node: None,
        forbidden,
    };
    if ask.pod.is_empty() {
        return Ok(default("POD_NAME is not set".into(), None));
    }
    let pod_deadline = Instant::now() + deadline.saturating_duration_since(Instant::now()) / 2;
    let what = format!("get pod {}/{}", ask.ns, ask.pod);
    match get_until(pod_deadline, &what, |t| {
        c.get_pod_within(&ask.ns, &ask.pod, t)
    }) {
        Lookup::Found(pod) => match daemonset_owner(&pod) {
            Some(name) => Ok(Named {
                name,
                named_by: format!("the owner of our pod {}", ask.pod),
                node: json::obj_of(&pod, "spec")
                    .and_then(|s| json::str_of(s, "nodeName"))
                    .filter(|n| !n.is_empty())
                    .map(str::to_string),
                forbidden: None,
            }),
            None => Err(Box::new(Facts::NotADaemonSetPod(format!(
                "our pod {}/{} is not owned by a DaemonSet, so nothing will replace it",
                ask.ns, ask.pod
            )))),
        },
        Lookup::Unauthorized(e) => Err(Box::new(Facts::Looked {
            namespace: ask.ns.clone(),
            name: DEFAULT_DAEMONSET.into(),
            named_by: format!("upstream's default name; {what} was refused"),
            ds: Lookup::Unauthorized(e),
            node_name: ask.node.clone(),
            node: None,
        })),
        other => {
            let forbidden = match &other {
                Lookup::Forbidden(e) => Some(e.clone()),
                _ => None,
            };
            let why = format!("our pod could not be read: {}", brief(&other));
            Ok(default(why, forbidden))
        }
    }
}

/// Our DaemonSet ([`our_daemonset`]), then the node when the decision needs it.
fn gather(c: &Client, ask: &Ask, deadline: Instant) -> Facts {
    let Named {
        name,
        named_by,
        node,
        forbidden,
    } = match our_daemonset(c, ask, deadline) {
        Ok(n) => n,
        Err(facts) => return *facts,
    };
    let mut node_name = node.unwrap_or_else(|| ask.node.clone());
    let what = format!("get daemonset {}/{name}", ask.ns);
    let ds = get_until(deadline, &what, |t| {
        c.get_daemonset_within(&ask.ns, &name, t)
    });
    if let (Some(pod), Lookup::Forbidden(daemonset)) = (&forbidden, &ds) {
        return Facts::RbacGone {
            pod: pod.clone(),
            daemonset: daemonset.clone(),
        };
    }
    let node = match &ds {
        Lookup::Found(o) if needs_node(o) && !node_name.is_empty() => {
            let what = format!("get node {node_name}");
            Some(get_until(deadline, &what, |t| {
                c.get_node_within(&node_name, t)
            }))
        }
        _ => None,
    };
    if node_name.is_empty() {
        node_name = "(unknown: neither our pod nor NODE_NAME names it)".into();
    }
    Facts::Looked {
        namespace: ask.ns.clone(),
        name,
        named_by,
        ds,
        node_name,
        node,
    }
}

/// Does the decision for this DaemonSet need the node (present, not being deleted, a template that asks
/// something of the node)?
fn needs_node(ds: &Object) -> bool {
    let meta = json::obj_of(ds, "metadata");
    if meta.is_some_and(|m| m.contains_key("deletionTimestamp")) {
        return false;
    }
    let empty = Object::new();
    let template = json::obj_of(ds, "spec")
        .and_then(|s| json::obj_of(s, "template"))
        .unwrap_or(&empty);
    crate::kube::scheduling::daemon_pod_fits(template, None)
        == crate::kube::scheduling::Fit::NeedsNode
}

fn brief(l: &Lookup) -> String {
    match l {
        Lookup::Found(_) => "found".into(),
        Lookup::NotFound => "not found".into(),
        Lookup::Unauthorized(e) | Lookup::Forbidden(e) | Lookup::Failed(e) => e.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_controlling_daemonset_owner() {
        let pod = |refs: &str| {
            json::parse_object(
                &format!(r#"{{"metadata":{{"ownerReferences":{refs}}}}}"#),
                "t",
            )
            .unwrap()
        };
        assert_eq!(
            daemonset_owner(&pod(
                r#"[{"apiVersion":"apps/v1","kind":"DaemonSet","name":"istio-cni-node","controller":true}]"#
            ))
            .as_deref(),
            Some("istio-cni-node")
        );
        assert_eq!(
            daemonset_owner(&pod(
                r#"[{"apiVersion":"apps/v1","kind":"DaemonSet","name":"other"},
                    {"apiVersion":"apps/v1","kind":"DaemonSet","name":"mine","controller":true}]"#
            ))
            .as_deref(),
            Some("mine")
        );
        assert_eq!(
            daemonset_owner(&pod(r#"[{"apiVersion":"v1","kind":"Node","name":"n1"}]"#)),
            None
        );
        assert_eq!(
            daemonset_owner(&pod(
                r#"[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"rs","controller":true}]"#
            )),
            None
        );
        assert_eq!(daemonset_owner(&Object::new()), None);
    }
}
