//! The kube client tests' part of the support tree: pods and clients for the API double.

use std::time::Duration;

use istio_cni::json;
use istio_cni::kube::{Client, Config, Timeouts};
use kube_double::{Options, Server};

pub use super::{b64, TempDir};

pub fn pod_json(ns: &str, name: &str, node: &str) -> String {
    format!(
        r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"{name}","namespace":"{ns}","labels":{{"app":"{name}"}}}},"spec":{{"nodeName":"{node}","containers":[{{"name":"istio-proxy"}}]}}}}"#
    )
}

pub fn start() -> Server {
    Server::start(Options::default()).unwrap()
}

/// A client from the kubeconfig the double writes (our installer's YAML format).
pub fn client(srv: &Server, dir: &TempDir) -> Client {
    let kc = dir.join("kubeconfig");
    srv.write_kubeconfig(&kc).unwrap();
    Client::from_kubeconfig(&kc).unwrap()
}

pub fn fast_client(srv: &Server, dir: &TempDir, total: Duration) -> Client {
    let kc = dir.join("kubeconfig");
    srv.write_kubeconfig(&kc).unwrap();
    let t = Timeouts {
        connect: Duration::from_secs(2),
        total,
        ..Timeouts::default()
    };
    Client::with_timeouts(Config::from_kubeconfig(&kc).unwrap(), t).unwrap()
}

pub fn uid_of(o: &json::Object) -> String {
    json::obj_of(o, "metadata")
        .and_then(|m| json::str_of(m, "uid"))
        .unwrap_or("")
        .to_string()
}

pub fn name_of(o: &json::Object) -> String {
    json::obj_of(o, "metadata")
        .and_then(|m| json::str_of(m, "name"))
        .unwrap_or("")
        .to_string()
}
