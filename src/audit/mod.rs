//! The continuous audit: every running sidecar pod of the node (the plugin's whole decision says it must
//! be redirected, its namespace excluded or not, as ADD decides; it has a pod IP, it is not host-network)
//! verified one at a time, spread over `AUDIT_INTERVAL`, exactly
//! as CHECK verifies (our rules present and complete, nothing before them that moves traffic past them),
//! in the namespace repair in place finds (pod IP + the pod's cgroup, ambiguity refused). Pure: which pods
//! are due ([`admit`], [`pace`]), the verdict and its transitions ([`verdict`]). Effects: the pods the
//! node's one pod watch feeds ([`AuditSink`]), the round driver with its Events and actions ([`round`]),
//! the metrics ([`metrics`]) and the operators' one-shot ([`once`]).

pub mod metrics;
pub mod once;
pub mod pace;
pub mod round;
pub mod verdict;

use crate::cni::NetConf;
use crate::json::Object;
use crate::kube::podwatch::PodSink;
use crate::kube::PodView;
use crate::pod_rules::Decided;
use crate::redirect::plan::PodPlan;
use crate::repair::detect::{Detector, PodFacts};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// `AUDIT_INTERVAL`'s default.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(60);

/// A pod the audit verifies: the facts its actions and Events need, and the plugin's decision on it, made
/// once when the watch delivered it (never a pod object: the store holds every pod of the node).
#[derive(Debug, Clone)]
pub struct Pod {
    pub facts: PodFacts,
    /// What it is verified and repaired with, or why it cannot be decided (then it is unverifiable).
    pub plan: Decided,
    /// What the audit last found (kept across the watch's updates of the same pod).
    pub seen: Option<verdict::Seen>,
}

/// The pods to verify, by `namespace/name`, and whether the watch's first list is complete.
#[derive(Debug, Default)]
pub struct Store {
    pub pods: BTreeMap<String, Pod>,
    pub listed: bool,
}

/// The store the watch thread fills and the round driver reads.
pub type Shared = Arc<Mutex<Store>>;

/// The store, whatever a thread that panicked while holding it left (it holds only whole entries).
pub fn lock(s: &Shared) -> std::sync::MutexGuard<'_, Store> {
    s.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether `pod` is one to verify (pure): running (a pod IP, not terminal, not being deleted: the
/// [`PodView`]'s rules), not host-network, and one the plugin's whole decision with `conf` redirects
/// ([`crate::pod_rules::decide`]: a pod in `exclude_namespaces` or the agent's own is skipped, as ADD
/// skips it: never counted, never repaired); a decision that fails (a bad annotation) keeps it, and its
/// verification says why it cannot be verified. The decision is kept with it.
pub fn admit(det: &Detector, conf: &NetConf, pod: &Object) -> Option<Pod> {
    let v = PodView::of(pod);
    if v.host_network || v.terminal || v.deleting || v.pod_ip.is_empty() {
        return None;
    }
    let plan = crate::pod_rules::decide(pod, Some(conf));
    if let Ok(PodPlan::Skip(_)) = plan {
        return None;
    }
    let mut facts = det.facts(pod);
    facts.init = Vec::new();
    Some(Pod {
        facts,
        plan,
        seen: None,
    })
}

/// The audit's side of the node's pod watch.
pub struct AuditSink {
    pub det: Detector,
    /// The plugin configuration whose decision admits a pod (its `exclude_namespaces`).
    pub conf: NetConf,
    pub store: Shared,
}

impl PodSink for AuditSink {
    fn pod(&mut self, pod: &Object) {
        let key = PodView::of(pod).key();
        let admitted = admit(&self.det, &self.conf, pod);
        let mut s = lock(&self.store);
        match admitted {
            Some(mut p) => {
                let old = s.pods.get_mut(&key).filter(|o| o.facts.uid == p.facts.uid);
                p.seen = old.and_then(|o| o.seen.take());
                s.pods.insert(key, p);
            }
            None => {
                s.pods.remove(&key);
            }
        }
    }
    fn gone(&mut self, key: &str, uid: &str) {
        let mut s = lock(&self.store);
        if s.pods
            .get(key)
            .is_some_and(|p| uid.is_empty() || p.facts.uid == uid)
        {
            s.pods.remove(key);
        }
    }
    fn list_done(&mut self) {
        lock(&self.store).listed = true;
    }
}

#[cfg(test)]
#[path = "mod_tests.rs"]
mod tests;
