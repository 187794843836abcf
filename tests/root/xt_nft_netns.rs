//! iptables-nft without exec (`istio_cni::iptables::nft`) against real namespaces and the node's own
//! iptables-nft (1.8.9 on Debian 12): what our `restore` writes, `iptables-nft-save` prints exactly as it
//! prints what `iptables-nft-restore --noflush` writes from the same document; our `save` reads back what
//! either wrote to the same models; `-N` of an existing chain fails the whole batch and changes nothing.

use crate::support::xt::{documents, names, node_restore_ok};
use crate::support::{conformance_dir, require_root, Netns, TempDir};
use istio_cni::iptables::nft;
use istio_cni::netfilter::is_builtin;
use istio_cni::netfilter::Family::{self, V4, V6};
use istio_cni::xtables::rule::*;
use istio_cni::xtables::spec;

fn restore_in(ns: &Netns, family: Family, doc: Vec<TableOps>) -> istio_cni::Result<()> {
    istio_cni::netns::run_in(&ns.path(), move || nft::restore(family, &doc))
}

fn save_in(ns: &Netns, family: Family) -> Vec<Table> {
    istio_cni::netns::run_in(&ns.path(), move || nft::save(family)).unwrap()
}

/// `*-save` output without comment lines.
fn node_save(ns: &Netns, prog: &str) -> String {
    let out = ns.exec_ok(&[prog]);
    out.lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect()
}

fn tcp_ret(port: u16) -> Rule {
    Rule {
        proto: Some(TCP),
        matches: vec![Match::Port {
            dir: PortDir::Dst,
            port,
            inv: false,
        }],
        target: Target::Return,
        ..Rule::any()
    }
}

fn redirect(port: u16) -> Rule {
    Rule {
        proto: Some(TCP),
        target: Target::Redirect { port },
        ..Rule::any()
    }
}

fn small_doc() -> Vec<TableOps> {
    vec![TableOps {
        table: "nat".into(),
        ops: vec![
            Op::NewChain("ISTIO_REDIRECT".into()),
            Op::NewChain("ISTIO_INBOUND".into()),
            Op::Append("ISTIO_REDIRECT".into(), redirect(15001)),
            Op::Append("ISTIO_INBOUND".into(), tcp_ret(15020)),
            Op::Append(
                "OUTPUT".into(),
                Rule {
                    target: Target::Jump("ISTIO_REDIRECT".into()),
                    ..Rule::any()
                },
            ),
        ],
    }]
}

#[test]
fn a_hand_built_document_reads_back_in_iptables_nft_save() {
    if !require_root() {
        return;
    }
    let ns = Netns::new("xtnft-small");
    restore_in(&ns, V4, small_doc()).unwrap();
    assert_eq!(
        node_save(&ns, "iptables-nft-save"),
        "*nat\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n\
         :POSTROUTING ACCEPT [0:0]\n:ISTIO_INBOUND - [0:0]\n:ISTIO_REDIRECT - [0:0]\n\
         -A OUTPUT -j ISTIO_REDIRECT\n-A ISTIO_INBOUND -p tcp -m tcp --dport 15020 -j RETURN\n\
         -A ISTIO_REDIRECT -p tcp -j REDIRECT --to-ports 15001\nCOMMIT\n"
    );
    let saved = save_in(&ns, V4);
    let names: Vec<&str> = saved[0].chains.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "PREROUTING",
            "INPUT",
            "OUTPUT",
            "POSTROUTING",
            "ISTIO_INBOUND",
            "ISTIO_REDIRECT"
        ]
    );
    assert_eq!(saved[0].chains[4].rules, [tcp_ret(15020)]);
    assert_eq!(saved[0].chains[5].rules, [redirect(15001)]);

    // A second restore fails on -N (EXCL), names the chain, and changes nothing.
    let before = node_save(&ns, "iptables-nft-save");
    let e = restore_in(&ns, V4, small_doc()).unwrap_err().to_string();
    assert!(
        e.contains("ISTIO_REDIRECT") && e.contains("already exists"),
        "{e}"
    );
    assert_eq!(node_save(&ns, "iptables-nft-save"), before);

    // A policy iptables-nft never sets is named (the rule model cannot show it).
    ns.exec_ok(&["nft", "add chain ip nat OUTPUT { policy drop ; }"]);
    let odd = istio_cni::netns::run_in(&ns.path(), || nft::incompatible_chains(V4)).unwrap();
    assert_eq!(odd, ["chain OUTPUT of table ip nat has policy DROP"]);
}

