//! Where the iptables programs are and how to start them.
//!
//! The plugin runs on the node and finds them on `PATH`. The installer and the repair agent run in a
//! FROM-scratch image with no iptables of its own: they run the node's own binaries from the node's root,
//! `ISTIO_CNI_HOST_ROOT` when set, else `/host/proc/1/root` (the node's root through the host `/proc` that
//! upstream's chart mounts read-only at `/host/proc`; or our parent's root there, see [`node_roots`]) when
//! nothing is on `PATH`.
//!
//! Upstream's chart drops `SYS_CHROOT`, so the node's tools are not chrooted into: a dynamically linked tool
//! is started through the node's own dynamic loader (its `PT_INTERP`, found under the root) with
//! `--library-path` naming the node's library directories and `XTABLES_LIBDIR` its xtables modules, the
//! program given by a symlink named after the tool (xtables-*-multi picks its applet from `argv[0]`); a
//! static one is executed directly. Paths are resolved under the root by hand: an absolute symlink on the
//! node (Debian's `/usr/sbin/iptables-restore -> /etc/alternatives/...`) means the node's
//! `/etc/alternatives`, which the kernel would look up in the container's root instead.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Component, Path, PathBuf};
use std::process::Command;

/// The node's root directory, as seen from this process, for running the node's iptables.
pub const HOST_ROOT_ENV: &str = "ISTIO_CNI_HOST_ROOT";
/// The host's `/proc` in upstream's DaemonSet; `1/root` under it is the node's root, used when
/// [`HOST_ROOT_ENV`] is unset and no tool is on `PATH`.
pub const CHART_HOST_PROC: &str = "/host/proc";
/// Where to look for the tools under the host root.
const HOST_PATH: &str = "/usr/local/sbin:/usr/sbin:/sbin:/usr/local/bin:/usr/bin:/bin";
/// Library directories looked for under the host root (those that exist, after the loader's own).
const HOST_LIB_DIRS: [&str; 9] = [
    "usr/local/lib",
    "lib/x86_64-linux-gnu",
    "usr/lib/x86_64-linux-gnu",
    "lib/aarch64-linux-gnu",
    "usr/lib/aarch64-linux-gnu",
    "lib64",
    "usr/lib64",
    "lib",
    "usr/lib",
];

/// How a located tool is started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Launch {
    /// Executed directly (on `PATH`, or a static binary under the host root: `file` is its resolved path).
    Direct { file: PathBuf },
    /// The node's dynamic loader runs the node's binary `file`.
    Loader {
        loader: PathBuf,
        file: PathBuf,
        library_path: String,
        xtables_libdir: Option<PathBuf>,
    },
}

/// A located program: its path as the node sees it, the node's root (if not our own), and how to start it.
#[derive(Debug, Clone)]
pub struct Tool {
    pub path: PathBuf,
    pub root: Option<PathBuf>,
    pub launch: Launch,
    name: String,
}

fn host_root_env() -> Option<PathBuf> {
    std::env::var_os(HOST_ROOT_ENV)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// Resolves `path` (absolute, as the node sees it) inside `root` the way the node's kernel would: every
/// symlink is followed, absolute targets restart at `root`, `..` never leaves it. `None` when a component
/// is missing or there are more than 40 links.
pub fn resolve_under(root: &Path, path: &Path) -> Option<PathBuf> {
    let mut done = PathBuf::new();
    let mut todo: Vec<OsString> = Vec::new();
    let push_front = |todo: &mut Vec<OsString>, p: &Path| {
        let mut comps: Vec<OsString> = Vec::new();
        for c in p.components() {
            match c {
                Component::Normal(n) => comps.push(n.to_os_string()),
                Component::ParentDir => comps.push("..".into()),
                _ => {}
            }
        }
        comps.reverse();
        todo.extend(comps);
    };
    push_front(&mut todo, path);
    let mut links = 0;
    while let Some(c) = todo.pop() {
        if c == ".." {
            done.pop();
            continue;
        }
        let cand = done.join(&c);
        let meta = std::fs::symlink_metadata(root.join(&cand)).ok()?;
        if meta.file_type().is_symlink() {
            links += 1;
            if links > 40 {
                return None;
            }
            let target = std::fs::read_link(root.join(&cand)).ok()?;
            if target.is_absolute() {
                done = PathBuf::new();
            }
            push_front(&mut todo, &target);
        } else {
            done = cand;
        }
    }
    Some(root.join(done))
}

/// The `PT_INTERP` of a 64-bit little-endian ELF file (pure): `Ok(None)` for a static binary, `Err` when
/// the bytes are not such an ELF file.
pub fn elf_interp(bytes: &[u8]) -> Result<Option<PathBuf>, &'static str> {
    use std::os::unix::ffi::OsStrExt;
    let u16_at = |o: usize| -> Option<u64> {
        Some(u16::from_le_bytes(bytes.get(o..o + 2)?.try_into().ok()?) as u64)
    };
    let u32_at = |o: usize| -> Option<u64> {
        Some(u32::from_le_bytes(bytes.get(o..o + 4)?.try_into().ok()?) as u64)
    };
    let u64_at = |o: usize| -> Option<u64> {
        Some(u64::from_le_bytes(bytes.get(o..o + 8)?.try_into().ok()?))
    };
    if bytes.get(0..4) != Some(b"\x7fELF".as_slice())
        || bytes.get(4) != Some(&2)
        || bytes.get(5) != Some(&1)
    {
        return Err("not a 64-bit little-endian ELF file");
    }
    let bad = "truncated ELF program headers";
    let phoff = u64_at(0x20).ok_or(bad)? as usize;
    let phentsize = u16_at(0x36).ok_or(bad)? as usize;
    let phnum = u16_at(0x38).ok_or(bad)? as usize;
    for i in 0..phnum {
        let ph = phoff
            .checked_add(i.checked_mul(phentsize).ok_or(bad)?)
            .ok_or(bad)?;
        if u32_at(ph).ok_or(bad)? == 3 {
            let off = u64_at(ph + 8).ok_or(bad)? as usize;
            let size = u64_at(ph + 32).ok_or(bad)? as usize;
            let raw = bytes
                .get(off..off.checked_add(size).ok_or(bad)?)
                .ok_or(bad)?;
            let raw = raw.split(|b| *b == 0).next().unwrap_or(raw);
            return Ok(Some(PathBuf::from(std::ffi::OsStr::from_bytes(raw))));
        }
    }
    Ok(None)
}

