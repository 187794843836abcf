//! Traffic through rules we wrote ourselves, on both x_tables backends (root): for iptables-nft and
//! iptables-legacy recorded as the node's backend, an app connection lands on 15001 and inbound on 15006
//! with their original destinations (and the bypasses reach where they should), TPROXY delivers inbound
//! transparently with its mark and route, a dual-stack pod's IPv6 is captured, and DNS (TCP and UDP to
//! port 53) lands on 15053 while the proxy's own DNS reaches the server.

use crate::support::e2e::*;
use crate::support::traffic::*;
use crate::support::*;
use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

const BACKENDS: [&str; 2] = ["nft", "legacy"];

/// Node `base + i` for backend `i`, with that backend recorded.
fn node(base: u8, i: usize) -> Node {
    let node = Node::new(base + i as u8);
    node.record_backend(BACKENDS[i]);
    node
}

/// The rules are in the recorded backend (and not the other one).
fn assert_in(pod: &Pod, backend: &str) {
    let other = if backend == "nft" { "legacy" } else { "nft" };
    assert!(pod
        .save(&format!("iptables-{backend}-save"))
        .contains("-A ISTIO_OUTPUT"));
    assert!(!pod
        .save(&format!("iptables-{other}-save"))
        .contains("ISTIO"));
}

#[test]
fn redirect_mode_captures_and_honours_bypasses_on_both_backends() {
    if !require_root() {
        return;
    }
    for (i, b) in BACKENDS.iter().enumerate() {
        let node = node(94, i);
        let pod = node.pod("app", &bypass_annotations(&node), "", false);
        pod.add().assert_success();
        assert_in(&pod, b);
        assert_captures_and_bypasses(&node, &pod);
    }
}

#[test]
fn tproxy_mark_and_route_deliver_inbound_on_both_backends() {
    if !require_root() {
        return;
    }
    for (i, b) in BACKENDS.iter().enumerate() {
        let node = node(96, i);
        let ann = r#""sidecar.istio.io/interceptionMode": "TPROXY""#;
        let pod = node.pod("tp", ann, "", false);
        pod.add().assert_success();
        let mangle = pod.save(&format!("iptables-{b}-save"));
        assert!(
            mangle.contains("--tproxy-mark 0x539/0xffffffff"),
            "{b}: {mangle}"
        );
        assert!(pod
            .ns
            .exec_ok(&["ip", "rule"])
            .contains("fwmark 0x539 lookup 133"));
        assert_tproxy_traffic(&node, &pod);
    }
}

#[test]
fn dual_stack_ipv6_is_captured_on_both_backends() {
    if !require_root() {
        return;
    }
    for i in 0..BACKENDS.len() {
        let node = node(98, i);
        let env = r#"{"name": "ISTIO_DUAL_STACK", "value": "true"}"#;
        let pod = node.pod("v6", "", env, true);
        pod.add().assert_success();
        assert_ipv6_traffic(&node, &pod);
    }
}

/// A UDP socket bound to `addr` inside `ns` (bounded reads).
fn udp_in(ns: &str, addr: SocketAddr) -> UdpSocket {
    istio_cni::netns::run_in(ns, move || {
        let s = UdpSocket::bind(addr).map_err(|e| istio_cni::Error::io("bind udp", e))?;
        s.set_read_timeout(Some(Duration::from_secs(5)))
            .map_err(|e| istio_cni::Error::io("timeout", e))?;
        Ok(s)
    })
    .unwrap()
}

/// Sends `what` from a fresh UDP socket inside `ns` (as `uid` when given) to `to`.
fn send_from(ns: &str, to: SocketAddr, uid: Option<u32>, what: &'static [u8]) {
    istio_cni::netns::run_in(ns, move || {
        if let Some(u) = uid {
            nix::unistd::setfsgid(nix::unistd::Gid::from_raw(u));
            nix::unistd::setfsuid(nix::unistd::Uid::from_raw(u));
        }
        let s = UdpSocket::bind("0.0.0.0:0").map_err(|e| istio_cni::Error::io("bind", e))?;
        s.send_to(what, to)
            .map_err(|e| istio_cni::Error::io("send", e))?;
        Ok(())
    })
    .unwrap();
}

fn received(s: &UdpSocket) -> Option<Vec<u8>> {
    let mut buf = [0u8; 64];
    s.recv_from(&mut buf).ok().map(|(n, _)| buf[..n].to_vec())
}

#[test]
fn dns_lands_on_15053_on_both_backends() {
    if !require_root() {
        return;
    }
    for (i, b) in BACKENDS.iter().enumerate() {
        let node = node(100, i);
        let env = r#"{"name": "ISTIO_META_DNS_CAPTURE", "value": "true"}"#;
        let pod = node.pod("dns", "", env, false);
        pod.add().assert_success();
        let raw = pod.save(&format!("iptables-{b}-save"));
        assert!(raw.contains("-j CT --zone 2"), "{b}: {raw}");
        let server: SocketAddr = format!("10.252.{}.1:53", node.idx()).parse().unwrap();

        // UDP: the app's query lands on the proxy's 15053 in the pod.
        let agent = udp_in(&pod.ns.path(), "0.0.0.0:15053".parse().unwrap());
        let upstream = udp_in(&node.ns.path(), server);
        send_from(&pod.ns.path(), server, None, b"app-query");
        assert_eq!(
            received(&agent).as_deref(),
            Some(&b"app-query"[..]),
            "{b}: UDP DNS not on 15053"
        );
        // The proxy's own query (uid 1337) goes to the server.
        send_from(&pod.ns.path(), server, Some(1337), b"proxy-query");
        assert_eq!(
            received(&upstream).as_deref(),
            Some(&b"proxy-query"[..]),
            "{b}: proxy DNS captured"
        );

        // TCP: the app's connection to :53 lands on 15053 with its original destination.
        let tcp_agent = listen_in(&pod.ns.path(), "0.0.0.0:15053".parse().unwrap(), false);
        let _c = connect_from(&pod.ns.path(), server, None).expect("tcp dns connect");
        let got = accept_within(&tcp_agent).expect("TCP DNS did not reach 15053");
        assert_eq!(original_dst(&got), server, "{b}");
    }
}
