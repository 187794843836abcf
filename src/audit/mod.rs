//! The continuous audit: every running sidecar pod of the node (the plugin's whole decision says it must
//! be redirected, its namespace excluded or not, as ADD decides; it has a pod IP, it is not host-network)
//! decided once from the pod as first seen running and kept for its UID, as ADD decides once,
//! verified one at a time, spread over `AUDIT_INTERVAL`, exactly
//! as CHECK verifies (our rules present and complete, nothing before them that moves traffic past them),
//! in the namespace repair in place finds (pod IP + the pod's cgroup, ambiguity refused). Pure: which pods
//! are due ([`admit`], [`pace`]), the verdict and its transitions ([`verdict`]). Effects: the pods the
//! node's one pod watch feeds ([`AuditSink`]), the round driver with its Events and actions ([`round`]),
//! the metrics ([`metrics`]) and the operators' one-shot ([`once`]). The pods as first seen outlive the
//! agent in its run dir ([`kept`]: the format and which one applies, pure; [`persist`]: the file).

pub mod kept;
pub mod metrics;
pub mod once;
pub mod pace;
pub mod persist;
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

pub use kept::First;
use std::time::Duration;

/// `AUDIT_INTERVAL`'s default.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(60);

/// A pod the audit verifies: the facts its actions and Events need, and the plugin's decision on it, made
/// once from the pod as the audit first saw it running (never a pod object: the store holds every pod of
/// the node).
#[derive(Debug, Clone)]
pub struct Pod {
    pub facts: PodFacts,
    /// What it is verified and repaired with, or why it cannot be decided (then it is unverifiable): the
    /// decision as first seen, kept while the pod keeps its UID and pod IP ([`AuditSink`]).
    pub plan: Decided,
    /// What the audit last found (kept across the watch's updates of the same pod).
    pub seen: Option<verdict::Seen>,
    /// A later event of the pod read to another decision than [`Pod::plan`] was logged (once).
    pub changed_logged: bool,
    /// The pod [`Pod::plan`] was decided from, reduced ([`kept::reduced`]), until the run dir's file holds
    /// it ([`persist::save`]; `None` then, or when it is too large to keep).
    pub first: Option<Arc<str>>,
}

/// A running pod the plugin's decision leaves alone, as first seen: it stays unaudited while it keeps
/// this UID and pod IP, whatever its labels or annotations say later.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    pub uid: String,
    pub pod_ip: String,
    /// A later event of the pod read to a redirection was logged (once).
    pub changed_logged: bool,
    /// The pod as first seen, reduced, as [`Pod::first`].
    pub first: Option<Arc<str>>,
}

/// The pods to verify, by `namespace/name`, the running pods left alone, and whether the watch's first
/// list is complete.
#[derive(Debug, Default)]
pub struct Store {
    /// Boxed: a map node holds a pointer per slot, not a whole pod (~0.5 KiB), in its spare slots too.
    pub pods: BTreeMap<String, Box<Pod>>,
    pub skipped: BTreeMap<String, Skipped>,
    pub listed: bool,
    /// The pods as first seen before the agent restarted ([`persist::load`]), by `namespace/name`, until
    /// each is seen again or the first list is complete (then the rest are gone).
    pub restored: BTreeMap<String, First>,
    /// The kept pods (which pods, as first seen) changed since the run dir's file was written.
    pub changed: bool,
    /// Reduced pods held ([`Pod::first`], [`Skipped::first`]) and not written yet.
    pub held: usize,
    /// Where the agent keeps them ([`persist`]); `None` keeps nothing (the one-shot, tests).
    pub keep: Option<std::path::PathBuf>,
}

/// Held reduced pods that make the watch thread write them at once rather than leave them to the writer's
/// next turn: a node's first list admits every pod in a burst, and holding them all until then would cost
/// a copy of each (hundreds of bytes a pod) at the agent's peak.
pub const HELD_WRITE: usize = 64;

impl Store {
    /// A store starting from the pods kept before a restart.
    pub fn restored(restored: BTreeMap<String, First>) -> Shared {
        Arc::new(Mutex::new(Store {
            restored,
            ..Store::default()
        }))
    }

    /// [`AuditSink::note`] of a pod first seen with this UID and pod IP since the agent started: decided as
    /// kept before it restarted, else as it is now (`decided`), once.
    fn first_seen(
        &mut self,
        conf: &NetConf,
        key: String,
        pod: &Object,
        facts: PodFacts,
        decided: Decided,
    ) {
        self.skipped.remove(&key);
        let old = self.pods.remove(&key);
        self.changed = true;
        let restored =
            (self.restored.remove(&key)).filter(|f| kept::applies(f, &facts.uid, &facts.pod_ip));
        let (first, decided, changed_logged) = match restored {
            Some(f) => {
                let then = match f.pod() {
                    Ok(p) => crate::pod_rules::decide(&p, Some(conf)),
                    Err(e) => Err(e.to_string()),
                };
                let changed = !same(&then, &decided);
                if changed {
                    log_changed(&key);
                }
                (Some(f.body), then, changed)
            }
            None => (kept::reduced(pod), decided, false),
        };
        self.held += usize::from(first.is_some());
        if let Ok(PodPlan::Skip(_)) = decided {
            self.skipped.insert(
                key,
                Skipped {
                    uid: facts.uid,
                    pod_ip: facts.pod_ip,
                    changed_logged,
                    first,
                },
            );
            return;
        }
        // What the audit found stays with the same UID (its sandbox recreated).
        let seen = old
            .filter(|o| o.facts.uid == facts.uid)
            .and_then(|o| o.seen);
        self.pods.insert(
            key,
            Box::new(Pod {
                facts,
                plan: decided,
                seen,
                changed_logged,
                first,
            }),
        );
    }
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
    if !running(&PodView::of(pod)) {
        return None;
    }
    let plan = crate::pod_rules::decide(pod, Some(conf));
    if let Ok(PodPlan::Skip(_)) = plan {
        return None;
    }
    Some(Pod {
        facts: facts(det, pod),
        plan,
        seen: None,
        changed_logged: false,
        first: None,
    })
}

