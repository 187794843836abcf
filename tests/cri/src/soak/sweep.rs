//! Cleaning up after a soak that did not end normally: everything a soak's node makes is named after its
//! process id (`/tmp/chart-<pid>-<n>`, netns `chartnode-<pid>-<n>`), so it can be removed from outside the
//! node's own `Drop`: on SIGINT/SIGTERM/SIGHUP (or the parent's death) the soak sweeps its own pid and exits;
//! after `run` returns or panics it sweeps again (a no-op when `Drop` did it); at start it sweeps every
//! earlier soak whose marker (`/tmp/istio-cni-soak-<pid>`) names a process that is gone (a soak SIGKILLed).
//!
//! A sweep: containerd SIGKILLed (its command line names the node's config), every runc container under the
//! node's runc root deleted with force (the agent and pause processes), the shims naming the node's socket
//! and the mount-namespace holder (whose mounts name the node's dir) SIGKILLed, every mount below the dir
//! unmounted, the dir removed, the node's network namespaces deleted.

use super::leaks::files as entries;
use crate::util::{run, unmount_below};
use std::path::{Path, PathBuf};

/// The marker a running soak keeps: its existence with a dead pid means leftovers to sweep.
pub fn marker(pid: u32) -> PathBuf {
    std::env::temp_dir().join(format!("istio-cni-soak-{pid}"))
}

/// The runtime's processes (by executable: containerd, its shims, runc, and nsenter, which execs containerd)
/// whose command line contains one of `needles`.
fn runtime_pids(needles: &[String]) -> Vec<i32> {
    const EXES: [&str; 4] = ["containerd", "containerd-shim-runc-v2", "runc", "nsenter"];
    pids()
        .into_iter()
        .filter(|p| {
            let exe = std::fs::read_link(format!("/proc/{p}/exe")).unwrap_or_default();
            let name = exe.file_name().map(|n| n.to_string_lossy().into_owned());
            name.is_some_and(|n| EXES.contains(&n.as_str()))
        })
        .filter(|p| {
            std::fs::read(format!("/proc/{p}/cmdline")).is_ok_and(|b| {
                let c = String::from_utf8_lossy(&b);
                needles.iter().any(|n| c.contains(n.as_str()))
            })
        })
        .collect()
}

/// Processes in a mount namespace other than this process's whose mounts name `dir` (the node's holder,
/// its containers, a `runc init` left behind). Never one in this process's own mount view: there the node's
/// mounts are not seen, and everything else running on the host is.
fn node_view_pids(dir: &str) -> Vec<i32> {
    let Ok(ours) = std::fs::read_link("/proc/self/ns/mnt") else {
        return Vec::new();
    };
    let needle = format!("{dir}/");
    pids()
        .into_iter()
        .filter(|p| {
            std::fs::read_link(format!("/proc/{p}/ns/mnt")).is_ok_and(|ns| ns != ours)
                && std::fs::read(format!("/proc/{p}/mountinfo"))
                    .is_ok_and(|b| String::from_utf8_lossy(&b).contains(&needle))
        })
        .collect()
}

/// Every process but this one.
fn pids() -> Vec<i32> {
    let me = std::process::id() as i32;
    entries(Path::new("/proc"))
        .into_iter()
        .filter_map(|n| n.parse::<i32>().ok())
        .filter(|&p| p != me && p != 1)
        .collect()
}

