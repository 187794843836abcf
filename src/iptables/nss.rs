//! Whether the node tools need files-only NSS (see [`super::tool::Tool::command`]).

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

/// [`nss_may_block`] for our own root's nsswitch.conf: a tool run through the node's loader reads ours too,
/// so that is the one that counts. Read once per process: a dual-stack ADD starts two iptables children.
pub fn isolate_nss() -> bool {
    static SEEN: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *SEEN.get_or_init(|| {
        let path = "/etc/nsswitch.conf";
        let isolate = std::fs::read_to_string(path)
            .map(|t| nss_may_block(&t))
            .unwrap_or(false);
        if isolate {
            log::debug!("{path} names a remote passwd/group source: iptables get files-only NSS");
        }
        isolate
    })
}
