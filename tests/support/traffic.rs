//! The sidecar traffic a redirected pod must show, whichever rule backend programmed it (both in
//! tests/root/redirect_e2e.rs): the same connections, the same verdicts.
//! Destinations are the node's addresses 10.252.<idx>.1 and .2 and fd00:252:<idx>::1 ([`Node::new`]).

use super::e2e::{
    accept_within, accept_within_short, connect_from, listen_in, original_dst, Node, Pod,
};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// The annotations [`assert_captures_and_bypasses`] expects: an excluded outbound CIDR (the node's `.2`),
/// outbound port 9091 and inbound port 8081.
pub fn bypass_annotations(node: &Node) -> String {
    format!(
        r#""traffic.sidecar.istio.io/excludeOutboundIPRanges": "10.252.{}.2/32",
        "traffic.sidecar.istio.io/excludeOutboundPorts": "9091",
        "traffic.sidecar.istio.io/excludeInboundPorts": "8081""#,
        node.idx()
    )
}

/// REDIRECT mode with [`bypass_annotations`]: an app connection lands on 15001 with its original
/// destination; the proxy's own traffic (uid 1337), the excluded CIDR and the excluded port reach the node;
/// inbound lands on 15006 with its original destination, and the excluded inbound port reaches the app.
pub fn assert_captures_and_bypasses(node: &Node, pod: &Pod) {
    let idx = node.idx();
    let envoy_out = listen_in(&pod.ns.path(), "0.0.0.0:15001".parse().unwrap(), false);
    let envoy_in = listen_in(&pod.ns.path(), "0.0.0.0:15006".parse().unwrap(), false);
    let node_9090 = listen_in(&node.ns.path(), "0.0.0.0:9090".parse().unwrap(), false);
    let node_9091 = listen_in(&node.ns.path(), "0.0.0.0:9091".parse().unwrap(), false);

    let dst: SocketAddr = format!("10.252.{idx}.1:9090").parse().unwrap();
    let _c = connect_from(&pod.ns.path(), dst, None).expect("app connect");
    let got = accept_within(&envoy_out).expect("outbound connection did not reach 15001");
    assert_eq!(original_dst(&got), dst);
    assert!(accept_within_short(&node_9090).is_none());

    let _c = connect_from(&pod.ns.path(), dst, Some(1337)).expect("proxy connect");
    let got = accept_within(&node_9090).expect("uid 1337 traffic should reach the node directly");
    assert_eq!(got.local_addr().unwrap(), dst);
    assert!(accept_within_short(&envoy_out).is_none());

    let excluded: SocketAddr = format!("10.252.{idx}.2:9090").parse().unwrap();
    let _c = connect_from(&pod.ns.path(), excluded, None).expect("connect to excluded CIDR");
    let got = accept_within(&node_9090).expect("excluded CIDR was captured");
    assert_eq!(got.local_addr().unwrap(), excluded);
    let port: SocketAddr = format!("10.252.{idx}.1:9091").parse().unwrap();
    let _c = connect_from(&pod.ns.path(), port, None).expect("connect to excluded port");
    let got = accept_within(&node_9091).expect("excluded port was captured");
    assert_eq!(got.local_addr().unwrap(), port);
    assert!(accept_within_short(&envoy_out).is_none());

    let app_port = SocketAddr::new(pod.ip4, 8080);
    let _c = connect_from(&node.ns.path(), app_port, None).expect("inbound connect");
    let got = accept_within(&envoy_in).expect("inbound connection did not reach 15006");
    assert_eq!(original_dst(&got), app_port);
    let app_8081 = listen_in(&pod.ns.path(), SocketAddr::new(pod.ip4, 8081), false);
    let _c =
        connect_from(&node.ns.path(), SocketAddr::new(pod.ip4, 8081), None).expect("inbound 8081");
    assert!(
        accept_within(&app_8081).is_some(),
        "excluded inbound port was captured"
    );
    assert!(accept_within_short(&envoy_in).is_none());
}

