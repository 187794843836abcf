//! Whether the node tools need files-only NSS (see [`super::tool::Tool::command`]).

use std::path::{Path, PathBuf};

/// NSS sources that answer locally and quickly; anything else (ldap, sss, nis, winbind, ...) may need the
/// network, and then every iptables child gets the isolation described in [`super::tool::Tool::command`].
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
pub fn isolate_nss(root: Option<&Path>) -> bool {
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
