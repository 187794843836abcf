//! Repair in place in nftables mode (root): the agent with `NATIVE_NFTABLES=true` repairs a race victim
//! through the same code path as ADD (no chroot, no host binary), over netlink; afterwards istio-validation
//! passes and the pod holds exactly the nftables tables a twin pod got from ADD, and no iptables rules.

use crate::support::e2e::*;
use crate::support::repair::{
    assert_validation_passes, validation_in, Agent, Pause, PodCgroup, BROKEN_STATUS,
};
use crate::support::*;

/// Our tables as `nft list` prints them, counters removed.
fn tables(ns: &Netns) -> String {
    let mut out = String::new();
    for t in ["istio-proxy-nat", "istio-proxy-mangle", "istio-proxy-raw"] {
        let o = ns.exec(&["nft", "list", "table", "inet", t]);
        let text = String::from_utf8_lossy(&o.stdout);
        for l in text.lines() {
            let l = match l.find("counter packets") {
                Some(i) => {
                    let tail: Vec<&str> = l[i..].split_whitespace().skip(5).collect();
                    format!("{}counter {}", &l[..i], tail.join(" "))
                }
                None => l.to_string(),
            };
            out.push_str(&l);
            out.push('\n');
        }
    }
    out
}

#[test]
fn nftables_race_victim_is_repaired_in_place() {
    if !require_root() {
        return;
    }
    let node = Node::new(57);
    let pod = node.pod("victim", "", "", false);
    // Its process in its cgroup, where the kubelet puts it: the only way its namespace is known.
    let cgroup = PodCgroup::new(&pod.uid);
    let pause = Pause::start(&pod.ns);
    cgroup.add(pause.pid());
    node.srv
        .patch_pod("default", "victim", BROKEN_STATUS)
        .unwrap();
    let before = validation_in(&pod.ns, true);
    assert_eq!(
        before.status.code(),
        Some(126),
        "{}",
        crate::support::repair::show(&before)
    );

    let mut agent = Agent::start(&node, &[], &[("NATIVE_NFTABLES", "true")]);
    let repaired = agent.wait_repaired();
    agent.stop();
    let log_text = || agent.log();
    assert!(repaired, "no repair counted; agent log:\n{}", log_text());
    assert!(log_text().contains("nftables"), "{}", log_text());

    assert_validation_passes(&pod.ns, true, &log_text());

    let twin = node.pod("twin", "", "", false).with_native_nftables();
    twin.add().assert_success();
    let (ours, add) = (tables(&pod.ns), tables(&twin.ns));
    assert!(ours.contains("chain istio-output"), "{ours}");
    assert_eq!(ours, add, "repaired pod vs pod set up by ADD");
    assert!(
        !pod.save("iptables-save").contains("ISTIO"),
        "iptables rules in nftables mode"
    );
    assert!(!node.dir.join("run/iptables-backend").exists());
}