/// TPROXY mode: inbound reaches the transparent 15006 keeping the original destination as the socket's
/// local address and the client's source; outbound still lands on 15001.
pub fn assert_tproxy_traffic(node: &Node, pod: &Pod) {
    let envoy_in = listen_in(&pod.ns.path(), "0.0.0.0:15006".parse().unwrap(), true);
    let envoy_out = listen_in(&pod.ns.path(), "0.0.0.0:15001".parse().unwrap(), false);
    let app_port = SocketAddr::new(pod.ip4, 8080);
    let _c = connect_from(&node.ns.path(), app_port, None).expect("inbound connect");
    let got =
        accept_within(&envoy_in).expect("inbound connection did not reach the transparent 15006");
    assert_eq!(got.local_addr().unwrap(), app_port);
    assert_eq!(got.peer_addr().unwrap().ip(), node.gw4(pod));

    let dst: SocketAddr = format!("10.252.{}.1:9090", node.idx()).parse().unwrap();
    let _c = connect_from(&pod.ns.path(), dst, None).expect("app connect");
    let got = accept_within(&envoy_out).expect("outbound not captured");
    assert_eq!(original_dst(&got), dst);
}

/// A dual-stack pod: `::6/128` on `lo`, IPv6 outbound on 15001 and inbound on 15006, each with its
/// original destination.
pub fn assert_ipv6_traffic(node: &Node, pod: &Pod) {
    let ip6 = pod.ip6.expect("pod has an IPv6 address");
    let lo = pod.ns.exec_ok(&["ip", "-6", "addr", "show", "dev", "lo"]);
    assert!(lo.contains("::6/128"), "{lo}");

    let envoy_out = listen_in(&pod.ns.path(), "[::]:15001".parse().unwrap(), false);
    let envoy_in = listen_in(&pod.ns.path(), "[::]:15006".parse().unwrap(), false);
    let dst: SocketAddr = format!("[fd00:252:{}::1]:9090", node.idx())
        .parse()
        .unwrap();
    let _c = connect_from(&pod.ns.path(), dst, None).expect("v6 app connect");
    let got = accept_within(&envoy_out).expect("IPv6 outbound did not reach 15001");
    assert_eq!(original_dst(&got), dst);

    let app_port = SocketAddr::new(IpAddr::V6(ip6), 8080);
    let _c = connect_from(&node.ns.path(), app_port, None).expect("v6 inbound connect");
    let got = accept_within(&envoy_in).expect("IPv6 inbound did not reach 15006");
    assert_eq!(original_dst(&got), app_port);
}

