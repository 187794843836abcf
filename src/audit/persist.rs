//! The audit's kept decisions in the run dir (effects): read once when the audit starts ([`load`]: a
//! missing, unreadable or corrupt file is a warning and an empty start, the agent's behaviour without it),
//! written whole and atomically (mode 0600) by a thread of its own ([`spawn`]) at most once per
//! [`DEBOUNCE`], and only when the kept pods changed since the last write and the watch's first list is
//! complete (before it, the file still holds the pods not yet seen again). The watch thread only marks the
//! store changed: no file write on its path. The store holds a pod's reduced pod only until it is written
//! (later writes carry its line over from the file, read line by line as the new one is written through a
//! buffer: neither is ever whole in memory). The format is [`super::kept`]'s.

use super::kept::{self, First};
use super::{lock, Shared};
use crate::error::{IoContext, Result};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// How often the writer looks for a change: a burst of pods started together is one write, and a pod's
/// decision reaches the file within about this long of its first event.
pub const DEBOUNCE: Duration = Duration::from_secs(1);

/// How old a temp file of the kept decisions must be to be one a write cut short (a crash between its
/// creation and its rename): a write takes milliseconds, and another agent sharing the run dir (a
/// `maxSurge` roll) may be writing its own right now.
pub const STALE_TEMP: Duration = Duration::from_secs(60);

/// Removes the temp files of the file at `path` (its `<name>.tmp.<pid>.<n>`) older than [`STALE_TEMP`]:
/// what writes cut short left. Only the agent's audit sweeps, when it starts.
pub fn sweep(path: &Path) {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return;
    };
    let name = name.to_string_lossy();
    let stale = |m: &std::fs::Metadata| {
        m.modified()
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age > STALE_TEMP)
    };
    match crate::fsutil::remove_stale_temps_where(dir, |owner, _, m| owner == name && stale(m)) {
        Ok(removed) => {
            for p in removed {
                log::info!("audit: removed {}, left by a write cut short", p.display());
            }
        }
        Err(e) => log::warn!("audit: {e}"),
    }
}

/// The kept pods the file at `path` holds; nothing, with a warning naming it, when it cannot be read or
/// is not ours. Only reads.
pub fn load(path: &Path) -> BTreeMap<String, First> {
    match read(path).and_then(|t| {
        t.map(|t| kept::decode(&t))
            .transpose()
            .map_err(crate::Error::other)
    }) {
        Ok(Some(pods)) => {
            log::info!(
                "audit: {} kept decisions read from {}",
                pods.len(),
                path.display()
            );
            pods
        }
        Ok(None) => BTreeMap::new(),
        Err(e) => {
            log::warn!(
                "audit: the kept decisions in {} are not used ({e}); each running pod is decided from \
                 the pod as it is now",
                path.display()
            );
            BTreeMap::new()
        }
    }
}

/// The file's text: `None` when there is none; a non-regular or oversized file is an error.
fn read(path: &Path) -> Result<Option<String>> {
    use std::io::Read;
    let what = || format!("read {}", path.display());
    let Some(f) = crate::fsutil::existing(std::fs::File::open(path), what)? else {
        return Ok(None);
    };
    let meta = f.metadata().io_context(what)?;
    if !meta.is_file() {
        return Err(crate::Error::other("not a regular file"));
    }
    let mut buf = Vec::new();
    f.take(kept::MAX_BYTES as u64 + 1)
        .read_to_end(&mut buf)
        .io_context(what)?;
    if buf.len() > kept::MAX_BYTES {
        return Err(crate::Error::other(format!(
            "over the {}-byte bound",
            kept::MAX_BYTES
        )));
    }
    String::from_utf8(buf)
        .map(Some)
        .map_err(|_| crate::Error::other("not UTF-8"))
}

/// One kept pod as a write takes it from the store: key, UID, pod IP, the reduced pod while held.
type Entry = (String, String, String, Option<Arc<str>>);

