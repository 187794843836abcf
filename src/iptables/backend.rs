//! Which iptables backend to use: `nft` (iptables-nft), `legacy` (iptables-legacy) or `plain` (whatever
//! `iptables` is). The installer detects the host's backend once and records it in
//! `<cni_agent_run_dir>/iptables-backend`; the plugin reads that file instead of probing on every ADD, and
//! probes only when it is absent.
//!
//! Detection follows Kubernetes' iptables-wrapper: the backend that already holds more rules on the host wins
//! (kube-proxy and the primary CNI have programmed it); with no rules anywhere, nft.

use super::tool;
use crate::error::{Error, Result};
use crate::netfilter::Family;
use crate::rundir::RunDir;
use std::path::Path;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Nft,
    Legacy,
    /// Only unsuffixed `iptables-restore` exists (old distributions).
    Plain,
}

impl Backend {
    pub fn name(self) -> &'static str {
        match self {
            Backend::Nft => "nft",
            Backend::Legacy => "legacy",
            Backend::Plain => "plain",
        }
    }

    pub fn parse(s: &str) -> Result<Backend> {
        match s.trim() {
            "nft" => Ok(Backend::Nft),
            "legacy" => Ok(Backend::Legacy),
            "plain" => Ok(Backend::Plain),
            other => Err(Error::config(format!(
                "unknown iptables backend {other:?} (expected nft, legacy or plain)"
            ))),
        }
    }

    /// FORCE_IPTABLES_BINARY's values (upstream names the binary): `iptables-nft`, `iptables-legacy`,
    /// `iptables` (also the `ip6tables` spellings and our record's `nft`, `legacy`, `plain`).
    pub fn from_binary_name(s: &str) -> Option<Backend> {
        let t = s.trim();
        let t = t.rsplit('/').next().unwrap_or(t);
        let t = t
            .strip_suffix("-restore")
            .or_else(|| t.strip_suffix("-save"))
            .unwrap_or(t);
        match t {
            "iptables-nft" | "ip6tables-nft" | "nft" => Some(Backend::Nft),
            "iptables-legacy" | "ip6tables-legacy" | "legacy" => Some(Backend::Legacy),
            "iptables" | "ip6tables" | "plain" => Some(Backend::Plain),
            _ => None,
        }
    }

    /// The command for `family` (`iptables-nft`, `ip6tables-legacy`, `iptables`, ...).
    pub fn command(self, family: Family) -> String {
        let base = match family {
            Family::V4 => "iptables",
            Family::V6 => "ip6tables",
        };
        match self {
            Backend::Nft => format!("{base}-nft"),
            Backend::Legacy => format!("{base}-legacy"),
            Backend::Plain => base.to_string(),
        }
    }

    /// The program for `tool` ("restore" or "save") in `family`.
    pub fn program(self, family: Family, tool: &str) -> String {
        format!("{}-{tool}", self.command(family))
    }

    /// Legacy iptables serialises on a lock file; nft does not lock.
    pub fn uses_lock(self) -> bool {
        !matches!(self, Backend::Nft)
    }
}

/// Reads the recorded backend, if the installer wrote one.
pub fn read_record(run_dir: &Path) -> Result<Option<Backend>> {
    let p = RunDir::new(run_dir).iptables_backend();
    match std::fs::read_to_string(&p) {
        Ok(s) => Backend::parse(&s)
            .map(Some)
            .map_err(|e| Error::config(format!("{}: {e}", p.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io(format!("read {}", p.display()), e)),
    }
}

/// Records `forced` (FORCE_IPTABLES_BINARY), else the detected host backend, in `run_dir` (atomically),
/// and whether the plugin runs the node's binaries (IPTABLES_NODE_BINARIES: the record file present).
/// Called once by the installer; with `forced` nothing is probed.
pub fn record_host_backend(
    run_dir: &Path,
    forced: Option<Backend>,
    node_binaries: bool,
) -> Result<String> {
    let b = match forced {
        Some(b) => {
            log::info!(
                "iptables backend forced by FORCE_IPTABLES_BINARY: {}",
                b.name()
            );
            b
        }
        None => detect_host()?,
    };
    let dir = RunDir::new(run_dir);
    let flag = dir.iptables_node_binaries();
    if node_binaries {
        crate::fsutil::write_atomic(&flag, b"true\n", 0o644)?;
        crate::rundir::claim(&flag);
    } else {
        match std::fs::remove_file(&flag) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io(format!("remove {}", flag.display()), e)),
        }
    }
    let record = dir.iptables_backend();
    crate::fsutil::write_atomic(&record, format!("{}\n", b.name()).as_bytes(), 0o644)?;
    // This agent's record: its cleanup removes it only while it is still this file.
    crate::rundir::claim(&record);
    let via = if node_binaries {
        ", through the node's binaries"
    } else {
        ""
    };
    Ok(format!("{}{via}", b.name()))
}

