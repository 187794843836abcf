//! Conntrack expectations take traffic past our redirect with no rule changed (root, real traffic). A
//! permanent expectation made through ctnetlink (on a connection given the built-in tftp helper) for TCP
//! from anywhere to the pod's 8080:
//! - TPROXY mode: our mangle inbound chain sends `RELATED,ESTABLISHED` packets to the divert chain (mark,
//!   accept) before the TPROXY rule, so every new inbound connection to the app, now RELATED, reaches it
//!   past the proxy;
//! - REDIRECT mode: the nat chain would still see such a connection's first packet, but with the NAT
//!   function `nat-follow-master` the connection is bound when conntrack creates it and no nat chain runs
//!   on it, our REDIRECT to 15006 neither.
//!
//! CHECK, re-ADD and the audit (which reads what CHECK reads) name the expectation; once it is gone both
//! pass and inbound is captured again.

use crate::redirect_bypass_e2e::runs;
use crate::support::audit::{one_shot, service_account, Audited};
use crate::support::e2e::*;
use crate::support::traffic::{assert_re_add, inbound_captured_in};
use crate::support::*;
use istio_cni::nftables::encode::{message, Attrs};
use istio_cni::nftables::socket::Socket;
use std::net::{IpAddr, SocketAddr};
use Backend::*;

const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_ACK: u16 = 0x4;
const NLM_F_EXCL: u16 = 0x200;
const NLM_F_CREATE: u16 = 0x400;
/// `NFNL_SUBSYS_CTNETLINK` and `NFNL_SUBSYS_CTNETLINK_EXP`, shifted into a message type.
const CT: u16 = 1 << 8;
const EXP: u16 = 2 << 8;
const MSG_NEW: u16 = 0;
const MSG_DELETE: u16 = 2;
const AF_INET: u8 = 2;
const TPROXY: &str = r#""sidecar.istio.io/interceptionMode": "TPROXY""#;

/// A conntrack tuple's attributes: `CTA_TUPLE_IP` (v4 source, destination), `CTA_TUPLE_PROTO`.
fn tuple(a: &mut Attrs, ty: u16, proto: u8, src: SocketAddr, dst: SocketAddr) {
    let v4 = |s: SocketAddr| match s.ip() {
        IpAddr::V4(v) => v.octets(),
        IpAddr::V6(_) => panic!("IPv4 only"),
    };
    a.nest(ty, |t| {
        t.nest(1, |i| {
            i.put(1, &v4(src)).put(2, &v4(dst));
        });
        t.nest(2, |p| {
            p.put(1, &[proto])
                .put(2, &src.port().to_be_bytes())
                .put(3, &dst.port().to_be_bytes());
        });
    });
}

/// Sends one ctnetlink request in the namespace at `ns` and waits for its acknowledgement.
fn ctnetlink(ns: &str, what: &'static str, req: Vec<u8>) {
    istio_cni::netns::run_in(ns, move || {
        let mut s = Socket::open()?;
        s.dump(what, &req, &mut |_| Ok(()))
    })
    .unwrap_or_else(|e| panic!("{what}: {e}"));
}

/// In the pod's namespace: a UDP connection the pod "has" to the node's tftp port, made through
/// ctnetlink with the built-in tftp helper and a long timeout, and on it a permanent expectation of TCP
/// from any source to `to`, with `nat-follow-master` (destination `to`) when `nat`.
fn expect_tcp_to(pod: &Pod, node: &Node, to: SocketAddr, nat: bool) {
    let (p, n): (SocketAddr, SocketAddr) = (
        SocketAddr::new(pod.ip4, 5555),
        format!("10.252.{}.1:69", node.idx()).parse().unwrap(),
    );
    let mut a = Attrs::default();
    tuple(&mut a, 1, 17, p, n);
    tuple(&mut a, 2, 17, n, p);
    a.be32(7, 3600);
    a.nest(5, |h| {
        h.put(1, b"tftp\0");
    });
    let flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL;
    let req = message(CT | MSG_NEW, flags, 1, AF_INET, 0, &a.buf);
    ctnetlink(&pod.ns.path(), "create the master connection", req);
    let any: SocketAddr = "0.0.0.0:0".parse().unwrap();
    let mut e = Attrs::default();
    tuple(&mut e, 1, 17, p, n);
    tuple(&mut e, 2, 6, any, to);
    tuple(&mut e, 3, 6, any, "255.255.255.255:65535".parse().unwrap());
    // CTA_EXPECT_TIMEOUT, CTA_EXPECT_FLAGS (NF_CT_EXPECT_PERMANENT: not used up by one connection).
    e.be32(4, 3600).be32(8, 1);
    if nat {
        // CTA_EXPECT_FN; CTA_EXPECT_NAT: direction reply (the master's original source is the pod), the
        // port from the tuple's source.
        e.put(11, b"nat-follow-master\0");
        e.nest(10, |x| {
            x.be32(1, 1);
            tuple(x, 2, 6, to, to);
        });
    }
    let req = message(EXP | MSG_NEW, flags, 2, AF_INET, 0, &e.buf);
    ctnetlink(&pod.ns.path(), "create the expectation", req);
}