/// How to start the node's binary `file` (already resolved under `root`).
fn launch_under(root: &Path, file: PathBuf) -> Option<Launch> {
    // The program headers sit at the start of the file: 64 KiB is plenty.
    let mut head = vec![0u8; 65536];
    let n = {
        use std::io::Read;
        std::fs::File::open(&file).ok()?.read(&mut head).ok()?
    };
    head.truncate(n);
    let interp = match elf_interp(&head) {
        Ok(Some(i)) => i,
        // Static, or not ELF (a script): let the kernel run it.
        _ => return Some(Launch::Direct { file }),
    };
    let loader = resolve_under(root, &interp)?;
    let mut dirs: Vec<PathBuf> = Vec::new();
    if let Some(d) = loader.parent() {
        dirs.push(d.to_path_buf());
    }
    for d in HOST_LIB_DIRS {
        if let Some(r) = resolve_under(root, &Path::new("/").join(d)) {
            if r.is_dir() && !dirs.contains(&r) {
                dirs.push(r);
            }
        }
    }
    let xtables_libdir = dirs.iter().map(|d| d.join("xtables")).find(|d| d.is_dir());
    let library_path = dirs
        .iter()
        .map(|d| d.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(":");
    Some(Launch::Loader {
        loader,
        file,
        library_path,
        xtables_libdir,
    })
}

fn find_under(root: &Path, prog: &str) -> Option<Tool> {
    HOST_PATH.split(':').find_map(|d| {
        let inside = Path::new(d).join(prog);
        let file = resolve_under(root, &inside).filter(|f| f.is_file())?;
        Some(Tool {
            path: inside,
            root: Some(root.to_path_buf()),
            launch: launch_under(root, file)?,
            name: prog.to_string(),
        })
    })
}

/// The node roots to try under the host `/proc` at `proc` (pure but for reading `self/stat`): pid 1's, then
/// that of our parent on the node (the runtime's shim, which runs in the node's root), for hosts that
/// refuse access to pid 1's root (sandboxed kernels such as gVisor do, even to root).
pub fn node_roots(proc: &Path) -> Vec<PathBuf> {
    let mut v = vec![proc.join("1/root")];
    // `self` in the host's procfs is our pid as the node sees it.
    if let Some(ppid) = std::fs::read_to_string(proc.join("self/stat"))
        .ok()
        .and_then(|st| parent_pid(&st))
    {
        if ppid > 1 {
            v.push(proc.join(format!("{ppid}/root")));
        }
    }
    v
}

/// Field 4 (`ppid`) of a `/proc/<pid>/stat` line (pure).
pub fn parent_pid(stat: &str) -> Option<u32> {
    stat.get(stat.rfind(')')? + 1..)?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// Finds `prog`: under [`HOST_ROOT_ENV`] when set; else on `PATH`; else under a node root reached through
/// [`CHART_HOST_PROC`] (our image under upstream's chart), see [`node_roots`].
pub fn find(prog: &str) -> Option<Tool> {
    if let Some(root) = host_root_env() {
        return find_under(&root, prog);
    }
    let path = std::env::var("PATH").unwrap_or_else(|_| HOST_PATH.into());
    let on_path = path.split(':').filter(|d| !d.is_empty()).find_map(|d| {
        let p = Path::new(d).join(prog);
        p.is_file().then(|| Tool {
            path: p.clone(),
            root: None,
            launch: Launch::Direct { file: p },
            name: prog.to_string(),
        })
    });
    on_path.or_else(|| {
        let proc = Path::new(CHART_HOST_PROC);
        if !proc.is_dir() {
            return None;
        }
        node_roots(proc).iter().find_map(|r| find_under(r, prog))
    })
}

/// NSS sources that answer locally and quickly; anything else (ldap, sss, nis, winbind, ...) may need the
/// network, and then every iptables child gets the isolation described in [`Tool::command`].
const LOCAL_NSS_SOURCES: [&str; 4] = ["files", "compat", "systemd", "db"];

/// Whether the `passwd` or `group` lines of an nsswitch.conf name a source that is not local (pure).
pub fn nss_may_block(nsswitch: &str) -> bool {
    nsswitch.lines().any(|line| {
        let line = line.split('#').next().unwrap_or("");
        match line.split_once(':') {
            Some((db, sources)) if matches!(db.trim(), "passwd" | "group") => sources
                .split_whitespace()
                .filter(|w| !w.starts_with('['))
                .any(|w| !LOCAL_NSS_SOURCES.contains(&w)),
            _ => false,
        }
    })
}

/// [`nss_may_block`] for the nsswitch.conf the tools will see (under the host root when there is one).
/// Read once per process and root: a dual-stack ADD starts two iptables children.
fn isolate_nss(root: Option<&Path>) -> bool {
    static SEEN: std::sync::Mutex<Option<(Option<PathBuf>, bool)>> = std::sync::Mutex::new(None);
    let mut seen = SEEN.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((r, isolate)) = seen.as_ref() {
        if r.as_deref() == root {
            return *isolate;
        }
    }
    let path = match root {
        Some(r) => r.join("etc/nsswitch.conf"),
        None => PathBuf::from("/etc/nsswitch.conf"),
    };
    let isolate = std::fs::read_to_string(&path)
        .map(|t| nss_may_block(&t))
        .unwrap_or(false);
    if isolate {
        log::debug!(
            "{} names a remote passwd/group source: iptables get files-only NSS",
            path.display()
        );
    }
    *seen = Some((root.map(Path::to_path_buf), isolate));
    isolate
}

impl Tool {
    /// A command for the tool (see the module comment for how the node's tools are started). iptables
    /// resolves every `--uid-owner 1337` through NSS (getpwnam) before trying it as a number; on a node
    /// whose nsswitch.conf sends passwd/group lookups to LDAP, sssd or similar, that can stall ADD. Only
    /// there (like upstream, which does it always) the child gets a private mount namespace with /dev/null
    /// over /etc/nsswitch.conf, i.e. plain files lookups. Elsewhere we skip it: copying a busy node's mount
    /// table into a new namespace costs every pod start. The isolation is best effort. A tool run through
    /// the loader reads our own root's nsswitch.conf, so that is the one that counts.
    pub fn command(&self) -> Command {
        let mut c = match &self.launch {
            Launch::Direct { file } => Command::new(file),
            Launch::Loader {
                loader,
                file,
                library_path,
                xtables_libdir,
            } => {
                let mut c = Command::new(loader);
                c.arg("--library-path").arg(library_path);
                match applet_link(&self.name, file) {
                    Some(link) => c.arg(link),
                    // glibc >= 2.33 sets argv[0] itself.
                    None => c.arg("--argv0").arg(&self.name).arg(file),
                };
                if let Some(x) = xtables_libdir {
                    c.env("XTABLES_LIBDIR", x);
                }
                c
            }
        };
        if !isolate_nss(None) {
            return c;
        }
        // SAFETY: the closure runs in the forked child before exec and only makes raw syscalls (unshare,
        // mount) on short literal paths that nix passes through a stack buffer. It allocates nothing and
        // takes no locks, so it is async-signal-safe.
        unsafe {
            c.pre_exec(move || {
                use nix::mount::{mount, MsFlags};
                let private = nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS).is_ok()
                    && mount(
                        None::<&str>,
                        "/",
                        None::<&str>,
                        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
                        None::<&str>,
                    )
                    .is_ok();
                if private {
                    let _ = mount(
                        Some("/dev/null"),
                        "/etc/nsswitch.conf",
                        None::<&str>,
                        MsFlags::MS_BIND,
                        None::<&str>,
                    );
                }
                Ok(())
            });
        }
        c
    }
}

/// A symlink named `name` pointing at `file`, in a private directory under the temp dir, so that the
/// loader gives the program that `argv[0]` (older glibc has no `--argv0`). `None` when it cannot be made.
fn applet_link(name: &str, file: &Path) -> Option<PathBuf> {
    let dir = std::env::temp_dir().join(format!("istio-cni-host-tools-{}", std::process::id()));
    let link = dir.join(name);
    if std::fs::read_link(&link).ok().as_deref() == Some(file) {
        return Some(link);
    }
    std::fs::create_dir_all(&dir).ok()?;
    let tmp = dir.join(format!(".{name}.{:?}", std::thread::current().id()));
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(file, &tmp).ok()?;
    std::fs::rename(&tmp, &link).ok()?;
    Some(link)
}

#[cfg(test)]
#[path = "tool_tests.rs"]
mod tests;