/// Whether the installer asked the plugin to run the node's iptables binaries (IPTABLES_NODE_BINARIES).
pub fn node_binaries(run_dir: &Path) -> bool {
    RunDir::new(run_dir).iptables_node_binaries().exists()
}

/// The recorded backend, or a detection when there is no record. The plugin then records what it found
/// (best effort), so only the first ADD on a node pays for the probe: the installer runs in an image with
/// no iptables of its own and can only record the backend when it is given the node's root.
pub fn for_plugin(run_dir: &Path) -> Result<Backend> {
    if let Some(b) = read_record(run_dir)? {
        return Ok(b);
    }
    log::info!(
        "no {} in {}: detecting the iptables backend",
        RunDir::IPTABLES_BACKEND,
        run_dir.display()
    );
    let b = detect_host()?;
    if run_dir.is_dir() {
        let record = RunDir::new(run_dir).iptables_backend();
        if let Err(e) =
            crate::fsutil::write_atomic(&record, format!("{}\n", b.name()).as_bytes(), 0o644)
        {
            log::warn!(
                "could not record the iptables backend in {}: {e}",
                record.display()
            );
        }
    }
    Ok(b)
}

/// The recorded backend, or a detection when there is no record, for the node's agents (repair in place,
/// the audit): never recorded. They run in the installer's process, whose teardown removes the record it
/// wrote; an audit round recording it again meanwhile would leave a record nobody removes.
pub fn for_agent(run_dir: &Path) -> Result<Backend> {
    match read_record(run_dir)? {
        Some(b) => Ok(b),
        None => detect_host(),
    }
}

/// Rules in the legacy x_tables of the current namespace, both families (no table is instantiated by
/// asking); None when they cannot be read.
fn legacy_rules() -> Option<usize> {
    let mut n = 0;
    for f in crate::netfilter::FAMILIES {
        match crate::xtables::read(f) {
            Ok(tables) => {
                n += tables
                    .iter()
                    .flat_map(|(_, c)| c.values())
                    .map(Vec::len)
                    .sum::<usize>()
            }
            Err(e) => {
                log::debug!("legacy iptables ({}) not readable: {e}", f.name());
                return None;
            }
        }
    }
    Some(n)
}

/// Rules in iptables-nft's tables (`ip`/`ip6` filter, nat, mangle, raw, security) of the current
/// namespace, counted from a netlink dump without decoding them; None when nf_tables cannot be read.
fn nft_rules() -> Option<usize> {
    use crate::nftables::{encode, socket::Socket};
    let mut s = Socket::open().ok()?;
    let mut n = 0;
    for family in crate::netfilter::FAMILIES {
        for table in crate::xtables::TABLES {
            let mut a = encode::Attrs::default();
            a.str(encode::NFTA_RULE_TABLE, table);
            let seq = s.next_seq(1);
            let req = encode::dump_request(encode::NFT_MSG_GETRULE, family.nfproto(), seq, &a);
            let mut count = |_: &crate::nftables::decode::Msg| -> Result<()> {
                n += 1;
                Ok(())
            };
            // A dump filtered by a table that does not exist lists nothing (no error).
            if let Err(e) = s.dump("count iptables-nft rules", &req, &mut count) {
                log::debug!("iptables-nft rules not readable: {e}");
                return None;
            }
        }
    }
    Some(n)
}

/// iptables-wrapper's rule: more legacy rules than nft rules (v4 + v6) ⇒ legacy, else nft.
pub fn choose(legacy: Option<usize>, nft: Option<usize>) -> Result<Backend> {
    match (legacy, nft) {
        (Some(l), Some(n)) if l > n => Ok(Backend::Legacy),
        (_, Some(_)) => Ok(Backend::Nft),
        (Some(_), None) => Ok(Backend::Legacy),
        (None, None) => Err(Error::other(
            "neither nf_tables nor the legacy x_tables of this node could be read: is netfilter available in this kernel?",
        )),
    }
}

/// Which x_tables backend the host's rules are in (iptables-wrapper's rule), read from the kernel in the
/// current namespace (the host's: the installer and the plugin run in it).
pub fn detect_host() -> Result<Backend> {
    let (legacy, nft) = (legacy_rules(), nft_rules());
    let b = choose(legacy, nft)?;
    log::info!("{}", detection_summary(b, legacy, nft));
    Ok(b)
}

