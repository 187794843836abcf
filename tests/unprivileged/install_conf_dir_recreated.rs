//! A conf dir removed and recreated (issue 23 M4), with the real installer process, real files and
//! inotify: an operator's `rm -rf /etc/cni/net.d; mkdir ...` (or a rename and a new directory) is watched
//! again and installed into again; a conf dir that can no longer be seen (the path keeps showing the
//! deleted directory, as a bind mount of a removed host directory does) fails `/healthz` with a clear
//! log line, so a liveness probe restarts the container.

use crate::support::install::node::*;
use crate::support::install::*;
use nix::sys::signal::Signal;
use std::fs;
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[test]
fn a_removed_and_recreated_conf_dir_is_installed_into_again() {
    let n = Node::new("rmdir");
    n.write("10-ptp.conflist", &list_text("ptp-net", "ptp"));
    let mut p = n.start(&[]);
    n.settle_ready(&p, "initial");
    // An operator's `rm -rf /etc/cni/net.d; mkdir ...`, then the primary CNI writes its config again.
    fs::remove_dir_all(&n.conf).unwrap();
    poll_until("not ready without a conf dir", LONG, || n.not_ready());
    // Let it settle into waiting (the removal's events all handled) before the directory comes back.
    poll_until("waiting for a primary", LONG, || {
        p.stderr().contains("Waiting for CNI network config file")
    });
    std::thread::sleep(Duration::from_millis(300));
    fs::create_dir(&n.conf).unwrap();
    let t0 = Instant::now();
    n.write("10-ptp.conflist", &list_text("ptp-net", "ptp"));
    n.settle_ready(&p, "after the conf dir was recreated");
    eprintln!(
        "conf dir recreated: ready with our entry after {:?}",
        t0.elapsed()
    );
    assert_eq!(healthz(&n), Some(200));
    // Once more, renamed away instead of removed: the new directory at the path is the one that counts.
    fs::rename(&n.conf, n.root.join("conf.old")).unwrap();
    fs::create_dir(&n.conf).unwrap();
    n.write("10-ptp.conflist", &list_text("ptp-net", "ptp"));
    n.settle_ready(&p, "after the conf dir was replaced");
    p.signal(Signal::SIGTERM);
    assert!(p.wait_exit(LONG).success(), "{}", p.stderr());
}

fn healthz(n: &Node) -> Option<u16> {
    get(n.health, "/healthz").map(|(c, _)| c)
}

#[test]
fn a_conf_dir_that_shows_only_its_deleted_self_fails_healthz_then_exits() {
    let n = Node::new("detached");
    n.write("10-ptp.conflist", &list_text("ptp-net", "ptp"));
    // The installer sees the conf dir through a path that keeps resolving to the directory after it is
    // removed (a process's cwd here; a bind mount of a removed host directory in a pod): a directory
    // recreated at the real path is invisible there, so only a restart helps.
    let mut holder = std::process::Command::new("sleep")
        .arg("600")
        .current_dir(&n.conf)
        .spawn()
        .unwrap();
    let seen = PathBuf::from(format!("/proc/{}/cwd", holder.id()));
    let env = n.env(&[("MOUNTED_CNI_NET_DIR", &seen.display().to_string())]);
    let mut p = spawn_installer(&env, &[], &n.root.join("stderr"));
    poll_until("ready", LONG, || n.ready());
    assert_eq!(healthz(&n), Some(200));
    let t0 = Instant::now();
    fs::remove_dir_all(&n.conf).unwrap();
    fs::create_dir(&n.conf).unwrap();
    poll_until("healthz fails", Duration::from_secs(30), || {
        healthz(&n) == Some(503)
    });
    eprintln!("deleted conf dir: /healthz 503 after {:?}", t0.elapsed());
    assert!(n.not_ready());
    assert!(
        p.stderr().contains("deleted"),
        "a clear log line:\n{}",
        p.stderr()
    );
    // It can never see the new directory: it exits so that a restart (a fresh mount) can.
    let st = p.wait_exit(Duration::from_secs(40));
    assert!(!st.success(), "exits with an error:\n{}", p.stderr());
    assert!(
        p.stderr()
            .contains("exiting, so the container is restarted"),
        "{}",
        p.stderr()
    );
    let _ = holder.kill();
    let _ = holder.wait();
}

#[test]
fn the_restart_exit_for_a_deleted_bin_dir_keeps_our_entry_in_the_live_conf_dir() {
    // The bin dir is the one that shows only its deleted self; the conf dir the runtime reads is fine.
    // The exit asks for a restart (a replacement by definition): our entry must stay, or pods start
    // unredirected until the restarted container installs again (no API here, so the SIGTERM rule
    // would have said "clean up").
    let n = Node::new("deadbin");
    n.write("10-ptp.conflist", &list_text("ptp-net", "ptp"));
    let bin = n.root.join("bin");
    let mut holder = std::process::Command::new("sleep")
        .arg("600")
        .current_dir(&bin)
        .spawn()
        .unwrap();
    let seen = PathBuf::from(format!("/proc/{}/cwd", holder.id()));
    let env = n.env(&[("CNI_BIN_DIR", &seen.display().to_string())]);
    let mut p = spawn_installer(&env, &[], &n.root.join("stderr"));
    n.settle_ready(&p, "initial");
    assert_eq!(n.entries("10-ptp.conflist"), 1);
    // The installer copies its binary back in as it sees it go: retry until the directory is gone.
    poll_until("bin dir removed", LONG, || fs::remove_dir_all(&bin).is_ok());
    fs::create_dir(&bin).unwrap();
    let st = p.wait_exit(Duration::from_secs(40));
    assert!(!st.success(), "exits with an error:\n{}", p.stderr());
    assert!(
        p.stderr()
            .contains("configuration, binary and kubeconfig kept"),
        "{}",
        p.stderr()
    );
    assert_eq!(
        n.entries("10-ptp.conflist"),
        1,
        "the live conf dir lost our entry at the restart exit:\n{}",
        p.stderr()
    );
    assert!(
        n.root.join("run/istio-cni-kubeconfig").exists(),
        "kubeconfig removed"
    );
    let _ = holder.kill();
    let _ = holder.wait();
}
