//! Repair in place ends the connections opened while a pod's rules were missing (root): a pod wired by
//! `ptp` and redirected by ADD, a pause process in its cgroup, a stand-in proxy listening on 15001 in it
//! and a server on the node. One connection goes through the proxy while the rules are there; the rules
//! are flushed and a second connection goes straight to the server (the gap); then the standalone agent's
//! audit finds the pod `missing` and repairs it in place. The gap's connection is ended (the application
//! reads a reset), the proxy's goes on, and the Event and the counter say how many were ended.

use crate::support::e2e::*;
use crate::support::repair::{metric, scrape, wait_until, Agent, Pause, PodCgroup};
use crate::support::*;
use istio_cni::json;
use std::io::{ErrorKind, Read, Write};
use std::net::SocketAddr;
use std::time::Duration;

fn gap_ended(text: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix("istio_cni_repair_gap_connections_total{result=\"ended\"} "))
        .map_or(0, |v| v.trim().parse().unwrap())
}

#[test]
fn audit_repair_ends_the_connections_opened_while_the_rules_were_missing() {
    if !require_root() {
        return;
    }
    let node = Node::new(88);
    node.record_backend("nft");
    let pod = node.pod("victim", "", "", false);
    pod.add().assert_success();
    let cgroup = PodCgroup::new(&pod.uid);
    let pause = Pause::start(&pod.ns);
    cgroup.add(pause.pid());

    let proxy = listen_in(&pod.ns.path(), "0.0.0.0:15001".parse().unwrap(), false);
    let server = listen_in(&node.ns.path(), "0.0.0.0:9090".parse().unwrap(), false);
    let dst: SocketAddr = format!("10.252.{}.1:9090", node.idx()).parse().unwrap();

    // Through the proxy, while the rules are there.
    let mut through = connect_from(&pod.ns.path(), dst, None).expect("connect through the proxy");
    let mut at_proxy = accept_within(&proxy).expect("the redirected connection reaches 15001");
    assert_eq!(original_dst(&at_proxy), dst);

    // The gap: the jumps into our chains deleted (the nat table stays, so conntrack tracks what follows;
    // a flush deletes iptables-nft's empty base chains, and a connection opened untracked is reset by
    // itself at its next packet once the rules are back), a connection straight to the server.
    pod.ns.exec_ok(&[
        "sh",
        "-c",
        "iptables-nft -t nat -D OUTPUT -j ISTIO_OUTPUT && \
         iptables-nft -t nat -D PREROUTING -p tcp -j ISTIO_INBOUND",
    ]);
    let mut gap = connect_from(&pod.ns.path(), dst, None).expect("connect during the gap");
    let _at_server = accept_within(&server).expect("the gap's connection reaches the server");
    assert!(accept_within_short(&proxy).is_none());

    let agent = Agent::start(&node, &["--audit-interval=1s"], &[]);
    // The repair is counted once it is done, its connections from the gap ended with it.
    let ok = wait_until(120, || {
        metric(&scrape(agent.port), "repair", "success") == 1
    });
    assert!(
        ok,
        "no repair; metrics:\n{}\nlog:\n{}",
        scrape(agent.port),
        agent.log()
    );

    // The gap's connection is ended at its next packet: the application reads a reset (or the end).
    gap.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = gap.write_all(b"x");
    let mut b = [0u8; 1];
    match gap.read(&mut b) {
        Ok(0) => {}
        Err(e) if e.kind() == ErrorKind::ConnectionReset => {}
        other => panic!("the gap's connection still runs past the proxy: {other:?}"),
    }
    // The proxy's connection goes on, both ways.
    through.write_all(b"y").unwrap();
    at_proxy
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    at_proxy.read_exact(&mut b).unwrap();
    assert_eq!(&b, b"y");
    at_proxy.write_all(b"z").unwrap();
    through
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    through.read_exact(&mut b).unwrap();
    assert_eq!(&b, b"z");

    let m = scrape(agent.port);
    assert_eq!(gap_ended(&m), 1, "only the gap's connection: {m}");
    assert!(
        !m.contains("istio_cni_repair_gap_connections_total{result=\"left_open\"}"),
        "{m}"
    );
    let ev: Vec<_> = node
        .srv
        .events()
        .into_iter()
        .filter(|e| json::str_of(e, "reason") == Some("RedirectGapConnections"))
        .collect();
    assert_eq!(ev.len(), 1, "{:?}", node.srv.events());
    let msg = json::str_of(&ev[0], "message").unwrap_or_default();
    assert!(
        msg.contains("1 connections opened while the rules were missing ended"),
        "{msg}"
    );
}