/// What the detection found, for the log: the rule counts each backend's `-save` reported.
fn detection_summary(b: Backend, legacy: Option<usize>, nft: Option<usize>) -> String {
    let count = |n: Option<usize>, what: &str| match n {
        Some(n) => format!("{n} {what} rules"),
        None => format!("{what} rules unreadable"),
    };
    format!(
        "iptables backend: {} ({}, {}; legacy only with more legacy rules)",
        b.name(),
        count(nft, "nft"),
        count(legacy, "legacy")
    )
}

/// The backend's tool for `family` on `PATH` (IPTABLES_NODE_BINARIES), with an error that says what to
/// install.
pub fn require(b: Backend, family: Family, tool: &str) -> Result<tool::Tool> {
    let prog = b.program(family, tool);
    tool::find(&prog).ok_or_else(|| {
        Error::other(format!(
            "{prog} not found on PATH ({} backend, {}; IPTABLES_NODE_BINARIES is set): install iptables on the node",
            b.name(),
            family.name()
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrapper_rule() {
        assert_eq!(choose(Some(10), Some(2)).unwrap(), Backend::Legacy);
        assert_eq!(choose(Some(2), Some(2)).unwrap(), Backend::Nft);
        assert_eq!(choose(Some(0), Some(0)).unwrap(), Backend::Nft);
        assert_eq!(choose(None, Some(0)).unwrap(), Backend::Nft);
        assert_eq!(choose(Some(0), None).unwrap(), Backend::Legacy);
        // The log line says the counts in words, never `Some(0)`.
        assert_eq!(
            detection_summary(Backend::Nft, Some(0), Some(0)),
            "iptables backend: nft (0 nft rules, 0 legacy rules; legacy only with more legacy rules)"
        );
        assert_eq!(
            detection_summary(Backend::Legacy, Some(3), None),
            "iptables backend: legacy (nft rules unreadable, 3 legacy rules; legacy only with more legacy rules)"
        );
        let e = choose(None, None).unwrap_err().to_string();
        assert!(
            e.contains("neither nf_tables nor the legacy x_tables"),
            "{e}"
        );
    }

    #[test]
    fn programs() {
        assert_eq!(
            Backend::Nft.program(Family::V6, "restore"),
            "ip6tables-nft-restore"
        );
        assert_eq!(
            Backend::Legacy.program(Family::V4, "save"),
            "iptables-legacy-save"
        );
        assert_eq!(
            Backend::Plain.program(Family::V4, "restore"),
            "iptables-restore"
        );
        assert!(Backend::parse("ebpf").is_err());
        assert_eq!(Backend::parse("legacy\n").unwrap(), Backend::Legacy);
    }

    #[test]
    fn forced_binary_names() {
        for (name, want) in [
            ("iptables-legacy", Some(Backend::Legacy)),
            ("iptables-nft", Some(Backend::Nft)),
            ("/usr/sbin/iptables-nft-restore", Some(Backend::Nft)),
            ("iptables", Some(Backend::Plain)),
            ("legacy", Some(Backend::Legacy)),
            ("nftables", None),
        ] {
            assert_eq!(Backend::from_binary_name(name), want, "{name}");
        }
    }

    /// The agents read the record, and without one detect without recording: a record only the installer
    /// (claimed, removed at its teardown) or the plugin writes.
    #[test]
    fn agents_never_record_the_backend() {
        let dir = crate::fsutil::test_dir("backend-agent");
        let record = RunDir::new(&dir).iptables_backend();
        let _ = for_agent(&dir);
        assert!(!record.exists(), "an agent recorded the backend");
        std::fs::write(&record, "legacy\n").unwrap();
        assert_eq!(for_agent(&dir).unwrap(), Backend::Legacy);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A forced backend is recorded as given, without probing (a detection would need iptables tools and
    /// could pick another backend); the plugin then reads exactly that record.
    #[test]
    fn forced_backend_is_recorded_without_detection() {
        let dir = crate::fsutil::test_dir("backend-forced");
        for b in [Backend::Legacy, Backend::Plain, Backend::Nft] {
            assert_eq!(record_host_backend(&dir, Some(b), false).unwrap(), b.name());
            assert_eq!(read_record(&dir).unwrap(), Some(b));
            assert_eq!(for_plugin(&dir).unwrap(), b);
            assert!(!node_binaries(&dir));
        }
        // IPTABLES_NODE_BINARIES is its own record, and a later install without it takes it away.
        let said = record_host_backend(&dir, Some(Backend::Nft), true).unwrap();
        assert_eq!(said, "nft, through the node's binaries");
        assert_eq!(read_record(&dir).unwrap(), Some(Backend::Nft));
        assert!(node_binaries(&dir));
        record_host_backend(&dir, Some(Backend::Nft), false).unwrap();
        assert!(!node_binaries(&dir));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
