//! The gap between an agent that left its installation in place at SIGTERM (a rolling update) and the next
//! agent: a pod ADD is redirected while the old pod's token is still accepted, fails closed (401, nothing
//! programmed) once the old pod object is gone and its bound token with it, and is redirected again as soon
//! as the next agent has written its own kubeconfig. Real netns and iptables, the API double with pod-bound
//! tokens, the installer as a process.

use crate::support::e2e::Node;
use crate::support::install::cluster::*;
use crate::support::require_root;
use std::time::Instant;

fn redirected(rules: &str) -> bool {
    rules.contains("-A ISTIO_REDIRECT -p tcp -j REDIRECT --to-ports 15001")
}

#[test]
fn a_pod_created_in_the_gap_is_redirected_or_fails_closed() {
    if !require_root() {
        return;
    }
    let c = Cluster::new("gap");
    let node = Node::new(59);
    // Each agent's token is bound to its pod, as the kubelet's projected tokens are.
    c.api.bind_token("token-a", NS, "istio-cni-node-aaaaa");
    c.api.bind_token("token-b", NS, "istio-cni-node-bbbbb");
    c.set_sa_token("token-a");
    let a = c.start("istio-cni-node-aaaaa", &[]);
    c.wait_ready(&a);
    let (_, log) = c.stop(a);
    c.assert_decision(&log, "replacement", true);

    let add = |name: &str| {
        let pod = node.pod_without_api_object(name).with_agent_run_dir(&c.run);
        c.api
            .add_pod(&Node::pod_object(name, "", "", &[pod.ip4]))
            .unwrap();
        let out = pod.add();
        (out, pod.save("iptables-save"))
    };

    // Old pod object still there (terminating): its token works, the pod is redirected.
    let (out, rules) = add("gap-before-delete");
    out.assert_success();
    assert!(redirected(&rules), "{rules}");

    // The old pod object is deleted: its token is refused, ADD fails at once, nothing is programmed.
    c.api.delete_pod(NS, "istio-cni-node-aaaaa").unwrap();
    let t = Instant::now();
    let (out, rules) = add("gap-after-delete");
    let took = t.elapsed();
    let msg = out.assert_cni_error(101);
    assert!(out.stderr.contains("401") || msg.contains("401"), "{out}");
    assert!(
        !rules.contains("ISTIO"),
        "rules programmed after a failed ADD:\n{rules}"
    );
    println!(
        "gap: ADD with the old pod's token refused failed in {:.1} ms",
        took.as_secs_f64() * 1e3
    );

    // The next agent writes its own kubeconfig: redirected again.
    c.set_sa_token("token-b");
    let b = c.start("istio-cni-node-bbbbb", &[]);
    c.wait_ready(&b);
    let (out, rules) = add("gap-after-next-agent");
    out.assert_success();
    assert!(redirected(&rules), "{rules}");
    drop(b);
}
