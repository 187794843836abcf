//! Crash-safe file operations: atomic write (temp file in the same dir, fsync, rename), errors carry the path.

use crate::error::{IoContext, Result};
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// Writes `data` to `path` atomically: a temp file in the same directory, fsync, chmod `mode`, rename over
/// the target, fsync the directory. Readers see the old or the new content, never a mix.
/// (Used by `iptables::backend`; keep this signature.)
pub fn write_atomic(path: &Path, data: &[u8], mode: u32) -> Result<()> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp.{}", std::process::id()));
    let res = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(mode)
            .open(&tmp)
            .io_context(|| format!("create {}", tmp.display()))?;
        f.write_all(data).io_context(|| format!("write {}", tmp.display()))?;
        f.set_permissions(std::fs::Permissions::from_mode(mode))
            .io_context(|| format!("chmod {}", tmp.display()))?;
        f.sync_all().io_context(|| format!("fsync {}", tmp.display()))?;
        std::fs::rename(&tmp, path).io_context(|| format!("rename {} to {}", tmp.display(), path.display()))?;
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
        Ok(())
    })();
    if res.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    res
}
