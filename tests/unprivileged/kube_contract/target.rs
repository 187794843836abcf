//! Where the Kubernetes contract (`kube_contract`) runs: the API double (default), or a real kube-apiserver
//! when `KUBE_CONTRACT_KUBECONFIG` names an admin kubeconfig (`scripts/test.d/cluster`). Only the setup
//! differs between the two (creating pods, making a resource version expire, a forbidden identity); every
//! assertion is the contract's, the same for both.
//!
//! Real-server environment: `KUBE_CONTRACT_KUBECONFIG` (admin; a client certificate),
//! `KUBE_CONTRACT_FORBIDDEN_TOKEN` (a token of an identity no RBAC rule grants anything),
//! `KUBE_CONTRACT_EXPIRED_RV` (a pod resourceVersion older than the server's watch cache and etcd's
//! compaction); a case needing one of them fails when it is missing.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use istio_cni::json::{self, Object, Value};
use istio_cni::kube::request::{Method, Request};
use istio_cni::kube::token::TokenSource;
use istio_cni::kube::transport::{Response, Transport};
use istio_cni::kube::{Client, Config, Timeouts};
use kube_double::{Fault, Options, Server};

use crate::support::kube::TempDir;

static SEQ: AtomicU64 = AtomicU64::new(0);

pub const TOTAL: Duration = Duration::from_secs(30);

fn env(k: &str) -> Option<String> {
    std::env::var(k).ok().filter(|v| !v.is_empty())
}

pub struct Target {
    pub double: Option<Server>,
    _dir: TempDir,
    admin: Config,
    /// Our client, with the admin's credentials.
    pub client: Client,
    raw: Transport,
    raw_token: Option<String>,
    /// A namespace of this target's own.
    pub ns: String,
    /// A prefix for node names no kubelet runs (pods bound to them stay as written).
    pub node: String,
}

impl Target {
    pub fn new() -> Target {
        let n = SEQ.fetch_add(1, Ordering::SeqCst);
        let dir = TempDir::new("contract");
        let (double, kc) = match env("KUBE_CONTRACT_KUBECONFIG") {
            Some(kc) => (None, PathBuf::from(kc)),
            None => {
                let srv = Server::start(Options {
                    bookmark_interval: Duration::from_millis(500),
                    ..Options::default()
                })
                .unwrap();
                let kc = dir.join("kubeconfig");
                srv.write_kubeconfig(&kc).unwrap();
                (Some(srv), kc)
            }
        };
        let admin = Config::from_kubeconfig(&kc).unwrap();
        let t = Timeouts {
            connect: Duration::from_secs(5),
            total: TOTAL,
            ..Timeouts::default()
        };
        let client = Client::with_timeouts(admin.clone(), t).unwrap();
        let raw = Transport::new(&admin, t).unwrap();
        let raw_token = double.as_ref().map(Server::token);
        let id = format!("{}-{n}", std::process::id());
        let target = Target {
            ns: if double.is_some() {
                "contract".into()
            } else {
                format!("contract-{id}")
            },
            node: format!("contract-node-{id}"),
            double,
            _dir: dir,
            admin,
            client,
            raw,
            raw_token,
        };
        if target.double.is_none() {
            target.create_namespace();
        }
        target
    }

    /// One raw request with the admin's credentials.
    pub fn raw(
        &self,
        method: Method,
        path: &str,
        body: Option<&str>,
        ct: &'static str,
    ) -> Response {
        let req = Request {
            method,
            path: path.to_string(),
            body: body.map(str::to_string),
            content_type: body.map(|_| ct),
        };
        self.raw
            .send(&req, self.raw_token.as_deref(), TOTAL)
            .unwrap_or_else(|e| panic!("{method:?} {path}: {e}"))
    }

    pub fn raw_send(&self, req: &Request) -> Response {
        self.raw
            .send(req, self.raw_token.as_deref(), TOTAL)
            .unwrap_or_else(|e| panic!("{:?} {}: {e}", req.method, req.path))
    }

