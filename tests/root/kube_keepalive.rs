//! A watch whose API server falls silent without a FIN or reset ever reaching us (its packets dropped from
//! then on, as when a firewall's or NAT's state is lost) ends by TCP keepalive, not at the watch's own
//! timeout. The API double and the client run in a namespace the test made, on its loopback; the drop is an
//! iptables rule there.

use std::sync::mpsc;
use std::time::Duration;

use istio_cni::kube::tcp::Keepalive;
use istio_cni::kube::{Client, Config, ListParams, PodSource, Timeouts, WatchParams};
use kube_double::{Options, Server};

use crate::support::kube::pod_json;
use crate::support::{require_root, Netns, TempDir};

#[test]
fn a_watch_whose_server_falls_silent_without_a_fin_ends_by_keepalive() {
    if !require_root() {
        return;
    }
    let ns = Netns::new("kalive");
    let path = ns.path();
    let (port_tx, port_rx) = mpsc::channel();
    let (cut_tx, cut_rx) = mpsc::channel::<()>();
    let watcher = std::thread::spawn(move || {
        let f = std::fs::File::open(&path).unwrap();
        // This thread, and the double's threads it starts, live in the test's namespace.
        nix::sched::setns(f, nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
        let srv = Server::start(Options {
            bookmark_interval: Duration::from_secs(3600),
            ..Options::default()
        })
        .unwrap();
        srv.add_pod(&pod_json("ns", "a", "node-a")).unwrap();
        let dir = TempDir::new("kalive");
        let kc = dir.join("kubeconfig");
        srv.write_kubeconfig(&kc).unwrap();
        let fast = Timeouts {
            keepalive: Some(Keepalive {
                idle: Duration::from_secs(1),
                interval: Duration::from_secs(1),
                count: 2,
            }),
            ..Timeouts::default()
        };
        let c = Client::with_timeouts(Config::from_kubeconfig(&kc).unwrap(), fast).unwrap();
        let list = c.list_pods(&ListParams::default()).unwrap();
        // No bookmarks: the server has nothing to say, as on a quiet cluster. Its own end: 60 s (+30 s).
        let mut w = c
            .watch_pods(&WatchParams {
                resource_version: Some(list.resource_version),
                timeout_seconds: Some(60),
                ..WatchParams::default()
            })
            .unwrap();
        port_tx.send(srv.addr().port()).unwrap();
        cut_rx.recv().unwrap();
        let end = w
            .next()
            .map(|r| r.map(|ev| ev.kind).map_err(|e| e.to_string()));
        drop(srv);
        end
    });
    let port = port_rx.recv().unwrap().to_string();
    // From now on the server's packets (its answers to our probes included) never arrive.
    ns.exec_ok(&[
        "iptables", "-w", "5", "-I", "INPUT", "-p", "tcp", "--sport", &port, "-j", "DROP",
    ]);
    cut_tx.send(()).unwrap();
    let end = watcher.join().unwrap();
    match &end {
        Some(Err(e)) => assert!(
            e.contains("stopped answering"),
            "the watch ended, but not by keepalive: {e}"
        ),
        other => panic!("the watch did not end with an error: {other:?}"),
    }
}
