//! iptables-nft without exec (`istio_cni::xtables::nft`) against real namespaces and the node's own
//! iptables-nft (1.8.9 on Debian 12): what our `restore` writes, `iptables-nft-save` prints exactly as it
//! prints what `iptables-nft-restore --noflush` writes from the same document; our `save` reads back what
//! either wrote to the same models; `-N` of an existing chain fails the whole batch and changes nothing.

use crate::support::{require_root, Netns};
use istio_cni::netfilter::Family::{self, V4, V6};
use istio_cni::xtables::nft;
use istio_cni::xtables::rule::*;

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