    fn create_namespace(&self) {
        let body = format!(
            r#"{{"apiVersion":"v1","kind":"Namespace","metadata":{{"name":"{}"}}}}"#,
            self.ns
        );
        let r = self.raw(
            Method::Post,
            "/api/v1/namespaces",
            Some(&body),
            "application/json",
        );
        assert_eq!(r.code, 201, "{}", String::from_utf8_lossy(&r.body));
        // Pods are admitted once the service-account controller made the namespace's `default` account.
        let sa = format!("/api/v1/namespaces/{}/serviceaccounts/default", self.ns);
        let t0 = Instant::now();
        while self.raw(Method::Get, &sa, None, "").code != 200 {
            assert!(t0.elapsed() < Duration::from_secs(60), "no {sa}");
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// A pod as the server stores it. `node` "" leaves it unbound (and no scheduler takes it).
    pub fn create_pod(&self, name: &str, node: &str, labels: &[(&str, &str)]) -> Object {
        let labels: Vec<String> = labels
            .iter()
            .map(|(k, v)| format!(r#""{k}":"{v}""#))
            .collect();
        let bind = if node.is_empty() {
            r#""schedulerName":"contract-no-scheduler","#.to_string()
        } else {
            format!(r#""nodeName":"{node}","#)
        };
        let pod = format!(
            concat!(
                r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"{}","namespace":"{}","labels":{{{}}}}},"#,
                r#""spec":{{{}"automountServiceAccountToken":false,"containers":[{{"name":"istio-proxy","image":"contract.invalid/none"}}]}}}}"#
            ),
            name,
            self.ns,
            labels.join(","),
            bind
        );
        match &self.double {
            Some(srv) => srv.add_pod(&pod).unwrap(),
            None => {
                let path = format!("/api/v1/namespaces/{}/pods", self.ns);
                let r = self.raw(Method::Post, &path, Some(&pod), "application/json");
                assert_eq!(r.code, 201, "{}", String::from_utf8_lossy(&r.body));
                json::parse_object(&String::from_utf8_lossy(&r.body), "pod").unwrap()
            }
        }
    }

    /// A client whose requests authenticate as nobody (a wrong token).
    pub fn unauthenticated_client(&self) -> Client {
        self.client_with_token("contract-not-a-token")
    }

    /// A client of an authenticated identity that RBAC grants nothing (the double: a 403 fault).
    pub fn forbidden_client(&self) -> Client {
        match &self.double {
            Some(srv) => {
                srv.set_fault(Fault::Status(403), None);
                self.client.clone()
            }
            None => self.client_with_token(
                &env("KUBE_CONTRACT_FORBIDDEN_TOKEN")
                    .expect("KUBE_CONTRACT_FORBIDDEN_TOKEN: a token RBAC grants nothing"),
            ),
        }
    }

    fn client_with_token(&self, token: &str) -> Client {
        let cfg = Config {
            client_cert_pem: None,
            client_key_pem: None,
            token: Some(TokenSource::fixed(token.to_string())),
            ..self.admin.clone()
        };
        Client::from_config(cfg).unwrap()
    }

    /// A resourceVersion the server no longer serves watches from (the double: every version so far is
    /// made expired; a real server: `KUBE_CONTRACT_EXPIRED_RV`, made by compacting etcd and restarting
    /// kube-apiserver so its watch cache starts after it).
    pub fn expired_rv(&self) -> String {
        match &self.double {
            Some(srv) => {
                let rv = srv.resource_version().to_string();
                srv.force_gone();
                rv
            }
            None => env("KUBE_CONTRACT_EXPIRED_RV").expect("KUBE_CONTRACT_EXPIRED_RV"),
        }
    }

    /// The core/v1 Events stored in our namespace about `pod`.
    pub fn events_about(&self, pod: &str) -> Vec<Object> {
        let all = match &self.double {
            Some(srv) => srv.events(),
            None => {
                let path = format!(
                    "/api/v1/namespaces/{}/events?fieldSelector=involvedObject.name%3D{pod}",
                    self.ns
                );
                let r = self.raw(Method::Get, &path, None, "");
                assert_eq!(r.code, 200, "{}", String::from_utf8_lossy(&r.body));
                let list = json::parse_object(&String::from_utf8_lossy(&r.body), "events").unwrap();
                json::arr_of(&list, "items")
                    .into_iter()
                    .flatten()
                    .filter_map(|v| match v {
                        Value::Object(o) => Some(o.clone()),
                        _ => None,
                    })
                    .collect()
            }
        };
        all.into_iter()
            .filter(|e| {
                json::obj_of(e, "involvedObject").and_then(|o| json::str_of(o, "name")) == Some(pod)
            })
            .collect()
    }

    /// The DaemonSet `name` in our namespace, being deleted (a real server: held by a finalizer of ours,
    /// released when the target is dropped).
    pub fn deleting_daemonset(&self, name: &str) {
        let ds = format!(
            concat!(
                r#"{{"apiVersion":"apps/v1","kind":"DaemonSet","metadata":{{"name":"{name}","namespace":"{ns}","finalizers":["contract.istio.io/hold"]}},"#,
                r#""spec":{{"selector":{{"matchLabels":{{"app":"{name}"}}}},"template":{{"metadata":{{"labels":{{"app":"{name}"}}}},"#,
                r#""spec":{{"nodeSelector":{{"contract.istio.io/none":"none"}},"containers":[{{"name":"c","image":"contract.invalid/none"}}]}}}}}}}}"#
            ),
            name = name,
            ns = self.ns
        );
        match &self.double {
            Some(srv) => {
                srv.add_daemonset(&ds).unwrap();
                assert!(srv.mark_daemonset_deleting(&self.ns, name));
            }
            None => {
                let path = format!("/apis/apps/v1/namespaces/{}/daemonsets", self.ns);
                let r = self.raw(Method::Post, &path, Some(&ds), "application/json");
                assert_eq!(r.code, 201, "{}", String::from_utf8_lossy(&r.body));
                let r = self.raw(Method::Delete, &format!("{path}/{name}"), None, "");
                assert_eq!(r.code, 200, "{}", String::from_utf8_lossy(&r.body));
            }
        }
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        if self.double.is_some() {
            return;
        }
        // Release the finalizers we hold, then the namespace (best effort: the cluster goes down after).
        let path = format!("/apis/apps/v1/namespaces/{}/daemonsets", self.ns);
        if let Ok(r) = self.raw.send(
            &Request {
                method: Method::Get,
                path: path.clone(),
                body: None,
                content_type: None,
            },
            None,
            TOTAL,
        ) {
            let list =
                json::parse_object(&String::from_utf8_lossy(&r.body), "ds").unwrap_or_default();
            for ds in json::arr_of(&list, "items").into_iter().flatten() {
                let Value::Object(ds) = ds else { continue };
                let Some(name) = json::obj_of(ds, "metadata").and_then(|m| json::str_of(m, "name"))
                else {
                    continue;
                };
                let _ = self.raw.send(
                    &Request {
                        method: Method::Patch,
                        path: format!("{path}/{name}"),
                        body: Some(r#"{"metadata":{"finalizers":null}}"#.into()),
                        content_type: Some("application/merge-patch+json"),
                    },
                    None,
                    TOTAL,
                );
            }
        }
        let _ = self.raw.send(
            &Request {
                method: Method::Delete,
                path: format!("/api/v1/namespaces/{}", self.ns),
                body: None,
                content_type: None,
            },
            None,
            TOTAL,
        );
    }
}

pub fn meta_str<'a>(o: &'a Object, k: &str) -> Option<&'a str> {
    json::obj_of(o, "metadata").and_then(|m| json::str_of(m, k))
}
