//! A private containerd 1.6 (Debian's package): own root, state, sockets and config under the test's
//! directory, runc with the cgroupfs driver, `restrict_oom_score_adj = true` (these VMs refuse the sandbox's
//! negative oom_score_adj), the native snapshotter, its own CNI bin and conf dirs. Started inside the node's
//! network namespace (nsenter --net only), so the CNI plugins it runs wire pods there, not on the host.

use crate::util::{run, run_ok};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub struct Containerd {
    pub dir: PathBuf,
    pub netns: String,
    /// A process whose mount namespace containerd runs in (the chart scenarios' node view), if any.
    pub mount_ns_of: Option<u32>,
    /// The running process (behind a lock: a node shared between tasks restarts it through `&self`).
    child: Mutex<Option<Child>>,
}

impl Containerd {
    pub fn socket(&self) -> PathBuf {
        self.dir.join("c.sock")
    }
    pub fn config_path(&self) -> PathBuf {
        self.dir.join("config.toml")
    }
    pub fn log_path(&self) -> PathBuf {
        self.dir.join("containerd.log")
    }

    /// Writes the configuration and starts containerd in the network namespace file `netns`.
    pub fn start(
        dir: &Path,
        netns: &str,
        sandbox_image: &str,
        cni_bin: &Path,
        cni_conf: &Path,
    ) -> Containerd {
        Containerd::start_with(dir, netns, None, sandbox_image, cni_bin, cni_conf, false)
    }

    /// Like [`Containerd::start`], in the mount namespace of process `mount_ns_of` when given;
    /// `netns_under_state`: the pods' network namespaces are mounted under
    /// `<dir>/state/netns` instead of the host's shared `/var/run/netns` (containerd's
    /// `netns_mounts_under_state_dir`), so that every one this containerd made, leaked ones included, can be
    /// told from other runtimes' (the soak's leak count).
    pub fn start_with(
        dir: &Path,
        netns: &str,
        mount_ns_of: Option<u32>,
        sandbox_image: &str,
        cni_bin: &Path,
        cni_conf: &Path,
        netns_under_state: bool,
    ) -> Containerd {
        let d = dir.display();
        let conf = format!(
            r#"version = 2
root = "{d}/root"
state = "{d}/state"
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.aufs", "io.containerd.tracing.processor.v1.otlp"]
[grpc]
  address = "{d}/c.sock"
[ttrpc]
  address = "{d}/c.sock.ttrpc"
[debug]
  level = "info"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{sandbox_image}"
  restrict_oom_score_adj = true
  disable_apparmor = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  netns_mounts_under_state_dir = {netns_under_state}
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "native"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "{d}/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{}"
    conf_dir = "{}"
    max_conf_num = 1
"#,
            cni_bin.display(),
            cni_conf.display()
        );
        std::fs::write(dir.join("config.toml"), conf).expect("write containerd config");
        let c = Containerd {
            dir: dir.to_path_buf(),
            netns: netns.to_string(),
            mount_ns_of,
            child: Mutex::new(None),
        };
        c.spawn();
        c
    }

    fn child(&self) -> std::sync::MutexGuard<'_, Option<Child>> {
        self.child.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// containerd's process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child().as_ref().map(Child::id)
    }

    fn spawn(&self) {
        // Being swept (the soak interrupted): starting containerd again would outlive the sweep.
        while crate::util::STOPPING.load(std::sync::atomic::Ordering::SeqCst) {
            std::thread::sleep(Duration::from_secs(1));
        }
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .expect("containerd log");
        let mut cmd = Command::new("nsenter");
        if let Some(pid) = self.mount_ns_of {
            // --root too: entering a mount namespace resets the root to that namespace's, which is not ours
            // when the tests run chrooted (a fresh Debian root); the holder kept our root.
            cmd.arg(format!("--mount=/proc/{pid}/ns/mnt"))
                .arg(format!("--root=/proc/{pid}/root"));
        }
        let child = cmd
            .arg(format!("--net={}", self.netns))
            .arg("containerd")
            .arg("--config")
            .arg(self.config_path())
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start containerd (apt install containerd runc)");
        *self.child() = Some(child);
        self.wait_ready();
    }

    /// Waits until the socket answers `ctr version` (30 s at most).
    fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if self.socket().exists() {
                let o = run(
                    "ctr",
                    &["--address", &self.socket().to_string_lossy(), "version"],
                );
                if o.status.success() {
                    return;
                }
            }
            if let Some(Ok(Some(st))) = self.child().as_mut().map(|c| c.try_wait()) {
                panic!("containerd exited ({st}):\n{}", self.log());
            }
            if Instant::now() > deadline {
                panic!("containerd not ready after 30 s:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// `ctr -n k8s.io images import` with the CRI's snapshotter.
    pub fn import(&self, archive: &Path) {
        run_ok(
            "ctr",
            &[
                "--address",
                &self.socket().to_string_lossy(),
                "-n",
                "k8s.io",
                "images",
                "import",
                "--snapshotter",
                "native",
                &archive.to_string_lossy(),
            ],
        );
    }

    /// SIGTERM and wait (the shims and pods stay, as on a real node).
    pub fn stop(&self) {
        let taken = self.child().take();
        if let Some(mut c) = taken {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(c.id() as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
            let deadline = Instant::now() + Duration::from_secs(20);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = c.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Stops and starts it again with the same configuration and state.
    pub fn restart(&self) {
        self.stop();
        self.spawn();
    }

    /// A crash: SIGKILL (whatever CRI calls it was serving are cut off mid-way; the shims, pods and any CNI
    /// plugin it was running stay), then started again with the same configuration and state, as its
    /// service manager would.
    pub fn kill_and_restart(&self) {
        let taken = self.child().take();
        if let Some(mut c) = taken {
            let _ = c.kill();
            let _ = c.wait();
        }
        self.spawn();
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        self.stop();
        // Shims left by a failed test: theirs are the ones whose command line names our socket.
        let sock = self.socket().to_string_lossy().into_owned();
        let out = run("pgrep", &["-f", "containerd-shim-runc-v2"]);
        for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            if String::from_utf8_lossy(&cmdline).contains(&sock) {
                if let Ok(p) = pid.parse::<i32>() {
                    let _ = nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(p),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                }
            }
        }
    }
}
