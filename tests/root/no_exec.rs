//! iptables mode starts no process (root): ADD, CHECK and DEL of a sidecar pod, on both x_tables backends,
//! run under `strace -f -e trace=execve` show the plugin's own exec and nothing else. The same pod with
//! IPTABLES_NODE_BINARIES recorded shows the node's iptables-restore (the trace can see an exec). And the
//! ADD's one API request sets no TCP keepalive (the agents' connections do; the plugin's has a deadline).

use crate::support::e2e::*;
use crate::support::*;

/// The programs `strace -f -e trace=execve` saw started, the plugin itself first.
fn execs(pod: &Pod, node: &Node, command: &str) -> (PluginOutput, Vec<String>) {
    let trace = node.dir.write(format!("strace-{command}"), "");
    let mut cmd = std::process::Command::new("strace");
    cmd.args(["-f", "-qq", "-e", "trace=execve", "-e", "signal=none", "-o"])
        .arg(&trace)
        .arg(node.plugins.istio_cni());
    let out = pod.run_wrapped(cmd, command);
    let text = std::fs::read_to_string(&trace).unwrap();
    let programs = text
        .lines()
        .filter(|l| l.contains("execve(") && !l.contains("= -1 ENOENT"))
        .filter_map(|l| l.split('"').nth(1).map(str::to_string))
        .collect();
    (out, programs)
}

#[test]
fn add_check_del_start_no_process_on_either_backend() {
    if !require_root() {
        return;
    }
    for (idx, backend) in [(91, "nft"), (92, "legacy")] {
        let node = Node::new(idx);
        node.record_backend(backend);
        let pod = node.pod("noexec", "", "", false);
        for command in ["ADD", "CHECK", "DEL"] {
            let (out, programs) = execs(&pod, &node, command);
            out.assert_success();
            assert_eq!(
                programs,
                vec![node.plugins.istio_cni().display().to_string()],
                "{backend} {command} started a process"
            );
            if command == "ADD" {
                // And the rules are there, as the node's own tool prints them.
                let saved = pod.save(&format!("iptables-{backend}-save"));
                assert!(saved.contains("-A ISTIO_OUTPUT"), "{backend}: {saved}");
            }
        }
    }
    // The control: with the node's binaries asked for, the trace sees them.
    let node = Node::new(93);
    node.record_backend("nft");
    node.record_node_binaries();
    let pod = node.pod("binaries", "", "", false);
    let (out, programs) = execs(&pod, &node, "ADD");
    out.assert_success();
    assert!(
        programs.iter().any(|p| p.ends_with("iptables-nft-restore")),
        "{programs:?}"
    );
}

#[test]
fn the_plugins_api_connection_sets_no_keepalive() {
    if !require_root() {
        return;
    }
    let node = Node::new(94);
    node.record_backend("nft");
    let pod = node.pod("nokeepalive", "", "", false);
    let trace = node.dir.write("strace-sockets", "");
    let mut cmd = std::process::Command::new("strace");
    cmd.args([
        "-f",
        "-qq",
        "-e",
        "trace=connect,setsockopt",
        "-e",
        "signal=none",
        "-o",
    ])
    .arg(&trace)
    .arg(node.plugins.istio_cni());
    pod.run_wrapped(cmd, "ADD").assert_success();
    let text = std::fs::read_to_string(&trace).unwrap();
    // The control: the pod came from the API double (its port connected to).
    let port = format!("sin_port=htons({})", node.srv.addr().port());
    assert!(
        text.contains(&port),
        "no connection to the API double:\n{text}"
    );
    assert!(
        !text.contains("SO_KEEPALIVE"),
        "keepalive on the ADD path:\n{text}"
    );
}
