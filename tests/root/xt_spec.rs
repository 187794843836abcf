//! Our text side of the exec-free iptables paths against the node's own tools (root): every conformance
//! document restored by the node's `iptables-nft-restore` and `iptables-legacy-restore` prints, per table
//! and chain, exactly the rules our parser and renderer make of the same document
//! (`istio_cni::xtables::spec`). This is what lets CHECK compare what the kernel holds without a scratch
//! namespace and without exec.

use crate::support::xt::{documents, names, node_restore_ok, prefix};
use crate::support::{require_root, Netns, TempDir};
use istio_cni::iptables::save;
use istio_cni::netfilter::Family;
use istio_cni::xtables::{ops, spec};
use std::collections::BTreeMap;
use std::path::Path;

/// Our model of the document applied to empty tables (`xtables::ops`): `(table, chain) -> rendered rules`.
fn ours(family: Family, doc: &str) -> BTreeMap<(String, String), Vec<String>> {
    let tables = ops::desired(family, &spec::parse_doc(family, doc, &names).unwrap()).unwrap();
    let mut out = BTreeMap::new();
    for t in tables {
        for c in t.chains.into_iter().filter(|c| !c.rules.is_empty()) {
            let rules = c.rules.iter().map(|r| spec::render(family, r)).collect();
            out.insert((t.name.clone(), c.name), rules);
        }
    }
    out
}

/// What the node's tool made of the document: restored with the test groups in a private /etc/group,
/// then saved; `(table, chain) -> rules` for chains with rules.
fn theirs(
    tool: &str,
    family: Family,
    path: &Path,
    tmp: &TempDir,
) -> BTreeMap<(String, String), Vec<String>> {
    let ns = Netns::new("xtspec");
    let doc = std::fs::read_to_string(path).unwrap();
    node_restore_ok(&ns, tool, family, &doc, tmp);
    let prefix = prefix(family);
    let text = ns.exec_ok(&[format!("{prefix}-{tool}-save")]);
    let mut out = BTreeMap::new();
    for (table, t) in save::parse(&text) {
        for (chain, rules) in t.chains {
            if !rules.is_empty() {
                out.insert((table.clone(), chain), rules);
            }
        }
    }
    out
}

#[test]
fn every_golden_renders_as_the_node_tools_save_it_nft_and_legacy() {
    require_root();
    let tmp = TempDir::new("xtspec");
    for (path, family) in documents() {
        let doc = std::fs::read_to_string(&path).unwrap();
        let want = ours(family, &doc);
        for tool in ["nft", "legacy"] {
            let got = theirs(tool, family, &path, &tmp);
            assert_eq!(got, want, "{} through iptables-{tool}", path.display());
        }
    }
}
