//! Pure detection: the few facts the predicate needs, extracted from a Pod object (so the agent keeps a
//! few dozen bytes per pod, never the pod), the predicate itself (upstream `matchesFilter`/`detectPod`)
//! and the action choice with master's precedence: repair in place > delete > label.

use super::options::Options;
use super::selector::{FieldSelector, LabelSelector};
use crate::error::Result;
use crate::json::{self, Number, Object, Value};

/// How one matching init container ended its last run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LastTermination {
    pub exit_code: i64,
    pub message: String,
}

/// One init container status, reduced to what the predicate reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InitStatus {
    /// `state.terminated` with reason `Completed` or exit code 0: its current run succeeded.
    pub succeeded: bool,
    /// `lastState.terminated`, if any.
    pub last: Option<LastTermination>,
    /// Runs that have ended: `restartCount`, plus the one that ended last unless a run is going on (so a
    /// run that starts does not count until it ends).
    pub runs: i64,
    /// A run is going on (`state.running`).
    pub running: bool,
}

/// What the agent remembers of a pod.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PodFacts {
    pub namespace: String,
    pub name: String,
    /// `metadata.uid`: API preconditions, Events, the agent's keys.
    pub uid: String,
    /// The UID the kubelet names the pod's cgroup after ([`crate::kube::pod::kubelet_uid`]): a static
    /// pod's mirror's annotation, else `uid`. What its network namespace is found by.
    pub cgroup_uid: String,
    pub resource_version: String,
    pub pod_ip: String,
    /// `spec.hostNetwork`: it shares the node's network namespace, never repaired in place.
    pub host_network: bool,
    /// Passes the configured label selector and the effective field selector (incl. `spec.nodeName`).
    pub selected: bool,
    /// Carries the configured sidecar annotation key (any value); true when none is configured.
    pub annotated: bool,
    /// Already carries the broken-pod label key (any value).
    pub labeled: bool,
    /// Statuses of the init containers the configuration names (all of them when the name is "").
    pub init: Vec<InitStatus>,
}

impl PodFacts {
    /// `namespace/name`, the queue key.
    pub fn key(&self) -> String {
        crate::kube::pod::key(&self.namespace, &self.name)
    }
}

/// The options with their selectors parsed once.
#[derive(Debug, Clone)]
pub struct Detector {
    pub opts: Options,
    labels: LabelSelector,
    fields: FieldSelector,
}

fn int_of(v: Option<&Value>) -> Option<i64> {
    match v? {
        Value::Number(Number::I64(i)) => Some(*i),
        Value::Number(Number::U64(u)) => i64::try_from(*u).ok(),
        Value::Number(Number::F64(f)) if f.fract() == 0.0 && f.abs() < 9e15 => Some(*f as i64),
        _ => None,
    }
}

fn terminated<'a>(status: &'a Object, which: &str) -> Option<&'a Object> {
    json::obj_of(status, which).and_then(|s| json::obj_of(s, "terminated"))
}

impl Detector {
    pub fn new(opts: Options) -> Result<Detector> {
        let labels = LabelSelector::parse(&opts.label_selectors)?;
        let fields = FieldSelector::parse(&opts.effective_field_selector())?;
        Ok(Detector {
            opts,
            labels,
            fields,
        })
    }

