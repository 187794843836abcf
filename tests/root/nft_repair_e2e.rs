//! Repair in place in nftables mode (root): the agent with `NATIVE_NFTABLES=true` repairs a race victim
//! through the same code path as ADD (no chroot, no host binary), over netlink; afterwards istio-validation
//! passes and the pod holds exactly the nftables tables a twin pod got from ADD, and no iptables rules.

use crate::support::e2e::*;
use crate::support::*;
use std::process::{Command, Stdio};

const BROKEN_STATUS: &str = r#"{"status":{"initContainerStatuses":[{"name":"istio-validation",
  "state":{"waiting":{"reason":"CrashLoopBackOff"}},
  "lastState":{"terminated":{"exitCode":126,"reason":"Error"}},"ready":false,"restartCount":1,"image":"","imageID":""}]}}"#;

fn validation_in(ns: &Netns) -> std::process::Output {
    ns.exec(&[
        "setpriv",
        "--reuid",
        "1337",
        "--regid",
        "1337",
        "--clear-groups",
        crate::support::repair::BIN,
        "istio-validation",
        "--native-nftables",
        "--probe-timeout",
        "1s",
    ])
}

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
    let _pause = Command::new("ip")
        .args(["netns", "exec", pod.ns.name(), "sleep", "3600"])
        .stdin(Stdio::null())
        .spawn()
        .map(PauseGuard)
        .expect("start the pause process");
    node.srv
        .patch_pod("default", "victim", BROKEN_STATUS)
        .unwrap();
    let before = validation_in(&pod.ns);
    assert_eq!(
        before.status.code(),
        Some(126),
        "{}",
        crate::support::repair::show(&before)
    );

    let run = node.dir.join("run");
    let port = crate::support::repair::free_port();
    let log = node.dir.join("agent.log");
    let mut agent = Command::new(crate::support::repair::BIN)
        .args([
            "istio-cni-repair",
            &format!(
                "--kubeconfig={}",
                run.join("istio-cni-kubeconfig").display()
            ),
            "--repair-node-name=node1",
            "--repair-repair-pods=true",
            "--host-proc=/proc",
            &format!("--cni-agent-run-dir={}", run.display()),
            &format!("--monitoring-port={port}"),
        ])
        .env_clear()
        .env("PATH", PLUGIN_PATH_ENV)
        .env("RUST_LOG", "debug")
        .env("NATIVE_NFTABLES", "true")
        .stdout(Stdio::null())
        .stderr(Stdio::from(std::fs::File::create(&log).unwrap()))
        .spawn()
        .unwrap();
    let log_text = || std::fs::read_to_string(&log).unwrap_or_default();
    let repaired = crate::support::repair::wait_until(60, || {
        crate::support::repair::metric(&crate::support::repair::scrape(port), "repair", "success")
            == 1
    });
    let _ = agent.kill();
    let _ = agent.wait();
    assert!(repaired, "no repair counted; agent log:\n{}", log_text());
    assert!(log_text().contains("nftables"), "{}", log_text());

    let after = validation_in(&pod.ns);
    assert_eq!(
        after.status.code(),
        Some(0),
        "{}\n{}",
        crate::support::repair::show(&after),
        log_text()
    );

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

struct PauseGuard(std::process::Child);

impl Drop for PauseGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
