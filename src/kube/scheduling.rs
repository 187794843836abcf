//! Would the DaemonSet controller run a pod of this template on this node? Pure: the controller's own
//! predicates (`pkg/controller/daemon` `predicates`, `component-helpers/scheduling/corev1/nodeaffinity`,
//! `v1helper.FindMatchingUntoleratedTaint`) over the template's pod spec and the node object.
//!
//! - `spec.nodeName`, when the template sets one, must be this node.
//! - `spec.nodeSelector`: every label equal.
//! - `affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms`: ORed; within a
//!   term, `matchExpressions` (on labels) and `matchFields` (only `metadata.name`) ANDed, with `In`, `NotIn`,
//!   `Exists`, `DoesNotExist`, `Gt`, `Lt`. A term with no requirement, or one the API would reject (unknown
//!   operator, a field other than `metadata.name`, `Gt` without one integer), matches nothing, as there.
//! - Taints with effect `NoSchedule` or `NoExecute` must be tolerated by the template's tolerations plus the
//!   ones the controller adds to every daemon pod (`not-ready`, `unreachable`, the pressure conditions,
//!   `unschedulable`, and `network-unavailable` with `hostNetwork`).
//!
//! Without the node object the answer is known only when the template asks nothing of the node (no name,
//! selector or required affinity, and a toleration of every taint): [`Fit::NeedsNode`] otherwise.

use crate::json::{self, Object, Value};

/// The verdict for one template and node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fit {
    /// The controller runs a pod of this template there.
    Runs,
    /// It does not; says which predicate failed.
    DoesNotRun(String),
    /// The answer depends on the node, which was not given.
    NeedsNode,
}

/// The tolerations the DaemonSet controller adds to every daemon pod (`AddOrUpdateDaemonPodTolerations`):
/// key and effect, operator `Exists`.
const DAEMON_TOLERATIONS: [(&str, &str); 6] = [
    ("node.kubernetes.io/not-ready", "NoExecute"),
    ("node.kubernetes.io/unreachable", "NoExecute"),
    ("node.kubernetes.io/disk-pressure", "NoSchedule"),
    ("node.kubernetes.io/memory-pressure", "NoSchedule"),
    ("node.kubernetes.io/pid-pressure", "NoSchedule"),
    ("node.kubernetes.io/unschedulable", "NoSchedule"),
];
/// Added too when the pod uses the host network.
const HOST_NETWORK_TOLERATION: (&str, &str) =
    ("node.kubernetes.io/network-unavailable", "NoSchedule");

fn str_at<'a>(o: &'a Object, path: &[&str]) -> Option<&'a str> {
    let (last, parents) = path.split_last()?;
    json::str_of(obj_at(o, parents)?, last)
}

fn obj_at<'a>(o: &'a Object, path: &[&str]) -> Option<&'a Object> {
    path.iter().try_fold(o, |cur, p| json::obj_of(cur, p))
}

fn objects<'a>(o: &'a Object, key: &str) -> impl Iterator<Item = &'a Object> {
    json::arr_of(o, key)
        .into_iter()
        .flat_map(|a| a.iter())
        .filter_map(|v| match v {
            Value::Object(o) => Some(o),
            _ => None,
        })
}

fn strings<'a>(o: &'a Object, key: &str) -> Vec<&'a str> {
    json::arr_of(o, key)
        .into_iter()
        .flat_map(|a| a.iter())
        .filter_map(|v| match v {
            Value::String(s) => Some(s.as_str()),
            _ => None,
        })
        .collect()
}

/// A label (or field) lookup.
type Lookup<'a> = &'a dyn Fn(&str) -> Option<&'a str>;

/// One `NodeSelectorRequirement`; `None` when the API would reject it (the term then matches nothing).
fn requirement(r: &Object, get: Lookup<'_>) -> Option<bool> {
    let key = json::str_of(r, "key").filter(|k| !k.is_empty())?;
    let values = strings(r, "values");
    let have = get(key);
    let int = |s: &str| s.trim().parse::<i64>().ok();
    Some(match json::str_of(r, "operator")? {
        "In" => have.is_some_and(|v| values.contains(&v)),
        "NotIn" => !have.is_some_and(|v| values.contains(&v)),
        "Exists" => have.is_some(),
        "DoesNotExist" => have.is_none(),
        op @ ("Gt" | "Lt") => {
            let [bound] = values.as_slice() else {
                return None;
            };
            let bound = int(bound)?;
            match have.and_then(int) {
                Some(v) if op == "Gt" => v > bound,
                Some(v) => v < bound,
                None => false,
            }
        }
        _ => return None,
    })
}

/// One `NodeSelectorTerm`: every requirement holds (and there is at least one).
fn term_matches(term: &Object, labels: Lookup<'_>, node_name: &str) -> bool {
    let exprs: Vec<&Object> = objects(term, "matchExpressions").collect();
    let fields: Vec<&Object> = objects(term, "matchFields").collect();
    if exprs.is_empty() && fields.is_empty() {
        return false;
    }
    let field = |k: &str| (k == "metadata.name").then_some(node_name);
    let field_ok = |r: &Object| {
        json::str_of(r, "key") == Some("metadata.name") && requirement(r, &field) == Some(true)
    };
    exprs.iter().all(|r| requirement(r, labels) == Some(true)) && fields.iter().all(|r| field_ok(r))
}