    /// Extracts the facts from a Pod. Missing or mistyped fields read as absent: a malformed pod is
    /// simply not broken.
    pub fn facts(&self, pod: &Object) -> PodFacts {
        let o = &self.opts;
        let empty = Object::new();
        let meta = json::obj_of(pod, "metadata").unwrap_or(&empty);
        let v = crate::kube::PodView::of(pod);
        let labels = json::obj_of(meta, "labels");
        let annotated = o.sidecar_annotation.is_empty()
            || json::obj_of(meta, "annotations")
                .is_some_and(|a| a.contains_key(o.sidecar_annotation.as_str()));
        let labeled = labels.is_some_and(|l| l.contains_key(o.label_key.as_str()));
        let status = json::obj_of(pod, "status").unwrap_or(&empty);
        let init = json::arr_of(status, "initContainerStatuses")
            .map(|a| a.iter())
            .into_iter()
            .flatten()
            .filter_map(|v| match v {
                Value::Object(c) => Some(c),
                _ => None,
            })
            .filter(|c| {
                o.init_container_name.is_empty()
                    || json::str_of(c, "name") == Some(o.init_container_name.as_str())
            })
            .map(|c| {
                let last = terminated(c, "lastState").map(|t| LastTermination {
                    exit_code: int_of(t.get("exitCode")).unwrap_or(0),
                    message: json::str_of(t, "message").unwrap_or("").to_string(),
                });
                let state = json::obj_of(c, "state");
                let ended = terminated(c, "state").is_some()
                    || (last.is_some() && state.is_some_and(|s| s.contains_key("waiting")));
                InitStatus {
                    succeeded: terminated(c, "state").is_some_and(|t| {
                        json::str_of(t, "reason") == Some("Completed")
                            || int_of(t.get("exitCode")).unwrap_or(0) == 0
                    }),
                    last,
                    runs: int_of(c.get("restartCount")).unwrap_or(0).max(0) + i64::from(ended),
                    running: state.is_some_and(|s| s.contains_key("running")),
                }
            })
            .collect();
        PodFacts {
            namespace: v.namespace.into(),
            name: v.name.into(),
            uid: v.uid.into(),
            cgroup_uid: crate::kube::pod::kubelet_uid(pod).into(),
            resource_version: v.resource_version.into(),
            pod_ip: v.pod_ip.into(),
            host_network: v.host_network,
            selected: self.labels.matches(labels) && self.fields.matches(pod),
            annotated,
            labeled,
            init,
        }
    }
}

/// The predicate (§1.2): annotated, and some named init container whose current run did not succeed
/// last terminated with the configured message (trimmed; "" = any) and exit code (0 = any).
pub fn needs_repair(f: &PodFacts, o: &Options) -> bool {
    failing(f, o).is_some()
}

/// The init container that makes the pod broken by [`needs_repair`], if any (the first matching one).
pub fn failing<'a>(f: &'a PodFacts, o: &Options) -> Option<&'a InitStatus> {
    if !f.annotated {
        return None;
    }
    let want_msg = o.init_termination_msg.trim();
    f.init.iter().filter(|c| !c.succeeded).find(|c| {
        c.last.as_ref().is_some_and(|t| {
            (want_msg.is_empty() || want_msg == t.message.trim())
                && (o.init_exit_code == 0 || o.init_exit_code == t.exit_code)
        })
    })
}

/// Its last termination ([`failing`]).
pub fn failure<'a>(f: &'a PodFacts, o: &Options) -> Option<&'a LastTermination> {
    failing(f, o).and_then(|c| c.last.as_ref())
}

/// What to do about a pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Not broken, or no mode enabled.
    None,
    /// Program the redirection in the pod's network namespace.
    Repair,
    /// Delete the pod (uid/resourceVersion preconditions) so it is recreated.
    Delete,
    /// Label the pod through `pods/status`.
    Label,
    /// Label mode, but the key is already there: count `{label, skip}` and stop.
    LabelSkip,
}

impl Action {
    /// The metric `type` label.
    pub fn metric_type(self) -> &'static str {
        match self {
            Action::Repair => "repair",
            Action::Delete => "delete",
            Action::Label | Action::LabelSkip | Action::None => "label",
        }
    }
}

/// Master's `ReconcilePod`: nothing unless broken; then the first enabled mode of repair, delete, label.
pub fn choose_action(f: &PodFacts, o: &Options) -> Action {
    if !needs_repair(f, o) {
        Action::None
    } else {
        mode_action(f, o, true)
    }
}