#[test]
fn inserts_and_deletes_land_where_iptables_puts_them() {
    if !require_root() {
        return;
    }
    for (family, save) in [(V4, "iptables-nft-save"), (V6, "ip6tables-nft-save")] {
        let ns = Netns::new("xtnft-ins");
        restore_in(&ns, family, small_doc()).unwrap();
        let c = || "ISTIO_INBOUND".to_string();
        let doc = vec![TableOps {
            table: "nat".into(),
            ops: vec![
                Op::Insert(c(), 1, tcp_ret(1)),
                Op::Insert(c(), 3, tcp_ret(2)),
                Op::Insert(c(), 2, tcp_ret(3)),
                Op::Delete(c(), tcp_ret(15020)),
                Op::Append(c(), tcp_ret(4)),
                Op::Insert(c(), 5, tcp_ret(5)),
            ],
        }];
        restore_in(&ns, family, doc).unwrap();
        let text = node_save(&ns, save);
        let rules: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("-A ISTIO_INBOUND"))
            .collect();
        let want: Vec<String> = [1, 3, 2, 4, 5]
            .iter()
            .map(|p| format!("-A ISTIO_INBOUND -p tcp -m tcp --dport {p} -j RETURN"))
            .collect();
        assert_eq!(rules, want, "{family:?}\n{text}");
        let saved = save_in(&ns, family);
        let inbound = saved[0].chains.iter().find(|c| c.name == "ISTIO_INBOUND");
        let want: Vec<Rule> = [1, 3, 2, 4, 5].iter().map(|p| tcp_ret(*p)).collect();
        assert_eq!(inbound.unwrap().rules, want);
        // A delete of a rule that is not there fails and changes nothing.
        let doc = vec![TableOps {
            table: "nat".into(),
            ops: vec![Op::Flush(c()), Op::Delete(c(), tcp_ret(1))],
        }];
        let e = restore_in(&ns, family, doc).unwrap_err().to_string();
        assert!(e.contains("-D ISTIO_INBOUND"), "{e}");
        assert_eq!(node_save(&ns, save), text);
    }
}

fn tool(family: Family, what: &str) -> String {
    match family {
        V4 => format!("iptables-nft-{what}"),
        V6 => format!("ip6tables-nft-{what}"),
    }
}

fn ours(family: Family, doc: &str) -> Vec<TableOps> {
    spec::parse_doc(family, doc, &names).unwrap()
}

#[test]
fn every_golden_saves_identically_to_the_node_tools_restore() {
    if !require_root() {
        return;
    }
    let tmp = TempDir::new("xtnft");
    for (path, family) in documents() {
        let doc = std::fs::read_to_string(&path).unwrap();
        let what = path.display();
        let a = Netns::new("xtnft-a");
        let b = Netns::new("xtnft-b");
        restore_in(&a, family, ours(family, &doc))
            .unwrap_or_else(|e| panic!("{what}: our restore: {e}"));
        node_restore_ok(&b, "nft", family, &doc, &tmp);
        let save = tool(family, "save");
        let text = node_save(&a, &save);
        assert_eq!(text, node_save(&b, &save), "{what}: iptables-nft-save");
        // Our reader: what the node's 1.8.9 wrote (native ports and mark) and what we wrote (1.8.7's
        // compat forms) are the same models, which render as the node's tool prints them.
        let (ta, tb) = (save_in(&a, family), save_in(&b, family));
        assert_eq!(ta, tb, "{what}: our save");
        assert_eq!(spec::save_text(family, &ta), text, "{what}: rendered");
        for ns in [&a, &b] {
            let odd =
                istio_cni::netns::run_in(&ns.path(), move || nft::incompatible_chains(family));
            assert_eq!(odd.unwrap(), Vec::<String>::new(), "{what}");
        }
        // Again: -N of our chains fails the whole batch (EXCL), and nothing changes.
        let e = restore_in(&a, family, ours(family, &doc))
            .unwrap_err()
            .to_string();
        assert!(e.contains("already exists"), "{what}: {e}");
        assert_eq!(
            node_save(&a, &save),
            text,
            "{what}: after the refused restore"
        );
    }
}

