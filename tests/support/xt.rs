//! What the root tests of iptables mode without exec share (`tests/root/xt_*.rs`): the conformance
//! documents, the owner groups the goldens name, and the node's own `iptables-*-restore` of a document
//! (the reference), with those groups in a private /etc/group.

use super::{conformance_dir, sh, Netns, TempDir};
use istio_cni::netfilter::Family;
use istio_cni::xtables::rule::OwnerKind;
use std::path::PathBuf;
use std::process::Output;

/// GIDs the owner-group cases' groups get, for our parser and (in a private /etc/group) the node's tools.
pub const GROUPS: [(&str, u32); 2] = [("java", 7001), ("ftp", 7002)];

/// [`GROUPS`] as our parser's name resolver.
pub fn names(kind: OwnerKind, name: &str) -> istio_cni::Result<u32> {
    GROUPS
        .iter()
        .find(|(n, _)| kind == OwnerKind::Gid && *n == name)
        .map(|(_, g)| *g)
        .ok_or_else(|| istio_cni::Error::other(format!("unknown name {name}")))
}

/// Every conformance iptables document: the capture cases' v4 and v6 goldens and the pod cases' rules (v4),
/// sorted by path.
pub fn documents() -> Vec<(PathBuf, Family)> {
    let mut out = Vec::new();
    for (kind, files) in [
        (
            "capture",
            &[
                ("expected.v4.rules", Family::V4),
                ("expected.v6.rules", Family::V6),
            ][..],
        ),
        ("pod", &[("expected.rules", Family::V4)][..]),
    ] {
        for e in std::fs::read_dir(conformance_dir().join(kind)).unwrap() {
            let case = e.unwrap().path();
            for (f, fam) in files {
                if case.join(f).is_file() {
                    out.push((case.join(f), *fam));
                }
            }
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    assert!(
        out.len() >= 32,
        "expected 26 capture and 6 pod documents, found {}",
        out.len()
    );
    out
}

/// `iptables` or `ip6tables`.
pub fn prefix(family: Family) -> &'static str {
    match family {
        Family::V4 => "iptables",
        Family::V6 => "ip6tables",
    }
}

/// The node's `{ip,ip6}tables-{backend}-restore --noflush` of `doc` in `ns`, with [`GROUPS`] in a private
/// /etc/group; its output (not checked).
pub fn node_restore(ns: &Netns, backend: &str, family: Family, doc: &str, tmp: &TempDir) -> Output {
    let mut groups = std::fs::read_to_string("/etc/group").unwrap();
    for (n, g) in GROUPS {
        groups.push_str(&format!("{n}:x:{g}:\n"));
    }
    let gfile = tmp.write("group", groups);
    let dfile = tmp.write("doc.rules", doc);
    let cmd = format!(
        "mount --bind {} /etc/group && ip netns exec {} {}-{backend}-restore --noflush < {}",
        gfile.display(),
        ns.name(),
        prefix(family),
        dfile.display()
    );
    sh("unshare", &["-m", "sh", "-c", &cmd])
}

/// [`node_restore`] that must succeed.
pub fn node_restore_ok(ns: &Netns, backend: &str, family: Family, doc: &str, tmp: &TempDir) {
    let o = node_restore(ns, backend, family, doc, tmp);
    assert!(
        o.status.success(),
        "{}-{backend}-restore failed: {}\n{doc}",
        prefix(family),
        String::from_utf8_lossy(&o.stderr)
    );
}