/// The first enabled mode of repair, delete, label, for a pod that needs one; `repairable`: whether
/// repair in place may act on it (the audit's bypassed pod may not: someone else's rules).
pub fn mode_action(f: &PodFacts, o: &Options, repairable: bool) -> Action {
    if o.repair_pods {
        if repairable {
            Action::Repair
        } else {
            Action::None
        }
    } else if o.delete_pods {
        Action::Delete
    } else if o.label_pods {
        if f.labeled {
            Action::LabelSkip
        } else {
            Action::Label
        }
    } else {
        Action::None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(status: &str) -> Object {
        json::parse_object(
            &format!(
                r#"{{"metadata":{{"name":"p","namespace":"ns","uid":"u1","resourceVersion":"7",
                "annotations":{{"sidecar.istio.io/status":""}}}},
                "spec":{{"nodeName":"n1"}},"status":{{"podIP":"10.1.1.2","initContainerStatuses":[{status}]}}}}"#
            ),
            "pod",
        )
        .unwrap()
    }

    fn opts() -> Options {
        Options {
            node_name: "n1".into(),
            ..Options::default()
        }
    }

    #[test]
    fn first_failure_alone_is_not_broken() {
        let d = Detector::new(opts()).unwrap();
        let f = d.facts(&pod(
            r#"{"name":"istio-validation","state":{"terminated":{"exitCode":126,"reason":"Error"}}}"#,
        ));
        assert!(f.selected && f.annotated && !needs_repair(&f, &d.opts));
        assert_eq!((f.uid.as_str(), f.resource_version.as_str()), ("u1", "7"));
        assert_eq!(f.cgroup_uid, "u1");
        assert_eq!(
            (f.key(), f.pod_ip.as_str()),
            ("ns/p".to_string(), "10.1.1.2")
        );
    }

    #[test]
    fn crash_loop_with_126_is_broken_and_modes_take_precedence() {
        let mut o = opts();
        let d = Detector::new(o.clone()).unwrap();
        let f = d.facts(&pod(
            r#"{"name":"istio-validation","state":{"waiting":{"reason":"CrashLoopBackOff"}},
                "lastState":{"terminated":{"exitCode":126,"reason":"Error"}}}"#,
        ));
        assert!(needs_repair(&f, &o));
        assert_eq!(choose_action(&f, &o), Action::None);
        o.label_pods = true;
        assert_eq!(choose_action(&f, &o), Action::Label);
        o.delete_pods = true;
        assert_eq!(choose_action(&f, &o), Action::Delete);
        o.repair_pods = true;
        assert_eq!(choose_action(&f, &o), Action::Repair);
    }

    #[test]
    fn a_static_pod_s_mirror_is_found_by_the_kubelet_s_uid_and_written_by_its_own() {
        let d = Detector::new(opts()).unwrap();
        let mirror = |ann: &str| {
            json::parse_object(
                &format!(
                    r#"{{"metadata":{{"name":"p-n1","namespace":"ns","uid":"api-uid","resourceVersion":"7",
                    "annotations":{{"sidecar.istio.io/status":""{ann}}}}},
                    "spec":{{"nodeName":"n1"}},"status":{{"podIP":"10.1.1.2"}}}}"#
                ),
                "pod",
            )
            .unwrap()
        };
        let f = d.facts(&mirror(r#","kubernetes.io/config.mirror":"kubelet-uid""#));
        assert_eq!(f.cgroup_uid, "kubelet-uid");
        // Preconditions, Events and keys stay the API server's object's.
        assert_eq!(f.uid, "api-uid");
        for ann in ["", r#","kubernetes.io/config.mirror":"""#] {
            assert_eq!(d.facts(&mirror(ann)).cgroup_uid, "api-uid", "{ann}");
        }
    }

    #[test]
    fn malformed_fields_are_absent_not_errors() {
        let d = Detector::new(opts()).unwrap();
        for s in [
            r#"{}"#,
            r#"{"name":"istio-validation","lastState":7}"#,
            r#"3"#,
        ] {
            assert!(!needs_repair(&d.facts(&pod(s)), &d.opts), "{s}");
        }
        let other_node = Detector::new(Options {
            node_name: "n2".into(),
            ..opts()
        })
        .unwrap();
        assert!(!other_node.facts(&pod("{}")).selected);
    }
}

#[cfg(test)]
mod filter_tests {
    use super::*;

    #[test]
    fn zero_exit_filter_and_empty_message_match_anything() {
        let f = PodFacts {
            annotated: true,
            init: vec![InitStatus {
                succeeded: false,
                last: Some(LastTermination {
                    exit_code: 0,
                    message: " m ".into(),
                }),
                runs: 1,
                running: false,
            }],
            ..PodFacts::default()
        };
        let mut o = Options::default();
        assert!(!needs_repair(&f, &o), "126 wanted, 0 seen");
        o.init_exit_code = 0;
        assert!(needs_repair(&f, &o));
        o.init_termination_msg = "m".into();
        assert!(needs_repair(&f, &o));
        o.init_termination_msg = "M".into();
        assert!(!needs_repair(&f, &o), "case-sensitive");
    }
}