/// Writes the store's kept pods to `path` when they changed (before the first list is complete, with the
/// pods kept before a restart and not seen yet); `Some` with what was written when it wrote. A pod's reduced pod is held by the store until it is written, then
/// let go: later writes carry its line over from the file ([`kept::encode`]). On a failure the change
/// stays marked (the next call tries again).
pub fn save(store: &Shared, path: &Path) -> Result<Option<kept::Counts>> {
    // One write at a time (the writer thread, and the watch thread when it holds many): each renames a
    // whole file over the last, so two at once could put an older one last.
    static WRITING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = WRITING.lock().unwrap_or_else(|e| e.into_inner());
    let live: Vec<Entry> = {
        let mut s = lock(store);
        if !s.changed {
            return Ok(None);
        }
        s.changed = false;
        let pods = (s.pods.iter()).map(|(k, p)| (k, &p.facts.uid, &p.facts.pod_ip, &p.first));
        let skipped = (s.skipped.iter()).map(|(k, p)| (k, &p.uid, &p.pod_ip, &p.first));
        // Before the first list is complete, the pods kept before a restart and not seen yet stay in
        // the file as they were (the list may still show them).
        let restored: Vec<(&String, &String, &String, Option<Arc<str>>)> = (s.restored.iter())
            .filter(|_| !s.listed)
            .map(|(k, f)| (k, &f.uid, &f.pod_ip, Some(f.body.clone())))
            .collect();
        let mut v: Vec<Entry> = pods
            .chain(skipped)
            .map(|(k, u, i, b)| (k.clone(), u.clone(), i.clone(), b.clone()))
            .chain(
                restored
                    .into_iter()
                    .map(|(k, u, i, b)| (k.clone(), u.clone(), i.clone(), b)),
            )
            .collect();
        // Each map is in key order and they hold different keys: merged, the file is in key order.
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    };
    // The last file: the lines of the pods written before, read line by line as the new one is written
    // (unreadable: they are left out, counted). Bounded: a line is at most the file's bound.
    let old = std::fs::File::open(path).ok().map(|f| {
        use std::io::BufRead;
        std::io::BufReader::new(std::io::Read::take(f, kept::MAX_BYTES as u64)).lines()
    });
    let old = old.into_iter().flatten().map_while(|l| l.ok());
    let live_pods = live.iter().map(|(key, uid, pod_ip, body)| kept::Live {
        key,
        uid,
        pod_ip,
        body: body.as_deref(),
    });
    let mut counts = kept::Counts::default();
    let written = crate::fsutil::replace_with(path, 0o600, |f, tmp| {
        let mut w = std::io::BufWriter::new(f);
        counts = kept::write(live_pods, old, &mut w)
            .and_then(|c| std::io::Write::flush(&mut w).map(|()| c))
            .io_context(|| format!("write temp file {}", tmp.display()))?;
        Ok(())
    });
    if let Err(e) = written {
        lock(store).changed = true;
        return Err(e);
    }
    // Written: the store lets go of each pod it held for it, unless it was replaced meanwhile.
    let mut s = lock(store);
    for (key, uid, pod_ip, body) in &live {
        let Some(body) = body else { continue };
        let written = |u: &str, i: &str, b: &Option<Arc<str>>| {
            u == uid && i == pod_ip && b.as_ref().is_some_and(|b| Arc::ptr_eq(b, body))
        };
        if let Some(p) = s.pods.get_mut(key) {
            if written(&p.facts.uid, &p.facts.pod_ip, &p.first) {
                p.first = None;
            }
        }
        if let Some(p) = s.skipped.get_mut(key) {
            if written(&p.uid, &p.pod_ip, &p.first) {
                p.first = None;
            }
        }
    }
    s.held = (s.pods.values().filter(|p| p.first.is_some()).count())
        + (s.skipped.values().filter(|p| p.first.is_some()).count());
    Ok(Some(counts))
}

/// On the watch thread, after a pod event: when the store holds [`super::HELD_WRITE`] reduced pods or
/// more and keeps them somewhere, writes them now ([`save`]) instead of at the writer's next turn, so a
/// node's first list never holds a copy of every pod. A failure is the writer's to report (it tries
/// again, the change stays marked).
pub fn write_held(store: &Shared) {
    let path = {
        let s = lock(store);
        match &s.keep {
            Some(p) if s.held >= super::HELD_WRITE => p.clone(),
            _ => return,
        }
    };
    if let Err(e) = save(store, &path) {
        log::debug!(
            "audit: writing the kept decisions from the watch failed (the writer retries): {e}"
        );
    }
}

/// Starts the writer: [`save`] every [`DEBOUNCE`]; a failure or pods left out are logged when they
/// start, not on every write.
pub fn spawn(store: Shared, path: PathBuf) -> Result<()> {
    std::thread::Builder::new()
        .name("audit-keep".into())
        .spawn(move || {
            let (mut failing, mut left_out) = (false, 0);
            loop {
                std::thread::sleep(DEBOUNCE);
                match save(&store, &path) {
                    Ok(None) => {}
                    Ok(Some(enc)) => {
                        failing = false;
                        log::debug!(
                            "audit: {} kept decisions written to {}",
                            enc.kept,
                            path.display()
                        );
                        if enc.left_out > 0 && left_out == 0 {
                            log::warn!(
                                "audit: {} pods' kept decisions left out of {} (bounds: {} pods, {} \
                                 bytes, {} bytes a pod): after a restart they are decided from the pod \
                                 as it is then",
                                enc.left_out,
                                path.display(),
                                kept::MAX_ENTRIES,
                                kept::MAX_BYTES,
                                kept::MAX_POD_BYTES
                            );
                        }
                        left_out = enc.left_out;
                    }
                    Err(e) => {
                        if !std::mem::replace(&mut failing, true) {
                            log::warn!(
                                "audit: could not keep the decisions across a restart (retried every \
                                 {}s): {e}",
                                DEBOUNCE.as_secs()
                            );
                        }
                    }
                }
            }
        })
        .map(|_| ())
        .map_err(|e| crate::Error::io("audit: spawn its kept-decisions writer", e))
}

#[cfg(test)]
#[path = "persist_tests.rs"]
mod tests;
