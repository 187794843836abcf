//! Carrying out one action on one pod: repair in place, delete, or label; then the Event and the metric.

use super::detect::{Action, PodFacts};
use super::metrics;
use super::procfs;
use super::request;
use crate::cni::NetConf;
use crate::error::{Error, Result};
use crate::json;
use crate::kube::Client;
use crate::pod_rules::Decided;
use crate::redirect::plan::PodPlan;
use crate::redirect::Redirect;
use std::net::IpAddr;
use std::path::PathBuf;

/// The Event's reason after a repair in place that found connections opened while the pod's rules were
/// missing (ended, left open, or not read).
pub const REASON_GAP: &str = "RedirectGapConnections";

/// What the actions need besides the pod.
pub struct Actor {
    pub client: Client,
    pub opts: super::options::Options,
    /// The host's `/proc` (`/host/proc` in the DaemonSet).
    pub host_proc: PathBuf,
    /// The plugin configuration used to program a repaired pod (same code path as ADD).
    pub netconf: NetConf,
}

fn unix_nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

impl Actor {
    /// The actions for `opts` with the agent's API client, the host `/proc` and the plugin configuration a
    /// repaired pod is programmed with.
    pub fn new(
        client: Client,
        opts: &super::options::Options,
        host_proc: PathBuf,
        netconf: NetConf,
    ) -> Actor {
        Actor {
            client,
            opts: opts.clone(),
            host_proc,
            netconf,
        }
    }

    /// Programs the pod's decided `plan` inside its namespace, exactly as ADD applies it ([`crate::pod_rules`]),
    /// then reads back that the rules are there and that the namespace is still the pod's
    /// ([`procfs::in_pod_netns`]). Anything else is an error: the repair is retried and reported, never
    /// counted as done.
    fn repair(&self, f: &PodFacts, plan: Option<&Decided>) -> Result<String> {
        if f.host_network {
            return Err(Error::other(
                "a hostNetwork pod shares the node's network namespace: refusing to program it",
            ));
        }
        let ip: IpAddr = f.pod_ip.parse().map_err(|_| {
            Error::other(format!("failed to parse addr: status.podIP {:?}", f.pod_ip))
        })?;
        let plan = plan.ok_or_else(|| Error::other("the pod's plan was not kept for repair"))?;
        // A pod the plugin leaves alone has nothing to program: its istio-validation keeps failing, so
        // this is no repair (counting one would report a pod fixed that is not, and never look again).
        if let Ok(PodPlan::Skip(why)) = plan {
            return Err(Error::other(format!(
                "the plugin does not redirect this pod ({why}): nothing to program, and its \
                 istio-validation cannot pass; recreate the pod without what makes the plugin skip it, \
                 or without istio-validation"
            )));
        }
        let env = |k: &str| std::env::var(k).ok();
        let choose = || crate::backend::for_agent(&self.netconf);
        let (line, ns) = procfs::in_pod_netns(
            &self.host_proc,
            ip,
            &f.cgroup_uid,
            None,
            "programmed",
            |ns| {
                let plan = plan.clone().map_err(Error::other)?;
                let line =
                    crate::pod_rules::program_plan(plan.clone(), &ns.path(), &choose, &env, 0)?;
                crate::pod_rules::check_plan(plan, &ns.path(), &choose, &env).map_err(|e| {
                    Error::other(format!(
                        "the rules just programmed into the netns of pid {} do not read back: {e}",
                        ns.holder.pid
                    ))
                })?;
                Ok(line.message)
            },
        )?;
        let gap = match plan {
            Ok(PodPlan::Redirect(r)) => self.end_gap(f, r, &ns.path()),
            _ => String::new(),
        };
        Ok(format!(
            "{line} (netns of pid {}{}){gap}",
            ns.holder.pid,
            if ns.holder.is_pod {
                ", in the pod's cgroup"
            } else {
                ""
            }
        ))
    }

    /// After a repair in place: ends the pod's connections opened while its rules were missing that
    /// bypass the proxy ([`super::gap_end`]), counts them, and records an Event (reason
    /// [`REASON_GAP`]) when there were any or they could not be read. The text for the repair's line
    /// ("" when there were none). Never fails the repair: the rules are back either way.
    fn end_gap(&self, f: &PodFacts, redirect: &Redirect, ns_path: &str) -> String {
        let text = match super::gap_end::end_gap_connections(ns_path, redirect.clone()) {
            Ok(e) if e.ended == 0 && e.left_open == 0 => return String::new(),
            Ok(e) => {
                metrics::gap("ended", e.ended as u64);
                metrics::gap("left_open", e.left_open as u64);
                let mut t = format!(
                    "{} connections opened while the rules were missing ended",
                    e.ended
                );
                if e.left_open > 0 {
                    t.push_str(&format!(
                        ", {} left open (whether the rules capture them cannot be judged here)",
                        e.left_open
                    ));
                }
                t
            }
            Err(e) => {
                metrics::gap("unread", 1);
                format!("its connections opened while the rules were missing were not read: {e}")
            }
        };
        let message = format!("repaired; {text}");
        if let Err(e) = self.record(f, REASON_GAP, &message) {
            log::warn!("pod {}: could not record event {REASON_GAP}: {e}", f.key());
        }
        format!("; {text}")
    }