fn kill_all(pids: &[i32]) {
    for &p in pids {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(p),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

/// Removes everything the soak (or chart test) with process id `pid` made; returns what it removed.
pub fn sweep(pid: u32) -> Vec<String> {
    let mut done = Vec::new();
    let tmp = std::env::temp_dir();
    let prefix = format!("chart-{pid}-");
    for name in entries(&tmp).into_iter().filter(|n| n.starts_with(&prefix)) {
        let dir = tmp.join(&name);
        let d = dir.to_string_lossy().into_owned();
        // containerd first (so it restarts nothing), then the containers; then, until none is left (a
        // `runc create` cut off mid-way still forks its `runc init`), the runtime's processes naming the
        // node (shims, runc) and those in the node's mount view (the holder, containers).
        kill_all(&runtime_pids(&[format!("{d}/config.toml")]));
        let root = format!("{d}/runc/k8s.io");
        let out = run("runc", &["--root", &root, "list", "-q"]);
        for id in String::from_utf8_lossy(&out.stdout).split_whitespace() {
            let _ = run("runc", &["--root", &root, "delete", "--force", id]);
        }
        let named = [
            format!("{d}/config.toml"),
            format!("{d}/c.sock"),
            format!("{d}/runc/"),
        ];
        for _ in 0..20 {
            let mut left = runtime_pids(&named);
            left.extend(node_view_pids(&d));
            if left.is_empty() {
                break;
            }
            kill_all(&left);
            std::thread::sleep(std::time::Duration::from_millis(250));
        }
        unmount_below(&dir);
        let _ = std::fs::remove_dir_all(&dir);
        done.push(d);
    }
    let out = run("ip", &["netns", "list"]);
    for ns in String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with(&format!("chartnode-{pid}-")))
    {
        let _ = run("ip", &["netns", "del", ns]);
        done.push(format!("netns {ns}"));
    }
    let _ = std::fs::remove_file(marker(pid));
    done
}

/// Sweeps the leftovers of earlier soaks that died without cleaning up (their marker names a dead pid).
pub fn sweep_dead_soaks() {
    for name in entries(&std::env::temp_dir()) {
        let Some(pid) = name
            .strip_prefix("istio-cni-soak-")
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == std::process::id() || Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        for d in sweep(pid) {
            println!("soak: removed the leftovers of an earlier soak (pid {pid}): {d}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::run_ok;

    /// What a SIGKILLed soak leaves (its dir with a mount below it, a process naming the dir, a process in a
    /// mount namespace that names it, its network namespace, its marker) is all gone after the next soak's
    /// start-up sweep; a live soak's marker is left alone.
    #[test]
    fn a_dead_soaks_leftovers_are_swept() {
        if !crate::util::require_root() {
            return;
        }
        // A pid no process has: above the kernel's pid_max.
        let max: u32 = std::fs::read_to_string("/proc/sys/kernel/pid_max")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(4_194_304);
        let dead = max + 1 + std::process::id() % 1000;
        let dir = std::env::temp_dir().join(format!("chart-{dead}-0"));
        let d = dir.display().to_string();
        std::fs::create_dir_all(dir.join("mnt")).unwrap();
        // A "shim": the runtime's executable name, naming the node's socket (bash waiting on a pipe: no child).
        let shim = dir.join("containerd-shim-runc-v2");
        std::fs::copy("/bin/bash", &shim).unwrap();
        let named = std::process::Command::new(&shim)
            .args(["-c", "read -r -t 1000 x", &format!("{d}/c.sock")])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // A "holder": its own mount namespace with a mount under the node's dir (nothing is mounted in ours).
        let holder = std::process::Command::new("unshare")
            .args(["--mount", "--propagation", "private", "sh", "-c"])
            .arg(format!(
                "mount -t tmpfs soak-sweep-test {d}/mnt && exec sleep 1000"
            ))
            .spawn()
            .unwrap();
        let ns = format!("chartnode-{dead}-1");
        run_ok("ip", &["netns", "add", &ns]);
        std::fs::write(marker(dead), "").unwrap();
        std::fs::write(marker(std::process::id()), "").unwrap();
        // The holder's bind mount is in place before the sweep looks.
        let t = std::time::Instant::now();
        while !node_view_pids(&d).contains(&(holder.id() as i32)) {
            assert!(t.elapsed().as_secs() < 10, "the holder never mounted");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }

        sweep_dead_soaks();

        let reaped = |mut c: std::process::Child| {
            let t = std::time::Instant::now();
            loop {
                if c.try_wait().unwrap().is_some() {
                    return true;
                }
                if t.elapsed().as_secs() > 10 {
                    let _ = c.kill();
                    return false;
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        };
        let left_dir = dir.exists();
        let left_ns = String::from_utf8_lossy(&run("ip", &["netns", "list"]).stdout).contains(&ns);
        let left_marker = marker(dead).exists();
        let live_kept = marker(std::process::id()).exists();
        let _ = std::fs::remove_file(marker(std::process::id()));
        assert!(reaped(named), "the process naming the dir survived");
        assert!(
            reaped(holder),
            "the process in the node's mount view survived"
        );
        assert!(!left_dir, "{} left", dir.display());
        assert!(!left_ns, "netns {ns} left");
        assert!(!left_marker, "the dead soak's marker left");
        assert!(live_kept, "a live soak's marker was swept");
    }
}
