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
//! `--library-path` naming the node's library directories and `XTABLES_LIBDIR` its xtables modules, and
//! the tool's name as the program's `argv[0]` (xtables-*-multi picks its applet from it): `--argv0` where
//! the loader has it, else a link in a private directory ([`super::applet_link`]); a static one is
//! executed directly. The node's binaries run as root with our privileges, so nothing another user can
//! write is ever handed to the loader, and they inherit only an allow-listed environment
//! ([`INHERITED_ENV`]). Paths are resolved under the root by hand: an absolute symlink on the
//! node (Debian's `/usr/sbin/iptables-restore -> /etc/alternatives/...`) means the node's
//! `/etc/alternatives`, which the kernel would look up in the container's root instead.

use super::applet_link;
use super::node_root::launch_under;
pub use super::node_root::{elf_interp, node_roots, parent_pid, resolve_under, Launch, Naming};
use super::nss::isolate_nss;
pub use super::nss::nss_may_block;
use crate::error::Result;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The node's root directory, as seen from this process, for running the node's iptables.
pub const HOST_ROOT_ENV: &str = "ISTIO_CNI_HOST_ROOT";
/// The host's `/proc` in upstream's DaemonSet; `1/root` under it is the node's root, used when
/// [`HOST_ROOT_ENV`] is unset and no tool is on `PATH`.
pub const CHART_HOST_PROC: &str = "/host/proc";

/// Where to look for the tools under the host root.
const HOST_PATH: &str = "/usr/local/sbin:/usr/sbin:/sbin:/usr/local/bin:/usr/bin:/bin";

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

/// The environment variables a node tool inherits from us (an allow-list). Besides them it gets only what
/// we set: `XTABLES_LIBDIR` (the node's modules, through its loader) and `XTABLES_LOCKFILE`
/// ([`super::exec`]). Whatever else the agent or the runtime that started the plugin has in its
/// environment (`LD_PRELOAD`, `LD_AUDIT`, `LD_LIBRARY_PATH`, `GCONV_PATH`, `GLIBC_TUNABLES`, `MALLOC_*`,
/// resolver and locale variables, `TMPDIR`, a stray `XTABLES_LIBDIR`, the CNI variables, ...) never
/// reaches a root process that runs the node's code.
const INHERITED_ENV: [&str; 1] = ["PATH"];

impl Tool {
    /// A command for the tool (see the module comment for how the node's tools are started), with only
    /// the environment in [`INHERITED_ENV`] plus what we set. iptables resolves every `--uid-owner 1337`
    /// through NSS (getpwnam) before trying it as a number; on a node whose nsswitch.conf sends
    /// passwd/group lookups to LDAP, sssd or similar, that can stall ADD. Only there (like upstream, which
    /// does it always) the child gets a private mount namespace with /dev/null over /etc/nsswitch.conf,
    /// i.e. plain files lookups. Elsewhere we skip it: copying a busy node's mount table into a new
    /// namespace costs every pod start. The isolation is best effort. A tool run through the loader reads
    /// our own root's nsswitch.conf, so that is the one that counts. `Err` when a loader without
    /// `--argv0` cannot be handed the tool under its name.
    pub fn command(&self) -> Result<Command> {
        let program = match &self.launch {
            Launch::Direct { file } => file,
            Launch::Loader { loader, .. } => loader,
        };
        let mut c = Command::new(program);
        c.env_clear();
        for k in INHERITED_ENV {
            if let Some(v) = std::env::var_os(k) {
                c.env(k, v);
            }
        }
        let mut keep_open = None;
        if let Launch::Loader {
            file,
            library_path,
            xtables_libdir,
            naming,
            ..
        } = &self.launch
        {
            c.arg("--library-path").arg(library_path);
            match naming {
                Naming::Argv0Flag => c.arg("--argv0").arg(&self.name).arg(file),
                Naming::PrivateLink => {
                    let (link, dir) = applet_link::link(&self.name, file)?;
                    keep_open = Some(dir);
                    c.arg(link)
                }
            };
            if let Some(x) = xtables_libdir {
                c.env("XTABLES_LIBDIR", x);
            }
        }
        let isolate = isolate_nss();
        if keep_open.is_none() && !isolate {
            return Ok(c);
        }
        // SAFETY: the closure runs in the forked child before exec and only makes raw syscalls (fcntl on
        // a descriptor the closure itself keeps open; unshare and mount on short literal paths that nix
        // passes through a stack buffer). It allocates nothing and takes no locks, so it is
        // async-signal-safe.
        unsafe {
            c.pre_exec(move || {
                use nix::fcntl::{fcntl, FcntlArg, FdFlag};
                use nix::mount::{mount, MsFlags};
                if let Some(dir) = &keep_open {
                    // The loader opens the tool through /proc/self/fd/<n>: keep <n> across exec.
                    use std::os::fd::AsRawFd;
                    fcntl(dir.as_raw_fd(), FcntlArg::F_SETFD(FdFlag::empty()))?;
                }
                if !isolate {
                    return Ok(());
                }
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
        Ok(c)
    }
}

/// Removes what starting the node's tools left on disk (the private link directory of a loader without
/// `--argv0`); called when the applet ends.
pub fn release() {
    applet_link::release();
}

#[cfg(test)]
#[path = "tool_tests.rs"]
mod tests;