/// Waits (bounded) for a connection on either listener: `Some(0)` / `Some(1)` names which got it.
fn accept_either(a: &TcpListener, b: &TcpListener) -> Option<(usize, TcpStream)> {
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        for (i, l) in [a, b].into_iter().enumerate() {
            if let Ok((s, _)) = l.accept() {
                return Some((i, s));
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    None
}

/// Where an app connection from the pod to the node's `10.252.<idx>.1:9090` lands: `true` when captured
/// (on 15001, with its original destination), `false` when it reached the node unredirected.
pub fn outbound_captured(node: &Node, pod: &Pod) -> bool {
    let envoy_out = listen_in(&pod.ns.path(), "0.0.0.0:15001".parse().unwrap(), false);
    let node_9090 = listen_in(&node.ns.path(), "0.0.0.0:9090".parse().unwrap(), false);
    let dst: SocketAddr = format!("10.252.{}.1:9090", node.idx()).parse().unwrap();
    let _c = connect_from(&pod.ns.path(), dst, None).expect("app connect");
    match accept_either(&envoy_out, &node_9090) {
        Some((0, s)) => {
            assert_eq!(original_dst(&s), dst);
            true
        }
        Some((_, s)) => {
            assert_eq!(s.local_addr().unwrap(), dst);
            false
        }
        None => panic!("the outbound connection to {dst} landed nowhere"),
    }
}

/// Where a connection from the node to the pod's `:8080` lands: `true` when captured (on 15006, with its
/// original destination), `false` when it reached the app unredirected.
pub fn inbound_captured(node: &Node, pod: &Pod) -> bool {
    inbound_captured_in(node, pod, false)
}

/// [`inbound_captured`] in REDIRECT mode or, with `tproxy`, TPROXY mode: the proxy's 15006 is transparent
/// and the original destination is the accepted socket's own address.
pub fn inbound_captured_in(node: &Node, pod: &Pod, tproxy: bool) -> bool {
    let app_port = SocketAddr::new(pod.ip4, 8080);
    let envoy_in = listen_in(&pod.ns.path(), "0.0.0.0:15006".parse().unwrap(), tproxy);
    let app = listen_in(&pod.ns.path(), app_port, false);
    let _c = connect_from(&node.ns.path(), app_port, None).expect("inbound connect");
    match accept_either(&envoy_in, &app) {
        Some((0, s)) => {
            let dst = if tproxy {
                s.local_addr().unwrap()
            } else {
                original_dst(&s)
            };
            assert_eq!(dst, app_port);
            true
        }
        Some(_) => false,
        None => panic!("the inbound connection to {app_port} landed nowhere"),
    }
}

/// A re-ADD succeeds with `outcome` in its decision log (`Converged` or `AlreadyInPlace`), and only that.
pub fn assert_re_add(pod: &Pod, outcome: &str) {
    let out = pod.add();
    out.assert_success();
    let other = if outcome == "Converged" {
        "AlreadyInPlace"
    } else {
        "Converged"
    };
    assert!(
        out.stderr.contains(outcome) && !out.stderr.contains(other),
        "re-ADD should be {outcome}: {out}"
    );
}

/// One way around the redirect: shell commands run in the pod's namespace, the direction it opens, what
/// CHECK and re-ADD must name, and how to take it away again.
pub struct Bypass<'a> {
    pub what: &'a str,
    pub setup: Vec<String>,
    pub inbound: bool,
    pub names: Vec<String>,
    pub undo: Vec<String>,
}

/// Runs each command with `sh -c` in the pod's namespace.
pub fn sh_in(pod: &Pod, cmds: &[String]) {
    for c in cmds {
        pod.ns.exec_ok(&["sh", "-c", c]);
    }
}

/// Whether traffic in that direction lands on the proxy.
pub fn captured(node: &Node, pod: &Pod, inbound: bool) -> bool {
    if inbound {
        inbound_captured(node, pod)
    } else {
        outbound_captured(node, pod)
    }
}

/// The premise (traffic goes past the redirect), then CHECK and re-ADD fail naming the bypass, then it is
/// undone and everything is green and captured again.
pub fn assert_named_and_refused(node: &Node, pod: &Pod, b: &Bypass) {
    assert!(
        captured(node, pod, b.inbound),
        "{}: not captured before",
        b.what
    );
    sh_in(pod, &b.setup);
    assert!(
        !captured(node, pod, b.inbound),
        "{}: the bypass should let traffic past the redirect (the test's premise)",
        b.what
    );
    let msg = pod.run("CHECK").assert_cni_error(103);
    for n in &b.names {
        assert!(
            msg.contains(n.as_str()),
            "{}: CHECK does not name {n:?}: {msg}",
            b.what
        );
    }
    let msg = pod.add().assert_cni_error(103);
    for n in &b.names {
        assert!(
            msg.contains(n.as_str()),
            "{}: re-ADD does not name {n:?}: {msg}",
            b.what
        );
    }
    sh_in(pod, &b.undo);
    pod.run("CHECK").assert_success();
    assert_re_add(pod, "AlreadyInPlace");
    assert!(
        captured(node, pod, b.inbound),
        "{}: not captured after undo",
        b.what
    );
}

pub fn cmds(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}
