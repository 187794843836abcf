//! The decision and plan path of ADD, CHECK and repair in place, through a recording fake backend: what
//! would be applied in which namespace, without root.

use super::*;
use crate::error::Error;
use crate::json;
use crate::redirect::plan::{self, Addresses};
use crate::redirect::{Documents, Redirect};
use std::cell::{Cell, RefCell};
use std::net::IpAddr;
use std::rc::Rc;

/// One call the fake received: which method, the namespace, and the documents it would restore.
#[derive(Debug, Clone)]
struct Call {
    verify: bool,
    netns: String,
    docs: Documents,
}

/// Plans exactly as the real backends do, with the addresses `addrs` standing for those read inside the
/// namespace, and records the result instead of entering it.
#[derive(Clone)]
struct Recording {
    addrs: Vec<(u32, IpAddr)>,
    calls: Rc<RefCell<Vec<Call>>>,
    /// CHECK's verdict: `Some(reason)` fails verify.
    drift: Option<&'static str>,
}

impl Recording {
    fn new(addrs: &[&str]) -> Recording {
        Recording {
            addrs: addrs.iter().map(|a| (2, a.parse().unwrap())).collect(),
            calls: Rc::default(),
            drift: None,
        }
    }
    fn record(&self, verify: bool, netns: &str, r: &Redirect, env: &NodeEnv) -> Result<()> {
        let docs = plan::plan(r, Addresses::Netns(&self.addrs), env)?;
        self.calls.borrow_mut().push(Call {
            verify,
            netns: netns.into(),
            docs,
        });
        Ok(())
    }
    fn calls(&self) -> Vec<Call> {
        self.calls.borrow().clone()
    }
}

impl RuleBackend for Recording {
    fn name(&self) -> String {
        "recording".into()
    }
    fn apply(&self, netns: &str, r: Redirect, env: NodeEnv, _decide_us: u128) -> Result<String> {
        self.record(false, netns, &r, &env)?;
        Ok("recorded".into())
    }
    fn verify(&self, netns: &str, r: Redirect, env: NodeEnv) -> Result<()> {
        self.record(true, netns, &r, &env)?;
        match self.drift {
            Some(why) => Err(Error::other(why)),
            None => Ok(()),
        }
    }
    fn inspect(
        &self,
        netns: &str,
        r: Redirect,
        env: NodeEnv,
    ) -> Result<crate::netfilter::bypass::Findings> {
        self.record(true, netns, &r, &env)?;
        Ok(crate::netfilter::bypass::Findings {
            ours: self.drift.iter().map(|s| s.to_string()).collect(),
            bypass: Vec::new(),
        })
    }
}

fn pod(annotations: &str, containers: &str) -> Object {
    let text = format!(
        r#"{{"metadata":{{"name":"p","namespace":"ns","annotations":{{"sidecar.istio.io/status":"{{}}"{annotations}}}}},
            "spec":{{"containers":[{containers}]}}}}"#
    );
    json::parse_object(&text, "pod").unwrap()
}

const SIDECAR: &str = r#"{"name":"app"},{"name":"istio-proxy"}"#;

fn no_env(_: &str) -> Option<String> {
    None
}

#[test]
fn add_applies_the_planned_documents_in_the_pods_namespace() {
    let fake = Recording::new(&["10.0.0.5"]);
    let chosen = fake.clone();
    let p = pod(
        r#","traffic.sidecar.istio.io/includeInboundPorts":"8080""#,
        SIDECAR,
    );
    let msg = program_pod_with(
        &p,
        "/var/run/netns/pod-a",
        &|| Ok(Box::new(chosen.clone())),
        &no_env,
    )
    .unwrap();
    assert!(msg.redirected);
    assert_eq!(msg.message, "recorded");
    let calls = fake.calls();
    assert_eq!(calls.len(), 1);
    assert!(!calls[0].verify);
    assert_eq!(calls[0].netns, "/var/run/netns/pod-a");
    let v4 = &calls[0].docs.v4;
    assert!(
        v4.contains("-A ISTIO_INBOUND -p tcp --dport 8080 -j ISTIO_IN_REDIRECT"),
        "{v4}"
    );
    assert!(
        v4.contains("-A ISTIO_IN_REDIRECT -p tcp -j REDIRECT --to-ports 15006"),
        "{v4}"
    );
    // An IPv4-only namespace gets no IPv6 document and no TPROXY route.
    assert!(calls[0].docs.v6.is_none());
    assert!(calls[0].docs.tproxy_route.is_none());
}

