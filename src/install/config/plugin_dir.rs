//! The directory of plugins a list's `name` names (libcni 1.3.0 `NetworkConfFromFile` →
//! `NetworkPluginConfsFromFiles`): its `.conf` files are plugins of the list too, and failing to read it
//! fails the list, so the runtime skips it. [`PluginDir`] is what the pure check in [`super::libcni`]
//! sees; [`read`] reads it as the runtime does, with Go's `filepath` rules ([`go_join`], [`go_ext`]).

use crate::fsutil;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::Path;

/// What libcni 1.3.0's `NetworkPluginConfsFromFiles` finds for a list named `name`:
/// `ConfFiles(filepath.Join(<conf dir>, name), [".conf"])` (not directories, `filepath.Ext` exactly
/// `.conf`), each file read. The effect is [`read`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PluginDir {
    /// The `.conf` files and their bytes (none when the directory does not exist). In listing order:
    /// libcni's is by name, which changes the list's plugin order but not whether it loads.
    Files(Vec<(String, Vec<u8>)>),
    /// Listing the directory, or reading one of those files, fails other than with "the directory does
    /// not exist": libcni fails the list.
    Error(String),
}

/// No plugin directory (a list's name naming nothing), for callers and tests without a conf dir.
pub fn no_plugin_dir(_: &str) -> PluginDir {
    PluginDir::Files(Vec::new())
}

/// Go's `filepath.Join(dir, name)`: joined with `/`, then cleaned lexically (`..` drops the element
/// before it whatever that is on disk, `/x` is `dir/x`, an empty name is `dir` itself).
pub fn go_join(dir: &Path, name: &str) -> std::path::PathBuf {
    let joined = [dir.as_os_str().as_bytes(), b"/", name.as_bytes()].concat();
    let rooted = joined.first() == Some(&b'/');
    let mut parts: Vec<&[u8]> = Vec::new();
    for p in joined.split(|&b| b == b'/') {
        match p {
            b"" | b"." => {}
            b".." if parts.last().is_some_and(|l| *l != b"..") => {
                parts.pop();
            }
            b".." if rooted => {}
            p => parts.push(p),
        }
    }
    let mut out = if rooted { b"/".to_vec() } else { Vec::new() };
    out.extend_from_slice(&parts.join(&b'/'));
    if out.is_empty() {
        out.push(b'.');
    }
    std::path::PathBuf::from(OsString::from_vec(out))
}

/// Go's `filepath.Ext`: the suffix from the last dot (bytes), or empty.
pub fn go_ext(name: &OsStr) -> &[u8] {
    let b = name.as_bytes();
    b.iter().rposition(|&c| c == b'.').map_or(&[], |i| &b[i..])
}

/// libcni 1.3.0's `NetworkPluginConfsFromFiles(dir, name)`, read as the runtime reads it (see
/// [`PluginDir`]): the directory `filepath.Join(dir, name)` ([`go_join`]) listed, its
/// non-directory entries whose extension is exactly `.conf` read ([`fsutil::read_config`]: bounded,
/// regular files only). Only ENOENT means "no such directory"; every other error (a NUL in the
/// name, a regular file there, a name too long) is libcni's error too.
pub fn read(dir: &Path, name: &str) -> PluginDir {
    let path = go_join(dir, name);
    let shown_path = path.display();
    let rd = match std::fs::read_dir(&path) {
        Ok(rd) => rd,
        Err(e) if e.raw_os_error() == Some(nix::errno::Errno::ENOENT as i32) => {
            return PluginDir::Files(Vec::new())
        }
        Err(e) => return PluginDir::Error(format!("open {shown_path}: {e}")),
    };
    let mut files = Vec::new();
    for ent in rd {
        let listed = ent.and_then(|e| Ok((e.file_type()?.is_dir(), e.file_name())));
        let n = match listed {
            Ok((false, n)) if go_ext(&n) == b".conf" => n,
            Ok(_) => continue,
            Err(e) => return PluginDir::Error(format!("read {shown_path}: {e}")),
        };
        let p = path.join(&n);
        match fsutil::read_config(&p, fsutil::MAX_CONFIG_BYTES) {
            Ok(Some(b)) => files.push((p.display().to_string(), b)),
            Ok(None) => return PluginDir::Error(format!("{}: no such file", p.display())),
            Err(e) => return PluginDir::Error(e.to_string()),
        }
    }
    PluginDir::Files(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_join_as_go_joins_them() {
        let j = |d: &str, n: &str| go_join(Path::new(d), n).display().to_string();
        assert_eq!(j("/etc/cni/net.d", "calico"), "/etc/cni/net.d/calico");
        assert_eq!(j("/etc/cni/net.d", ""), "/etc/cni/net.d");
        assert_eq!(j("/etc/cni/net.d/", "."), "/etc/cni/net.d");
        assert_eq!(j("/etc/cni/net.d", "/abs"), "/etc/cni/net.d/abs");
        assert_eq!(j("/etc/cni/net.d", "a//b/./c/"), "/etc/cni/net.d/a/b/c");
        assert_eq!(j("/etc/cni/net.d", "sub/.."), "/etc/cni/net.d");
        assert_eq!(j("/etc/cni/net.d", "../../../.."), "/");
        assert_eq!(j("conf", "../../x"), "../x");
        assert_eq!(j(".", ".."), "..");
        assert_eq!(j("a", ".."), ".");
    }
}
