//! What TPROXY mode's inbound redirect does not depend on (root, real traffic), so CHECK rightly passes
//! over it: once our mangle PREROUTING rule has TPROXY'd a connection's first packet to 15006, the kernel
//! has assigned it the proxy's listening socket, and the pod's own address is local whatever the packet's
//! mark (the `local` table is looked up first). So x_tables rules that run after it and that CHECK counts
//! harmless there (`MARK` and `CONNMARK` clearing the marks in nat PREROUTING, mangle and filter INPUT), and
//! even the `ip rule fwmark 1337 lookup 133` and its `local default` route deleted (CHECK does not read
//! them; a re-ADD puts them back), leave inbound on the proxy with its original destination. Were delivery to
//! hang on the mark, the connection would reach the app listening on that port.

use crate::redirect_bypass_e2e::tool;
use crate::support::e2e::*;
use crate::support::traffic::{assert_re_add, inbound_captured_in};
use crate::support::*;

/// Rules after our mangle PREROUTING capture that clear the marks our policy routing and our `CONNMARK
/// --restore-mark` read, in the tables each runs in.
const CLEARS: [&str; 4] = [
    "-t nat -A PREROUTING -p tcp -j MARK --set-mark 0",
    "-t nat -A PREROUTING -p tcp -j CONNMARK --set-mark 0",
    "-t mangle -A INPUT -p tcp -j MARK --set-mark 0",
    "-t filter -A INPUT -p tcp -j CONNMARK --set-mark 0",
];

#[test]
fn tproxy_inbound_stays_on_the_proxy_with_its_marks_cleared_and_its_route_deleted() {
    if !require_root() {
        return;
    }
    for (idx, ours) in [(154, "nft"), (155, "legacy")] {
        let node = Node::new(idx);
        node.record_backend(ours);
        let ann = r#""sidecar.istio.io/interceptionMode": "TPROXY""#;
        let pod = node.pod("marks", ann, "", false);
        pod.add().assert_success();
        let mine = tool(ours);
        for r in CLEARS {
            pod.ns.exec_ok(&["sh", "-c", &format!("{mine} {r}")]);
        }
        for c in [
            "ip rule del fwmark 1337 lookup 133",
            "ip route flush table 133",
        ] {
            pod.ns.exec_ok(&["sh", "-c", c]);
        }
        let rules = pod.ns.exec_ok(&["ip", "rule"]);
        assert!(!rules.contains("lookup 133"), "{ours}: {rules}");
        assert!(
            inbound_captured_in(&node, &pod, true),
            "{ours}: inbound reached the app past the proxy"
        );
        let saved = pod
            .ns
            .exec_ok(&[mine.as_str(), "-t", "nat", "-S", "PREROUTING"]);
        assert!(saved.contains("MARK --set-xmark 0x0/0xffffffff"), "{saved}");
        pod.run("CHECK").assert_success();
        assert_re_add(&pod, "AlreadyInPlace");
        let rules = pod.ns.exec_ok(&["ip", "rule"]);
        assert!(
            rules.contains("fwmark 0x539 lookup 133"),
            "{ours}: re-ADD puts the rule back: {rules}"
        );
    }
}
