//! Installing binaries into the host bin dirs: temp file in the same dir, fsync, rename (never an
//! in-place overwrite, which a running exec would hit as ETXTBSY); a regular file with identical content
//! in the same mode is skipped; stale `<name>.tmp.*` files are removed first. The installer installs its
//! own executable as `istio-cni`.

use crate::error::{IoContext, Result};
use crate::fsutil;
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

impl super::Installer {
    /// Why the runtime could not run our plugin binary in a bin dir we install into (each dir of the
    /// last [`super::Installer::install_binaries`], unless SKIP_CNI_BINARIES names it): missing, not a regular
    /// file (a link is followed, as the runtime's exec does) or without its owner's execute bit. `None`
    /// when every one can run. CRI-O execs each plugin of a list (`VERSION`) and silently skips the list
    /// when one cannot run, falling back to another file without our entry.
    pub fn binary_unusable(&self) -> Option<String> {
        if self
            .settings
            .skip_binaries
            .iter()
            .any(|s| s == super::PLUGIN_BINARY)
        {
            return None;
        }
        self.bin_dirs.iter().find_map(|d| {
            let p = d.join(super::PLUGIN_BINARY);
            let why = match std::fs::metadata(&p) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => "is missing".to_string(),
                Err(e) => format!("cannot be read ({e})"),
                Ok(m) if !m.is_file() => "is not a regular file".to_string(),
                Ok(m) if m.permissions().mode() & 0o100 == 0 => format!(
                    "has mode {:04o}, not executable by its owner",
                    m.permissions().mode() & 0o7777
                ),
                Ok(_) => return None,
            };
            Some(format!(
                "plugin binary {} {why}: the container runtime cannot run it (CRI-O skips every CNI \
                 config list holding our entry)",
                p.display()
            ))
        })
    }
}

/// What happened to one binary in one dir.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Copied,
    Identical,
    Skipped(&'static str),
}

/// True when both files have the same bytes.
pub fn same_content(a: &Path, b: &Path) -> Result<bool> {
    // Sizes from the opened files, not a separate stat of the paths: under qemu-user a stat of
    // /proc/self/exe describes qemu, while opening it gives our binary.
    let (mut fa, mut fb) = match (File::open(a), File::open(b)) {
        (Ok(x), Ok(y)) => (x, y),
        _ => return Ok(false),
    };
    let la = fa
        .metadata()
        .io_context(|| format!("stat {}", a.display()))?
        .len();
    let lb = fb
        .metadata()
        .io_context(|| format!("stat {}", b.display()))?
        .len();
    if la != lb {
        return Ok(false);
    }
    let (mut ba, mut bb) = (vec![0u8; 64 * 1024], vec![0u8; 64 * 1024]);
    loop {
        let n = read_full(&mut fa, &mut ba).io_context(|| format!("read {}", a.display()))?;
        let m = read_full(&mut fb, &mut bb).io_context(|| format!("read {}", b.display()))?;
        if n != m || ba[..n] != bb[..m] {
            return Ok(false);
        }
        if n == 0 {
            return Ok(true);
        }
    }
}

fn read_full(f: &mut File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

/// Whether `target` is what a copy makes: a regular file (not a symlink) with exactly `mode`.
fn is_installed_as(target: &Path, mode: u32) -> Result<bool> {
    let m = fsutil::existing(std::fs::symlink_metadata(target), || {
        format!("stat {}", target.display())
    })?;
    Ok(m.is_some_and(|m| m.file_type().is_file() && m.permissions().mode() & 0o7777 == mode))
}

/// Installs `source` as `<dir>/<name>` in the source's mode. `update=false` keeps an existing file;
/// names in `skip` are not installed. An existing file is [`Outcome::Identical`] only when it has the
/// source's bytes and is a regular file in the source's mode: one made unexecutable (`chmod 644`), or a
/// symlink, is copied again (the runtime must be able to run the plugin: CRI-O skips a whole conf list
/// whose plugin fails its `VERSION` exec).
pub fn install_one(
    source: &Path,
    dir: &Path,
    name: &str,
    skip: &[String],
    update: bool,
) -> Result<Outcome> {
    let removed = fsutil::remove_stale_temps(dir, |owner| owner == name)?;
    for p in removed {
        log::info!("removed stale temp file {}", p.display());
    }
    if skip.iter().any(|s| s == name) {
        return Ok(Outcome::Skipped("listed in SKIP_CNI_BINARIES"));
    }
    let target = dir.join(name);
    let mode = std::fs::metadata(source)
        .io_context(|| format!("stat {}", source.display()))?
        .permissions()
        .mode()
        & 0o7777;
    if target.exists() {
        if !update {
            return Ok(Outcome::Skipped("exists and UPDATE_CNI_BINARIES is false"));
        }
        if is_installed_as(&target, mode)? && same_content(source, &target)? {
            return Ok(Outcome::Identical);
        }
    }
    fsutil::copy_atomic(source, &target, mode)?;
    Ok(Outcome::Copied)
}

/// The bin dirs to use: the primary always; the secondary only when it exists and is writable.
pub fn target_dirs(primary: &Path, secondary: Option<&Path>) -> Vec<PathBuf> {
    let mut v = vec![primary.to_path_buf()];
    if let Some(s) = secondary {
        if s != primary
            && s.is_dir()
            && nix::unistd::access(s, nix::unistd::AccessFlags::W_OK).is_ok()
        {
            v.push(s.to_path_buf());
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    /// A source binary (mode 0755) and an empty bin dir.
    fn setup(tag: &str) -> (PathBuf, PathBuf, PathBuf) {
        let root = fsutil::test_dir(tag);
        let (src, bin) = (root.join("src"), root.join("bin"));
        fs::create_dir_all(&bin).unwrap();
        fs::write(&src, b"#!/bin/sh\nexit 0\n").unwrap();
        fs::set_permissions(&src, fs::Permissions::from_mode(0o755)).unwrap();
        (root, src, bin)
    }

    fn mode(p: &Path) -> u32 {
        fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn same_bytes_in_another_mode_are_copied_again() {
        let (root, src, bin) = setup("bin-mode");
        let installed = bin.join("istio-cni");
        assert_eq!(
            install_one(&src, &bin, "istio-cni", &[], true).unwrap(),
            Outcome::Copied
        );
        assert_eq!(mode(&installed), 0o755);
        assert_eq!(
            install_one(&src, &bin, "istio-cni", &[], true).unwrap(),
            Outcome::Identical
        );
        // Someone took the execute bits away: the runtime cannot run the plugin (CRI-O then skips the
        // whole list holding our entry). Same bytes, but not what we install.
        fs::set_permissions(&installed, fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(
            install_one(&src, &bin, "istio-cni", &[], true).unwrap(),
            Outcome::Copied
        );
        assert_eq!(mode(&installed), 0o755);
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_link_to_the_same_bytes_is_replaced_by_a_copy() {
        let (root, src, bin) = setup("bin-link");
        let installed = bin.join("istio-cni");
        std::os::unix::fs::symlink(&src, &installed).unwrap();
        assert_eq!(
            install_one(&src, &bin, "istio-cni", &[], true).unwrap(),
            Outcome::Copied
        );
        let meta = fs::symlink_metadata(&installed).unwrap();
        assert!(meta.file_type().is_file(), "still a link");
        assert_eq!(mode(&installed), 0o755);
        fs::remove_dir_all(&root).unwrap();
    }
}