    /// Carries out `a` (Label, Delete or Repair; LabelSkip only counts), writes the Event and counts
    /// the metric. `Err` means "retry later".
    pub fn act(&self, a: Action, f: &PodFacts, plan: Option<&Decided>) -> Result<()> {
        let key = f.key();
        let result: Result<String> = match a {
            Action::None => return Ok(()),
            Action::LabelSkip => {
                log::info!(
                    "pod {key} is broken and already has label {}; skipping",
                    self.opts.label_key
                );
                metrics::inc("label", "skip");
                return Ok(());
            }
            Action::Label => json::parse(&request::label_patch(&self.opts), "label patch")
                .and_then(|p| self.client.patch_pod_status(&f.namespace, &f.name, &p))
                .map(|_| format!("labeled {}={}", self.opts.label_key, self.opts.label_value)),
            Action::Delete => {
                let opt = |s: &str| Some(s.to_string()).filter(|s| !s.is_empty());
                let (uid, rv) = (opt(&f.uid), opt(&f.resource_version));
                self.client
                    .delete_pod(&f.namespace, &f.name, uid.as_deref(), rv.as_deref())
                    .map(|_| "deleted".to_string())
            }
            Action::Repair => self.repair(f, plan),
        };
        let kind = a.metric_type();
        let err_text = result.as_ref().err().map(|e| e.to_string());
        match &result {
            Ok(what) => {
                log::info!("pod {key} detected as broken: {what}");
                metrics::inc(kind, "success");
            }
            Err(e) => {
                log::warn!("pod {key} detected as broken, but the {kind} failed: {e}");
                metrics::inc(kind, "fail");
            }
        }
        self.event(a, f, err_text.as_deref());
        result.map(|_| ())
    }

    /// Records the Event for `a` on the pod (its failure text when `err`).
    fn event(&self, a: Action, f: &PodFacts, err: Option<&str>) {
        if let Some((reason, message)) = request::event_text(a, err) {
            if let Err(e) = self.record(f, reason, &message) {
                log::warn!("pod {}: could not record event {reason}: {e}", f.key());
            }
        }
    }

    /// Writes an Event about the pod with `reason` and `message` (this node as its source).
    pub fn record(&self, f: &PodFacts, reason: &str, message: &str) -> Result<()> {
        let ev = request::event_json(f, reason, message, unix_nanos(), &self.opts.node_name);
        json::parse(&ev, "event").and_then(|v| self.client.create_event(&f.namespace, &v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kube::Config;

    /// An actor whose API server refuses every connection, looking at `host_proc`.
    fn actor(host_proc: PathBuf) -> Actor {
        let kubeconfig = r#"{"apiVersion":"v1","kind":"Config",
            "clusters":[{"name":"c","cluster":{"server":"http://127.0.0.1:1"}}],
            "users":[{"name":"u","user":{}}],
            "contexts":[{"name":"x","context":{"cluster":"c","user":"u"}}],"current-context":"x"}"#;
        let cfg = Config::from_kubeconfig_text(kubeconfig, std::path::Path::new("/"), "k").unwrap();
        let conf =
            crate::cni::conf::parse(r#"{"cniVersion":"1.0.0","name":"n","type":"istio-cni"}"#)
                .unwrap();
        Actor::new(
            Client::from_config(cfg).unwrap(),
            &super::super::options::Options::default(),
            host_proc,
            conf,
        )
    }

    #[test]
    fn a_host_network_pod_is_never_repaired_in_place() {
        let uid = "0a1b2c3d-0000-4000-8000-0000000000aa";
        let f = PodFacts {
            namespace: "ns".into(),
            name: "hostnet".into(),
            uid: uid.into(),
            cgroup_uid: uid.into(),
            pod_ip: "10.1.2.3".into(),
            host_network: true,
            ..PodFacts::default()
        };
        // Any plan: the refusal comes before the plan is looked at.
        let plan: Decided = Ok(PodPlan::Skip("test".into()));
        let e = actor("/nonexistent/host-proc".into())
            .repair(&f, Some(&plan))
            .unwrap_err();
        assert!(e.to_string().contains("hostNetwork pod"), "{e}");
    }
}