/// Running with a namespace of its own: a pod IP, not terminal, not being deleted, not host-network.
fn running(v: &PodView) -> bool {
    !(v.host_network || v.terminal || v.deleting || v.pod_ip.is_empty())
}

/// The facts the audit keeps (not the init containers' statuses: the repair worker's).
fn facts(det: &Detector, pod: &Object) -> PodFacts {
    let mut facts = det.facts(pod);
    facts.init = Vec::new();
    facts
}

/// Whether two decisions agree (two skips do, whatever their reasons).
fn same(a: &Decided, b: &Decided) -> bool {
    match (a, b) {
        (Ok(PodPlan::Skip(_)), Ok(PodPlan::Skip(_))) => true,
        _ => a == b,
    }
}

/// The line, once per pod, when a later event of a running pod reads to another decision than the one
/// it is audited with.
fn log_changed(key: &str) {
    log::info!(
        "audit: pod {key}: its labels or annotations changed since it started; the plugin's decision it \
         started with is kept (a change takes effect when the pod is recreated)"
    );
}

/// The audit's side of the node's pod watch.
pub struct AuditSink {
    pub det: Detector,
    /// The plugin configuration whose decision admits a pod (its `exclude_namespaces`).
    pub conf: NetConf,
    pub store: Shared,
}

impl AuditSink {
    /// [`PodSink::pod`]'s decision, without the write it may call for.
    fn note(&mut self, pod: &Object) {
        let v = PodView::of(pod);
        let key = v.key();
        if !running(&v) {
            let mut s = lock(&self.store);
            let gone = s.pods.remove(&key).is_some() | s.skipped.remove(&key).is_some();
            s.changed |= gone;
            s.restored.remove(&key);
            return;
        }
        let decided = crate::pod_rules::decide(pod, Some(&self.conf));
        let facts = facts(&self.det, pod);
        let mut s = lock(&self.store);
        let kept = |uid: &str, ip: &str| uid == facts.uid && ip == facts.pod_ip;
        if let Some(p) = s
            .pods
            .get_mut(&key)
            .filter(|p| kept(&p.facts.uid, &p.facts.pod_ip))
        {
            if !p.changed_logged && !same(&p.plan, &decided) {
                p.changed_logged = true;
                log_changed(&key);
            }
            p.facts = facts;
            return;
        }
        if let Some(k) = s.skipped.get_mut(&key).filter(|k| kept(&k.uid, &k.pod_ip)) {
            if !k.changed_logged && !matches!(decided, Ok(PodPlan::Skip(_))) {
                k.changed_logged = true;
                log_changed(&key);
            }
            return;
        }
        s.first_seen(&self.conf, key, pod, facts, decided);
    }
}

impl PodSink for AuditSink {
    /// The plugin decides once, at the sandbox's ADD, from the pod as it was then: so does the audit. The
    /// first event showing a pod running (a pod IP) decides it; later events of the same UID and pod IP
    /// refresh its facts but change neither whether it is audited nor the plan it is verified and repaired
    /// in place with (a label `sidecar.istio.io/inject=false` or an exclusion annotation patched onto a
    /// running pod neither takes it out of the audit nor gets programmed). A new UID (the pod recreated
    /// under its name) or a new pod IP (its sandbox recreated: ADD ran again) is decided afresh. After the
    /// agent restarts, a pod kept in the run dir with the same UID and pod IP is decided from the pod as
    /// kept ([`kept::applies`]); only a pod not kept is first seen at its first event since.
    fn pod(&mut self, pod: &Object) {
        self.note(pod);
        persist::write_held(&self.store);
    }
    fn gone(&mut self, key: &str, uid: &str) {
        let mut s = lock(&self.store);
        if s.pods
            .get(key)
            .is_some_and(|p| uid.is_empty() || p.facts.uid == uid)
        {
            s.pods.remove(key);
            s.changed = true;
        }
        if s.skipped
            .get(key)
            .is_some_and(|k| uid.is_empty() || k.uid == uid)
        {
            s.skipped.remove(key);
            s.changed = true;
        }
        if s.restored
            .get(key)
            .is_some_and(|f| uid.is_empty() || f.uid == uid)
        {
            s.restored.remove(key);
        }
    }
    /// The first list complete, the pods kept before a restart and not seen running in it are gone (or
    /// not running): forgotten, and the file rewritten without them.
    fn list_done(&mut self) {
        let mut s = lock(&self.store);
        s.listed = true;
        if !s.restored.is_empty() {
            s.restored.clear();
            s.changed = true;
        }
    }
}

#[cfg(test)]
#[path = "mod_tests.rs"]
mod tests;
