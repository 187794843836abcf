//! Commands, temporary directories, unique names and the network namespace helpers.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// Set when the process is being torn down from outside the test's flow (the soak interrupted by a signal):
/// nothing starts containerd again meanwhile.
pub static STOPPING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// A small number unique in this process (names, subnets).
pub fn next_index() -> usize {
    COUNTER.fetch_add(1, Ordering::Relaxed)
}

/// `<prefix>-<pid>-<n>`.
pub fn unique_name(prefix: &str) -> String {
    format!("{prefix}-{}-{}", std::process::id(), next_index())
}

/// The repository root (tests/cri/../..).
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The root crate's command helpers (tests/support/cmd.rs), under this crate's names.
pub use crate::cmd::{sh as run, sh_ok as run_ok};

/// True when root; otherwise skips (false) with `ISTIO_CNI_SKIP_ROOT_TESTS=1`, else panics.
pub fn require_root() -> bool {
    if run_ok("id", &["-u"]).trim() == "0" {
        return true;
    }
    if std::env::var("ISTIO_CNI_SKIP_ROOT_TESTS").as_deref() == Ok("1") {
        eprintln!("note: skipping a root-only CRI test (ISTIO_CNI_SKIP_ROOT_TESTS=1 and not root)");
        return false;
    }
    panic!("the CRI tests need root (they run containerd); set ISTIO_CNI_SKIP_ROOT_TESTS=1 to skip them");
}

/// A directory under /tmp removed (after unmounting anything below it) on drop. Short paths: containerd's
/// socket path must fit in sun_path.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(prefix: &str) -> TempDir {
        let p = std::env::temp_dir().join(unique_name(prefix));
        std::fs::create_dir_all(&p).expect("create temp dir");
        TempDir(p)
    }
    pub fn path(&self) -> &Path {
        &self.0
    }
    pub fn join(&self, rel: impl AsRef<Path>) -> PathBuf {
        self.0.join(rel)
    }
}

/// Unmounts every mount point at or below `dir` (deepest first).
pub fn unmount_below(dir: &Path) {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return;
    };
    let prefix = dir.to_string_lossy().into_owned();
    let mut points: Vec<String> = info
        .lines()
        .filter_map(|l| l.split(' ').nth(4).map(str::to_string))
        .filter(|m| m == &prefix || m.starts_with(&format!("{prefix}/")))
        .collect();
    points.sort_by_key(|p| std::cmp::Reverse(p.len()));
    for m in points {
        let _ = run("umount", &["-l", &m]);
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if std::env::var_os("CRI_E2E_KEEP").is_some() {
            eprintln!("note: keeping {}", self.0.display());
            return;
        }
        unmount_below(&self.0);
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A named network namespace (`ip netns add`, lo up), deleted on drop.
pub struct Netns {
    pub name: String,
}

impl Netns {
    pub fn new(prefix: &str) -> Netns {
        let name = unique_name(prefix);
        run_ok("ip", &["netns", "add", &name]);
        let ns = Netns { name };
        ns.exec_ok(&["ip", "link", "set", "lo", "up"]);
        ns
    }
    pub fn path(&self) -> String {
        format!("/run/netns/{}", self.name)
    }
    pub fn exec_ok(&self, argv: &[&str]) -> String {
        let mut a = vec!["netns", "exec", &self.name];
        a.extend_from_slice(argv);
        run_ok("ip", &a)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = run("ip", &["netns", "del", &self.name]);
    }
}

/// `iptables-save` (nft backend unless told) in the namespace at `path` (any netns file), comments and
/// counters removed.
pub fn saved_rules(netns_path: &str, prog: &str) -> String {
    crate::cmd::without_counters(&run_ok("nsenter", &[&format!("--net={netns_path}"), prog]))
}

/// Runs `f` on a new thread that first enters the network namespace at `path` (only the network namespace:
/// sockets it creates live there, whatever thread later uses them).
pub fn in_netns<T: Send + 'static>(path: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let path = path.to_string();
    std::thread::spawn(move || {
        let file = std::fs::File::open(&path).expect("open netns");
        nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
        f()
    })
    .join()
    .expect("thread in netns panicked")
}