/// `Toleration.ToleratesTaint`.
fn tolerates(t: &Object, key: &str, value: &str, effect: &str) -> bool {
    let t_effect = json::str_of(t, "effect").unwrap_or("");
    let t_key = json::str_of(t, "key").unwrap_or("");
    if !t_effect.is_empty() && t_effect != effect {
        return false;
    }
    if !t_key.is_empty() && t_key != key {
        return false;
    }
    match json::str_of(t, "operator").unwrap_or("") {
        "" | "Equal" => json::str_of(t, "value").unwrap_or("") == value,
        "Exists" => true,
        _ => false,
    }
}

/// Is a taint `key=value:effect` tolerated by the template (with the controller's additions)?
fn taint_tolerated(spec: &Object, key: &str, value: &str, effect: &str) -> bool {
    let host_network = matches!(spec.get("hostNetwork"), Some(Value::Bool(true)));
    let added = DAEMON_TOLERATIONS
        .iter()
        .chain(host_network.then_some(&HOST_NETWORK_TOLERATION))
        .any(|(k, e)| *k == key && *e == effect);
    added || objects(spec, "tolerations").any(|t| tolerates(t, key, value, effect))
}

/// The required node affinity's terms, if the template has one (`Some(vec![])`: required, but no term).
fn required_terms(spec: &Object) -> Option<Vec<&Object>> {
    let req = obj_at(
        spec,
        &[
            "affinity",
            "nodeAffinity",
            "requiredDuringSchedulingIgnoredDuringExecution",
        ],
    )?;
    Some(objects(req, "nodeSelectorTerms").collect())
}

fn node_selector(spec: &Object) -> Vec<(&str, &str)> {
    json::obj_of(spec, "nodeSelector")
        .map(|m| {
            m.iter()
                .map(|(k, v)| {
                    let v = match v {
                        Value::String(s) => s.as_str(),
                        _ => "",
                    };
                    (k.as_str(), v)
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Does the template tolerate every `NoSchedule` and `NoExecute` taint whatever its key and value?
fn tolerates_everything(spec: &Object) -> bool {
    ["NoSchedule", "NoExecute"].iter().all(|effect| {
        objects(spec, "tolerations").any(|t| {
            json::str_of(t, "key").unwrap_or("").is_empty()
                && json::str_of(t, "operator") == Some("Exists")
                && json::str_of(t, "effect").map_or(true, |e| e.is_empty() || e == *effect)
        })
    })
}

/// Would the controller run a pod of `template` (a pod template: `{metadata, spec}`) on `node`?
pub fn daemon_pod_fits(template: &Object, node: Option<&Object>) -> Fit {
    let empty = Object::new();
    let spec = json::obj_of(template, "spec").unwrap_or(&empty);
    let pinned = json::str_of(spec, "nodeName").filter(|n| !n.is_empty());
    let selector = node_selector(spec);
    let terms = required_terms(spec);
    let Some(node) = node else {
        let asks_nothing = pinned.is_none() && selector.is_empty() && terms.is_none();
        return if asks_nothing && tolerates_everything(spec) {
            Fit::Runs
        } else {
            Fit::NeedsNode
        };
    };
    let name = str_at(node, &["metadata", "name"]).unwrap_or("");
    if let Some(p) = pinned.filter(|p| *p != name) {
        return Fit::DoesNotRun(format!("the template is pinned to node {p}"));
    }
    let labels = obj_at(node, &["metadata", "labels"]);
    let label = |k: &str| labels.and_then(|l| json::str_of(l, k));
    for (k, v) in &selector {
        if label(k) != Some(*v) {
            return Fit::DoesNotRun(format!(
                "its nodeSelector {k}={v} does not match the node (label {k} is {})",
                label(k).map_or("absent".to_string(), |l| format!("{l:?}"))
            ));
        }
    }
    if let Some(terms) = terms {
        if !terms.iter().any(|t| term_matches(t, &label, name)) {
            return Fit::DoesNotRun(format!(
                "none of the {} term(s) of its required node affinity matches the node",
                terms.len()
            ));
        }
    }
    for taint in objects(json::obj_of(node, "spec").unwrap_or(&empty), "taints") {
        let effect = json::str_of(taint, "effect").unwrap_or("");
        if effect != "NoSchedule" && effect != "NoExecute" {
            continue;
        }
        let key = json::str_of(taint, "key").unwrap_or("");
        let value = json::str_of(taint, "value").unwrap_or("");
        if !taint_tolerated(spec, key, value, effect) {
            return Fit::DoesNotRun(format!(
                "the node's taint {key}={value}:{effect} is not tolerated"
            ));
        }
    }
    Fit::Runs
}

#[cfg(test)]
#[path = "scheduling_tests.rs"]
mod tests;
