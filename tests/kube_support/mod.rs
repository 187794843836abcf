//! Shared helpers for the kube_* integration tests: temp dirs, pods, clients for the API double.
#![allow(dead_code)]

use std::path::PathBuf;
use std::time::Duration;

use istio_cni::json;
use istio_cni::kube::{Client, Config, Timeouts};
use kube_double::{Options, Server};

pub struct TempDir(pub PathBuf);
impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static N: AtomicUsize = AtomicUsize::new(0);
        let p = std::env::temp_dir().join(format!(
            "kube-client-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
    pub fn path(&self, f: &str) -> PathBuf {
        self.0.join(f)
    }
}
impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

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
    let kc = dir.path("kubeconfig");
    srv.write_kubeconfig(&kc).unwrap();
    Client::from_kubeconfig(&kc).unwrap()
}

pub fn fast_client(srv: &Server, dir: &TempDir, total: Duration) -> Client {
    let kc = dir.path("kubeconfig");
    srv.write_kubeconfig(&kc).unwrap();
    let t = Timeouts {
        connect: Duration::from_secs(2),
        total,
    };
    Client::with_timeouts(Config::from_kubeconfig(&kc).unwrap(), t).unwrap()
}

pub fn name_of(o: &json::Object) -> String {
    json::obj_of(o, "metadata")
        .and_then(|m| json::str_of(m, "name"))
        .unwrap_or("")
        .to_string()
}

pub fn b64(data: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in data.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |acc, (i, b)| acc | (*b as u32) << (16 - 8 * i));
        for i in 0..4 {
            out.push(if i <= chunk.len() {
                A[(n >> (18 - 6 * i) & 63) as usize] as char
            } else {
                '='
            });
        }
    }
    out
}
