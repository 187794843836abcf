//! The conf dir as a pod sees it (issue 23 M4): a bind mount of the host's directory, in the installer's
//! own mount namespace (`unshare --mount`, gone with the process). When the host directory is removed and
//! recreated, the mount keeps showing the deleted one: the runtime reads the new directory, which the
//! installer can never see again. It must say so on `/healthz` (503, an error line) and then exit, so the
//! kubelet restarts it with a fresh mount, instead of waiting, not ready, forever behind a 200.

use crate::support::install::node::*;
use crate::support::install::*;
use crate::support::require_root;
use nix::sys::signal::Signal;
use std::fs;
use std::time::{Duration, Instant};

#[test]
fn a_removed_host_conf_dir_behind_a_bind_mount_exits_and_the_restart_installs() {
    if !require_root() {
        return;
    }
    let n = Node::new("bindmount");
    let host = n.root.join("host-net.d");
    fs::create_dir_all(&host).unwrap();
    fs::write(host.join("10-ptp.conflist"), list_text("ptp-net", "ptp")).unwrap();
    let env = n.env(&[]);
    let mut p = start(&n, &host, &env, "stderr");
    poll_until("ready through the bind mount", LONG, || n.ready());
    assert_eq!(get(n.health, "/healthz").map(|r| r.0), Some(200));
    assert_eq!(
        entries_at(&host.join("10-ptp.conflist")),
        1,
        "written through the mount"
    );
    // The host's directory is replaced (an operator's rm -rf and mkdir, a config-management run).
    let t0 = Instant::now();
    fs::remove_dir_all(&host).unwrap();
    fs::create_dir(&host).unwrap();
    fs::write(host.join("10-ptp.conflist"), list_text("ptp-net", "ptp")).unwrap();
    poll_until("/healthz 503", Duration::from_secs(30), || {
        get(n.health, "/healthz").is_some_and(|r| r.0 == 503)
    });
    eprintln!(
        "host conf dir replaced behind a bind mount: /healthz 503 after {:?}",
        t0.elapsed()
    );
    assert!(n.not_ready());
    assert!(
        p.stderr().contains("still shows the deleted directory"),
        "{}",
        p.stderr()
    );
    // Nothing in the process can ever see the new directory: it exits (upstream's chart has no liveness
    // probe), and the restarted container, mounted afresh, installs into the directory the runtime reads.
    let st = p.wait_exit(Duration::from_secs(40));
    assert!(!st.success(), "exits with an error:\n{}", p.stderr());
    assert!(
        p.stderr()
            .contains("exiting, so the container is restarted"),
        "{}",
        p.stderr()
    );
    eprintln!("host conf dir replaced: exited after {:?}", t0.elapsed());
    let mut p = start(&n, &host, &env, "stderr2");
    poll_until(
        "the restarted installer writes into the new directory",
        LONG,
        || n.ready() && entries_at(&host.join("10-ptp.conflist")) == 1,
    );
    p.signal(Signal::SIGTERM);
    assert!(p.wait_exit(LONG).success(), "{}", p.stderr());
}

/// The installer in a mount namespace of its own with `host` bind-mounted on the node's conf dir.
fn start(n: &Node, host: &std::path::Path, env: &[(String, String)], log: &str) -> Proc {
    let stderr = n.root.join(log);
    let mut cmd = std::process::Command::new("unshare");
    cmd.args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg(r#"mount --bind "$1" "$2" && exec "$3" install-cni"#)
        .arg("sh")
        .arg(host)
        .arg(&n.conf)
        .arg(binary())
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("RUST_LOG", "info")
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdout(std::process::Stdio::null())
        .stderr(fs::File::create(&stderr).unwrap());
    Proc {
        child: cmd.spawn().unwrap(),
        stderr_path: stderr,
    }
}

/// A file the runtime falls back to that we fail to write (here: a mount point in the installer's mount
/// namespace, so the rename over it fails with EBUSY) is not one whose content cannot take our entry:
/// before, the I/O failure marked it unmergeable and the check skipped it, so /readyz said 200 while the
/// fallback lacked our entry for as long as its content stayed the same. Now the check keeps finding it
/// without our entry: not ready, and the reinstall tries again.
#[test]
fn a_fallback_we_fail_to_write_keeps_us_not_ready() {
    if !require_root() {
        return;
    }
    let n = Node::new("fallback-busy");
    n.write("10-ptp.conflist", &list_text("ptp-net", "ptp"));
    n.write("20-bridge.conflist", &list_text("bridge-net", "bridge"));
    let fallback = n.conf.join("20-bridge.conflist");
    let stderr = n.root.join("stderr");
    let mut cmd = std::process::Command::new("unshare");
    cmd.args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg(r#"mount --bind "$1" "$1" && exec "$2" install-cni"#)
        .arg("sh")
        .arg(&fallback)
        .arg(binary())
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("RUST_LOG", "info")
        .envs(n.env(&[]).iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdout(std::process::Stdio::null())
        .stderr(fs::File::create(&stderr).unwrap());
    let mut p = Proc {
        child: cmd.spawn().unwrap(),
        stderr_path: stderr,
    };
    poll_until(
        "the check names the fallback without our entry",
        LONG,
        || p.stderr().contains("20-bridge.conflist lacks our entry"),
    );
    assert!(
        p.stderr().contains("could not add our entry to"),
        "{}",
        p.stderr()
    );
    assert!(n.not_ready(), "{}", p.stderr());
    assert_eq!(entries_at(&n.conf.join("10-ptp.conflist")), 1);
    assert_eq!(entries_at(&fallback), 0);
    p.signal(Signal::SIGTERM);
    assert!(p.wait_exit(LONG).success(), "{}", p.stderr());
}