/// What `state::converge_document` makes of going from one golden to another (deletes in built-in
/// chains, flushes, chain deletions, appends, inserts at the top) gives the same rules through our
/// restore as through the node's tool, and both are the target golden's.
#[test]
fn converging_documents_apply_as_the_node_tool_applies_them() {
    if !require_root() {
        return;
    }
    let tmp = TempDir::new("xtnft-conv");
    let dir = conformance_dir();
    let pairs = [
        (
            "pod/basic/expected.rules",
            "pod/include-exclude-ip/expected.rules",
            V4,
        ),
        ("pod/tproxy/expected.rules", "pod/basic/expected.rules", V4),
        (
            "pod/dns/expected.rules",
            "pod/custom-uid/expected.rules",
            V4,
        ),
        (
            "capture/ipv6-uid-gid/expected.v6.rules",
            "capture/ipv6-dns-uid-gid/expected.v6.rules",
            V6,
        ),
    ];
    for (from, to, family) in pairs {
        let from_doc = std::fs::read_to_string(dir.join(from)).unwrap();
        let to_doc = std::fs::read_to_string(dir.join(to)).unwrap();
        let save = tool(family, "save");
        let (a, b, c) = (
            Netns::new("xtnft-ca"),
            Netns::new("xtnft-cb"),
            Netns::new("xtnft-cc"),
        );
        restore_in(&a, family, ours(family, &from_doc)).unwrap();
        node_restore_ok(&b, "nft", family, &from_doc, &tmp);
        node_restore_ok(&c, "nft", family, &to_doc, &tmp);
        let expected = istio_cni::iptables::save::parse(&node_save(&c, &save));
        let actual = istio_cni::iptables::save::parse(&node_save(&a, &save));
        let conv = istio_cni::iptables::state::converge_document(&to_doc, &expected, &actual);
        assert!(
            conv.contains("\n-D ") || conv.contains("\n-F "),
            "{from} -> {to}:\n{conv}"
        );
        restore_in(&a, family, ours(family, &conv))
            .unwrap_or_else(|e| panic!("{from} -> {to}: {e}\n{conv}"));
        node_restore_ok(&b, "nft", family, &conv, &tmp);
        let got = node_save(&a, &save);
        assert_eq!(got, node_save(&b, &save), "{from} -> {to}:\n{conv}");
        // A table the target never had stays behind, empty (as the node's tool leaves it).
        let tables = |t: Vec<Table>| -> Vec<Table> {
            t.into_iter()
                .filter(|t| {
                    t.chains
                        .iter()
                        .any(|c| !c.rules.is_empty() || !is_builtin(&c.name))
                })
                .collect()
        };
        let (ta, tc) = (tables(save_in(&a, family)), tables(save_in(&c, family)));
        assert_eq!(ta, tc, "{from} -> {to}: not converged\n{conv}");
        assert_eq!(
            spec::save_text(family, &ta),
            node_save(&c, &save),
            "{from} -> {to}"
        );
    }
}

/// A failure at the end of the batch (a jump to a chain that does not exist) undoes everything before it
/// and names the rule, its chain and table, and the kernel's reason.
#[test]
fn a_failing_rule_leaves_the_namespace_unchanged() {
    if !require_root() {
        return;
    }
    let ns = Netns::new("xtnft-fail");
    let mut doc = small_doc();
    doc.push(TableOps {
        table: "mangle".into(),
        ops: vec![Op::Append(
            "PREROUTING".into(),
            Rule {
                target: Target::Jump("NO_SUCH_CHAIN".into()),
                ..Rule::any()
            },
        )],
    });
    let e = restore_in(&ns, V4, doc).unwrap_err().to_string();
    assert!(
        e.contains("append to chain PREROUTING of table ip mangle: -j NO_SUCH_CHAIN")
            && e.contains("nothing was changed")
            && e.contains("No such file or directory"),
        "{e}"
    );
    assert_eq!(node_save(&ns, "iptables-nft-save"), "");
    assert_eq!(save_in(&ns, V4), []);
}
