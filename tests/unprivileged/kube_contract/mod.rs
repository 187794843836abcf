//! The Kubernetes behaviours our code relies on, written once and run against both the API double
//! (`cargo test --test unprivileged kube_contract`) and a real kube-apiserver (`scripts/test.d/cluster`
//! runs this binary with `KUBE_CONTRACT_*` set: [`target`]). What a double alone can
//! do (hang, 503, a stalled watch, Retry-After) stays in the double's own tests. Each case goes through our
//! client (`istio_cni::kube`) and our request builders, as the agents do.

mod reads;
mod target;
mod watches;
mod writes;

use std::collections::BTreeSet;

use istio_cni::json::{self, Object};
use istio_cni::kube::{EventKind, ListParams, WatchEvent, WatchParams};

use crate::support::kube::name_of;
use target::{meta_str, Target};

fn names(items: &[Object]) -> BTreeSet<String> {
    items.iter().map(name_of).collect()
}

fn set(v: &[&str]) -> BTreeSet<String> {
    v.iter().map(|s| s.to_string()).collect()
}

fn status_of(body: &[u8]) -> Object {
    json::parse_object(&String::from_utf8_lossy(body), "status").unwrap()
}

fn rv(o: &Object) -> String {
    meta_str(o, "resourceVersion").unwrap_or("").to_string()
}

/// Pods on `node` across all namespaces, as the node agent lists them.
fn on_node(node: &str) -> ListParams {
    ListParams {
        field_selector: Some(format!("spec.nodeName={node}")),
        ..Default::default()
    }
}

fn node_watch(t: &Target, node: &str, rv: Option<String>, timeout: u32) -> WatchParams {
    WatchParams {
        field_selector: Some(format!("spec.nodeName={node}")),
        resource_version: rv,
        allow_bookmarks: true,
        timeout_seconds: Some(timeout),
        namespace: Some(t.ns.clone()),
        ..Default::default()
    }
}

/// The next event that is not a BOOKMARK.
fn next_change(w: &mut istio_cni::kube::WatchStream) -> WatchEvent {
    loop {
        let ev = w.next().expect("the watch ended").expect("watch error");
        if ev.kind != EventKind::Bookmark {
            return ev;
        }
    }
}
