//! The node's root as files: resolving a path the way the node's kernel would, reading a binary's
//! `PT_INTERP`, and deciding how the node's dynamic loader starts it (see [`super::tool`]).

use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};

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
        naming: Naming,
    },
}

/// How the node's loader gives the program its `argv[0]`, the tool's name (xtables-*-multi picks its
/// applet from it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Naming {
    /// `--argv0 <name>` (glibc 2.33 and later).
    Argv0Flag,
    /// A path ending in the name, from [`super::applet_link`] (older glibc, musl).
    PrivateLink,
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
pub fn launch_under(root: &Path, file: PathBuf) -> Option<Launch> {
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
    let naming = if takes_argv0(&loader) {
        Naming::Argv0Flag
    } else {
        Naming::PrivateLink
    };
    Some(Launch::Loader {
        loader,
        file,
        library_path,
        xtables_libdir,
        naming,
    })
}

/// Whether the loader's bytes name the `--argv0` option (pure): glibc's ld.so has it since 2.33 (its option
/// table and usage text hold the literal), older ones and musl's do not.
pub fn names_argv0_option(loader: &[u8]) -> bool {
    loader.windows(8).any(|w| w == b"--argv0\0")
}

/// [`names_argv0_option`] for the loader file at `path`, read once per process and loader (a loader is a
/// few hundred KiB; every exec of a node tool asks). Unreadable: no.
fn takes_argv0(path: &Path) -> bool {
    static SEEN: std::sync::Mutex<Vec<(PathBuf, bool)>> = std::sync::Mutex::new(Vec::new());
    let mut seen = SEEN.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, yes)) = seen.iter().find(|(p, _)| p == path) {
        return *yes;
    }
    let yes = std::fs::read(path)
        .map(|b| names_argv0_option(&b))
        .unwrap_or(false);
    seen.push((path.to_path_buf(), yes));
    yes
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