#[test]
fn a_pod_without_a_sidecar_never_chooses_a_backend() {
    let chose = Cell::new(0);
    let choose = || -> Result<Box<dyn RuleBackend>> {
        chose.set(chose.get() + 1);
        Err(Error::other("no backend for this test"))
    };
    let p = pod("", r#"{"name":"app"}"#);
    let msg = program_pod_with(&p, "/ns", &choose, &no_env).unwrap();
    assert!(!msg.redirected);
    assert!(msg.message.starts_with("no redirection: "), "{msg}");
    check_pod_with(&p, "/ns", &choose, &no_env).unwrap();
    assert_eq!(chose.get(), 0);
    // A sidecar pod does choose, and the chooser's error is ADD's error.
    let e = program_pod_with(&pod("", SIDECAR), "/ns", &choose, &no_env).unwrap_err();
    assert!(e.to_string().contains("no backend for this test"), "{e}");
    assert_eq!(chose.get(), 1);
}

#[test]
fn the_node_environment_reaches_the_plan() {
    let fake = Recording::new(&["10.0.0.5"]);
    let chosen = fake.clone();
    let p = pod("", SIDECAR);
    let env =
        |k: &str| (k == "ISTIO_OUTBOUND_IPV4_LOOPBACK_CIDR").then(|| "127.0.0.0/8".to_string());
    program_pod_with(&p, "/ns", &|| Ok(Box::new(chosen.clone())), &no_env).unwrap();
    program_pod_with(&p, "/ns", &|| Ok(Box::new(chosen.clone())), &env).unwrap();
    let calls = fake.calls();
    let lo = "-A ISTIO_OUTPUT -o lo ! -d 127.0.0.0/8 ";
    assert!(!calls[0].docs.v4.contains(lo), "{}", calls[0].docs.v4);
    assert!(calls[1].docs.v4.contains(lo), "{}", calls[1].docs.v4);
}

#[test]
fn check_verifies_the_same_plan_add_applies_and_reports_drift() {
    let mut fake = Recording::new(&["10.0.0.5", "fd00::5"]);
    let p = pod(r#","sidecar.istio.io/interceptionMode":"TPROXY""#, SIDECAR);
    let chosen = fake.clone();
    program_pod_with(&p, "/ns", &|| Ok(Box::new(chosen.clone())), &no_env).unwrap();
    check_pod_with(&p, "/ns", &|| Ok(Box::new(chosen.clone())), &no_env).unwrap();
    let calls = fake.calls();
    assert_eq!(calls.len(), 2);
    assert!(!calls[0].verify && calls[1].verify);
    assert_eq!(calls[0].docs, calls[1].docs);
    assert!(calls[0].docs.tproxy_route.is_some());
    fake.drift = Some("rule missing: -A ISTIO_OUTPUT");
    let drifted = fake.clone();
    let e = check_pod_with(&p, "/ns", &|| Ok(Box::new(drifted.clone())), &no_env).unwrap_err();
    assert!(e.to_string().contains("rule missing"), "{e}");
}

/// A configuration whose backend needs no probe of the node (nftables), so the real wrappers run unprivileged
/// as far as entering the namespace.
fn nft_conf() -> NetConf {
    crate::cni::conf::parse(
        r#"{"cniVersion":"1.0.0","name":"n","type":"istio-cni","native_nftables":true,
            "cni_agent_run_dir":"/nonexistent/istio-cni-run"}"#,
    )
    .unwrap()
}

const GONE: &str = "/nonexistent/istio-cni-test/netns";

#[test]
fn check_of_a_sidecar_pod_whose_namespace_cannot_be_read_fails() {
    // CHECK through the configuration's own backend: a sidecar pod's rules are verified in its namespace,
    // so a namespace that cannot be opened is a failed CHECK, never a pass.
    let conf = nft_conf();
    let e = check_pod(&pod("", SIDECAR), GONE, &conf, &no_env).unwrap_err();
    assert!(e.to_string().contains(GONE), "{e}");
    // A pod that needs no rules passes without its namespace being looked at.
    check_pod(&pod("", r#"{"name":"app"}"#), GONE, &conf, &no_env).unwrap();
}

#[test]
fn the_audits_inspection_of_a_namespace_that_cannot_be_read_fails() {
    // Never clean findings (nothing missing, nothing bypassing) for rules nobody could read.
    let r = match decide(&pod("", SIDECAR), None).unwrap() {
        PodPlan::Redirect(r) => r,
        PodPlan::Skip(why) => panic!("{why}"),
    };
    let e = inspect(&r, GONE, &nft_conf(), &no_env).unwrap_err();
    assert!(e.to_string().contains(GONE), "{e}");
}