/// A TPROXY pod with a plain expectation, or a REDIRECT pod with a `nat-follow-master` one (`tproxy`), on
/// each of `b`'s backends: the premise, then CHECK and re-ADD name it; gone, both pass.
fn an_expectation_fails_check_and_re_add(b: Backend, tproxy: bool, [nft, ipt]: [u8; 2]) {
    if !require_root() {
        return;
    }
    for (idx, ours) in runs(b, nft, ipt) {
        let node = Node::new(idx);
        if let Some(r) = ours {
            node.record_backend(r);
        }
        let ann = if tproxy { TPROXY } else { "" };
        let pod = b.pod(&node, "related", ann, "", false);
        pod.add().assert_success();
        let mode = format!("{} tproxy={tproxy}", ours.unwrap_or("nftables"));
        assert!(
            inbound_captured_in(&node, &pod, tproxy),
            "{mode}: captured before"
        );
        expect_tcp_to(&pod, &node, SocketAddr::new(pod.ip4, 8080), !tproxy);
        assert!(
            !inbound_captured_in(&node, &pod, tproxy),
            "{mode}: an expected connection should reach the app past the proxy (the test's premise)"
        );
        let how = if tproxy { "" } else { ", nat-follow-master" };
        let want = format!(
            "conntrack (IPv4): expectation tcp 0.0.0.0:0 -> {}:8080 (helper tftp, permanent{how})",
            pod.ip4
        );
        let msg = pod.run("CHECK").assert_cni_error(103);
        assert!(
            msg.contains(&want),
            "{mode}: CHECK does not name {want:?}: {msg}"
        );
        let msg = pod.add().assert_cni_error(103);
        assert!(
            msg.contains(&want),
            "{mode}: re-ADD does not name {want:?}: {msg}"
        );
        // No attributes: every expectation of the family goes.
        let flush = message(
            EXP | MSG_DELETE,
            NLM_F_REQUEST | NLM_F_ACK,
            3,
            AF_INET,
            0,
            &[],
        );
        ctnetlink(&pod.ns.path(), "delete the expectations", flush);
        pod.run("CHECK").assert_success();
        assert_re_add(&pod, "AlreadyInPlace");
        assert!(
            inbound_captured_in(&node, &pod, tproxy),
            "{mode}: captured again"
        );
    }
}

#[test]
fn iptables_tproxy_mode_names_a_conntrack_expectation_that_takes_inbound_past_the_proxy() {
    an_expectation_fails_check_and_re_add(Iptables, true, [150, 151])
}

#[test]
fn nftables_tproxy_mode_names_a_conntrack_expectation_that_takes_inbound_past_the_proxy() {
    an_expectation_fails_check_and_re_add(Nftables, true, [150, 151])
}

#[test]
fn iptables_redirect_mode_names_a_nat_expectation_that_takes_inbound_past_the_proxy() {
    an_expectation_fails_check_and_re_add(Iptables, false, [156, 157])
}

#[test]
fn nftables_redirect_mode_names_a_nat_expectation_that_takes_inbound_past_the_proxy() {
    an_expectation_fails_check_and_re_add(Nftables, false, [156, 157])
}

/// The audit reads what CHECK reads: of two TPROXY pods, the one with the expectation is bypassed, the
/// expectation named; the other is redirected.
#[test]
fn audit_names_a_conntrack_expectation_in_tproxy_mode() {
    if !require_root() {
        return;
    }
    let node = Node::new(153);
    node.record_backend("nft");
    let related = Audited::annotated(&node, "default", "related", TPROXY, false);
    expect_tcp_to(
        &related.pod,
        &node,
        SocketAddr::new(related.pod.ip4, 8080),
        false,
    );
    let _ok = Audited::annotated(&node, "default", "ok", TPROXY, false);
    let out = one_shot(&node, &service_account(&node), &[], false);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let show = format!("{text}\nstderr:\n{}", String::from_utf8_lossy(&out.stderr));
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{show}");
    assert_eq!(lines[0], "default/ok redirected", "{show}");
    assert!(
        lines[1].starts_with("default/related bypassed ")
            && lines[1].contains("conntrack (IPv4): expectation tcp 0.0.0.0:0 -> "),
        "{show}"
    );
    assert_eq!(out.status.code(), Some(1), "{show}");
}
