//! The document → steps planning: built-in chains created on first use, `-I` positions through rules of
//! the same batch and existing ones, `-D` by the first equal rule, and the errors.

use super::builtin;
use super::plan::{plan, CurrentChain, CurrentTable, Step};
use crate::netfilter::Family::V4;
use crate::xtables::rule::*;

fn ret(port: u16) -> Rule {
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

fn doc(table: &str, ops: Vec<Op>) -> Vec<TableOps> {
    vec![TableOps {
        table: table.into(),
        ops,
    }]
}

/// `(kind, chain, id, append, after)` of each step, for short assertions.
fn shape(steps: &[Step]) -> Vec<String> {
    steps
        .iter()
        .map(|s| match s {
            Step::Table(t) => format!("table {t}"),
            Step::Wake(t) => format!("wake {t}"),
            Step::NewChain { chain, .. } => format!("new {chain}"),
            Step::BaseChain { chain, .. } => format!("base {}", chain.name),
            Step::Flush { chain, .. } => format!("flush {chain}"),
            Step::DeleteChain { chain, .. } => format!("delete {chain}"),
            Step::Rule {
                chain,
                id,
                append,
                after,
                ..
            } => format!("rule {chain} #{id} append={append} after={after:?}"),
            Step::DeleteRule { chain, which, .. } => format!("del {chain} {which:?}"),
        })
        .collect()
}

#[test]
fn base_chains_are_created_on_first_use_with_iptables_nft_parameters() {
    let d = doc(
        "mangle",
        vec![
            Op::NewChain("ISTIO_DIVERT".into()),
            Op::Append("OUTPUT".into(), ret(1)),
            Op::Append("OUTPUT".into(), ret(2)),
            Op::Append("ISTIO_DIVERT".into(), ret(3)),
        ],
    );
    let steps = plan(V4, &d, None).unwrap();
    assert_eq!(
        shape(&steps),
        [
            "table mangle",
            "new ISTIO_DIVERT",
            "base OUTPUT",
            "rule OUTPUT #1 append=true after=None",
            "rule OUTPUT #2 append=true after=None",
            "rule ISTIO_DIVERT #3 append=true after=None",
            "wake mangle",
        ]
    );
    let out = builtin::find("mangle", "OUTPUT").unwrap();
    assert_eq!((out.hooknum, out.priority, out.kind), (3, -150, "route"));
    assert!(matches!(&steps[2], Step::BaseChain { chain, .. } if *chain == out));
}

#[test]
fn inserts_follow_the_chain_through_the_document() {
    let cur = [CurrentTable {
        dormant: false,
        name: "mangle".into(),
        chains: vec![CurrentChain {
            name: "ISTIO_INBOUND".into(),
            base: false,
            rules: vec![(7, ret(10)), (9, ret(11))],
            hook: None,
            policy: None,
        }],
    }];
    let c = || "ISTIO_INBOUND".to_string();
    let d = doc(
        "mangle",
        vec![
            Op::Insert(c(), 1, ret(1)),
            Op::Insert(c(), 2, ret(2)),
            Op::Insert(c(), 3, ret(3)),
            Op::Insert(c(), 5, ret(4)),
            Op::Delete(c(), ret(11)),
            Op::Delete(c(), ret(2)),
            Op::Insert(c(), 5, ret(5)),
        ],
    );
    let steps = plan(V4, &d, Some(&cur)).unwrap();
    assert_eq!(
        shape(&steps),
        [
            "table mangle",
            "rule ISTIO_INBOUND #1 append=false after=None",
            "rule ISTIO_INBOUND #2 append=true after=Some(Id(1))",
            "rule ISTIO_INBOUND #3 append=true after=Some(Id(2))",
            // 1 2 3 10 -> after the 4th rule, the existing one with handle 7
            "rule ISTIO_INBOUND #4 append=true after=Some(Handle(7))",
            "del ISTIO_INBOUND Handle(9)",
            "del ISTIO_INBOUND Id(2)",
            // 1 3 10 4 -> after the 4th: rule #4 of this batch (insert at the end)
            "rule ISTIO_INBOUND #5 append=true after=Some(Id(4))",
            "wake mangle",
        ]
    );
    // Only named rules carry their id; the one deleted by id too.
    let b = super::batch::encode(V4, &steps, Some(3), 100);
    assert_eq!(b.what.len(), steps.len());
    assert!(b.what[4]
        .1
        .starts_with("append to chain ISTIO_INBOUND of table ip mangle"));
}

#[test]
fn refusals_name_the_table_chain_and_rule() {
    let cur = [CurrentTable {
        dormant: false,
        name: "nat".into(),
        chains: vec![],
    }];
    let e = plan(
        V4,
        &doc("nat", vec![Op::Delete("ISTIO_OUTPUT".into(), ret(53))]),
        Some(&cur),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("table nat") && e.contains("-D ISTIO_OUTPUT"),
        "{e}"
    );
    let e = plan(
        V4,
        &doc("nat", vec![Op::Insert("OUTPUT".into(), 2, ret(53))]),
        Some(&cur),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("-I OUTPUT 2"), "{e}");
    let e = plan(V4, &doc("nat", vec![Op::NewChain("OUTPUT".into())]), None).unwrap_err();
    assert!(e.to_string().contains("built-in"), "{e}");
    let e = plan(V4, &doc("broute", vec![]), None).unwrap_err();
    assert!(e.to_string().contains("broute"), "{e}");
    // A port match needs -p tcp/udp.
    let mut r = ret(1);
    r.proto = None;
    let e = plan(V4, &doc("nat", vec![Op::Append("X".into(), r)]), None).unwrap_err();
    assert!(e.to_string().contains("chain X"), "{e}");
}

#[test]
fn flush_and_delete_chain_forget_the_rules() {
    let cur = [CurrentTable {
        dormant: false,
        name: "nat".into(),
        chains: vec![CurrentChain {
            name: "ISTIO_OUTPUT".into(),
            base: false,
            rules: vec![(4, ret(1))],
            hook: None,
            policy: None,
        }],
    }];
    let c = || "ISTIO_OUTPUT".to_string();
    let d = doc("nat", vec![Op::Flush(c()), Op::Delete(c(), ret(1))]);
    assert!(plan(V4, &d, Some(&cur)).is_err());
    let d = doc(
        "nat",
        vec![
            Op::Flush(c()),
            Op::DeleteChain(c()),
            Op::Append(c(), ret(1)),
        ],
    );
    let e = plan(V4, &d, Some(&cur)).unwrap_err().to_string();
    assert!(e.contains("chain ISTIO_OUTPUT does not exist"), "{e}");
    let d = doc(
        "nat",
        vec![
            Op::Flush("PREROUTING".into()),
            Op::Append("PREROUTING".into(), ret(1)),
        ],
    );
    assert_eq!(
        shape(&plan(V4, &d, Some(&cur)).unwrap()),
        [
            "table nat",
            "base PREROUTING",
            "flush PREROUTING",
            "rule PREROUTING #1 append=true after=None",
            "wake nat"
        ]
    );
}

#[test]
fn only_inserts_and_deletes_in_chains_the_document_did_not_make_known_need_a_read() {
    use super::plan::needs_current;
    let (n, f, x) = (
        |c: &str| Op::NewChain(c.into()),
        |c: &str| Op::Flush(c.into()),
        |c: &str| Op::DeleteChain(c.into()),
    );
    let ins = |c: &str, at| Op::Insert(c.into(), at, ret(1));
    let del = |c: &str| Op::Delete(c.into(), ret(1));
    // TPROXY's first ADD: inserts into the chain it creates (and -N fails if it exists).
    assert!(!needs_current(&doc(
        "mangle",
        vec![n("ISTIO_INBOUND"), ins("ISTIO_INBOUND", 1)]
    )));
    assert!(!needs_current(&doc(
        "nat",
        vec![f("PREROUTING"), del("PREROUTING")]
    )));
    assert!(!needs_current(&doc(
        "nat",
        vec![Op::Append("OUTPUT".into(), ret(1))]
    )));
    // A chain the namespace may already hold rules in.
    assert!(needs_current(&doc("mangle", vec![ins("PREROUTING", 1)])));
    assert!(needs_current(&doc("nat", vec![n("A"), del("B")])));
    // Made known in another table, or deleted since.
    let two = vec![
        TableOps {
            table: "mangle".into(),
            ops: vec![n("ISTIO_INBOUND")],
        },
        TableOps {
            table: "nat".into(),
            ops: vec![ins("ISTIO_INBOUND", 1)],
        },
    ];
    assert!(needs_current(&two));
    assert!(needs_current(&doc(
        "nat",
        vec![n("A"), x("A"), ins("A", 1)]
    )));
}

#[test]
fn delete_takes_the_first_rule_that_prints_the_same() {
    // A rule read from the kernel in a form the reader names rather than models prints as the document's
    // rule does: to iptables-nft (and to the two other appliers) it is that rule.
    let ours = Rule {
        proto: Some(TCP),
        target: Target::Redirect { port: 15001 },
        ..Rule::any()
    };
    let read = Rule {
        target: Target::Other("-j REDIRECT --to-ports 15001".into()),
        ..ours.clone()
    };
    assert_ne!(read, ours);
    let cur = [CurrentTable {
        dormant: false,
        name: "nat".into(),
        chains: vec![CurrentChain {
            name: "ISTIO_REDIRECT".into(),
            base: false,
            rules: vec![(4, ret(1)), (7, read)],
            hook: None,
            policy: None,
        }],
    }];
    let d = doc("nat", vec![Op::Delete("ISTIO_REDIRECT".into(), ours)]);
    let steps = plan(V4, &d, Some(&cur)).unwrap();
    assert_eq!(
        shape(&steps),
        ["table nat", "del ISTIO_REDIRECT Handle(7)", "wake nat"]
    );
}
