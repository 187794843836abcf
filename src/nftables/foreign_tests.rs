use super::*;
use crate::netfilter::{NF_DROP, NF_INET_LOCAL_IN, NF_INET_LOCAL_OUT, NF_INET_PRE_ROUTING};

fn ours() -> Vec<OurHook> {
    [
        (NF_INET_PRE_ROUTING, "prerouting"),
        (NF_INET_LOCAL_OUT, "output"),
    ]
    .map(|(hooknum, c)| OurHook {
        hooknum,
        priority: -100,
        label: format!("inet istio-proxy-nat {c} (priority -100)"),
    })
    .to_vec()
}

fn chain(family: u8, name: &str, hooknum: u32, priority: i32) -> BaseChain {
    BaseChain {
        family,
        table: "t".into(),
        chain: name.into(),
        hooknum,
        priority,
        devices: vec![],
    }
}

fn verdict(code: i32, chain: Option<&str>) -> Expr {
    Expr::Immediate {
        dreg: 0,
        data: Data::Verdict {
            code,
            chain: chain.map(str::to_string),
        },
    }
}

fn key(family: u8, chain: &str) -> ChainKey {
    (family, "t".into(), chain.into())
}

#[test]
fn only_chains_at_or_before_ours_at_our_hooks_or_at_ingress_count() {
    let o = ours();
    let before = |c: BaseChain| match position(&c, &o) {
        Some(Position::Before(ours)) => Some(ours),
        _ => None,
    };
    assert!(before(chain(NFPROTO_IPV4, "c", NF_INET_LOCAL_OUT, -150)).is_some());
    // Equal priority: the chain registered last runs first, and a dump cannot say which that was.
    assert!(before(chain(NFPROTO_INET, "c", NF_INET_LOCAL_OUT, -100)).is_some());
    assert!(before(chain(NFPROTO_IPV6, "c", NF_INET_PRE_ROUTING, -300)).is_some());
    assert!(before(chain(NFPROTO_IPV4, "c", NF_INET_LOCAL_OUT, -99)).is_none());
    for (family, hook, prio, counts, what) in [
        (NFPROTO_IPV4, 1, -300, false, "input"),
        (NFPROTO_IPV4, 4, -300, false, "postrouting"),
        (7, NF_INET_PRE_ROUTING, -300, false, "bridge"),
        (NFPROTO_NETDEV, 0, 500, true, "netdev ingress"),
        (NFPROTO_NETDEV, 1, -500, false, "netdev egress"),
        (NFPROTO_INET, 5, 500, true, "inet ingress"),
    ] {
        assert_eq!(
            before(chain(family, "c", hook, prio)).is_some(),
            counts,
            "{what}"
        );
    }
}

#[test]
fn rules_that_only_match_count_log_or_accept_are_harmless_anything_else_is_named() {
    let o = ours();
    let c = chain(NFPROTO_IPV4, "c", NF_INET_LOCAL_OUT, -300);
    let harmless = vec![
        vec![Expr::Counter],
        vec![
            Expr::Meta { key: 16, dreg: 1 },
            Expr::Cmp {
                sreg: 1,
                op: 0,
                data: vec![6],
            },
            Expr::Other("log".into()),
            verdict(NF_ACCEPT, None),
        ],
        vec![
            Expr::Other("match tcp".into()),
            Expr::Other("target LOG".into()),
        ],
        vec![verdict(NFT_RETURN, None)],
    ];
    let mut rules = Rules::new();
    rules.insert(key(NFPROTO_IPV4, "c"), harmless.clone());
    assert!(findings(std::slice::from_ref(&c), &rules, &o).is_empty());
    for (moves, named) in [
        (Expr::Other("notrack".into()), "[ notrack ]"),
        (Expr::Other("nat".into()), "[ nat ]"),
        (Expr::Other("target CT".into()), "[ target CT ]"),
        (Expr::Other("lookup(map)".into()), "[ lookup(map) ]"),
        (verdict(NF_DROP, None), "drop"),
        (Expr::MetaSet { key: 3, sreg: 1 }, "meta set mark"),
    ] {
        let mut list = harmless.clone();
        list.push(vec![Expr::Counter, moves]);
        rules.insert(key(NFPROTO_IPV4, "c"), list);
        let f = findings(std::slice::from_ref(&c), &rules, &o);
        assert_eq!(f.len(), 1, "{f:?}");
        assert!(
            f[0].starts_with("foreign chain ip t c (hook output, priority -300, 5 rules) runs before inet istio-proxy-nat output (priority -100): rule 5: "),
            "{f:?}"
        );
        assert!(f[0].contains(named), "{named}: {f:?}");
    }
}

#[test]
fn jumps_are_followed_once_and_named_and_an_unread_chain_is_reported() {
    let o = ours();
    let c = chain(NFPROTO_INET, "base", NF_INET_PRE_ROUTING, -150);
    let mut rules = Rules::new();
    rules.insert(
        key(NFPROTO_INET, "base"),
        vec![vec![Expr::Counter, verdict(NFT_JUMP, Some("a"))]],
    );
    // a → b → a (a loop) with nothing harmful: harmless.
    rules.insert(
        key(NFPROTO_INET, "a"),
        vec![vec![verdict(NFT_JUMP, Some("b"))]],
    );
    rules.insert(key(NFPROTO_INET, "b"), vec![vec![verdict(-4, Some("a"))]]);
    assert_eq!(
        jumps(&rules[&key(NFPROTO_INET, "a")]),
        vec!["b".to_string()]
    );
    assert!(findings(std::slice::from_ref(&c), &rules, &o).is_empty());
    rules.insert(
        key(NFPROTO_INET, "b"),
        vec![
            vec![verdict(-4, Some("a"))],
            vec![Expr::Other("notrack".into())],
        ],
    );
    let f = findings(std::slice::from_ref(&c), &rules, &o);
    assert_eq!(f.len(), 1);
    assert!(
        f[0].ends_with("runs before inet istio-proxy-nat prerouting (priority -100): rule 2 (via inet t b): [ notrack ]"),
        "{f:?}"
    );
    rules.remove(&key(NFPROTO_INET, "b"));
    let f = findings(&[c], &rules, &o);
    assert!(
        f[0].contains("(via inet t b): the chain could not be read"),
        "{f:?}"
    );
}

#[test]
fn ingress_chains_name_their_devices() {
    let mut c = chain(NFPROTO_NETDEV, "in", 0, 0);
    c.devices = vec!["eth0".into()];
    let mut rules = Rules::new();
    rules.insert(
        key(NFPROTO_NETDEV, "in"),
        vec![vec![Expr::Other("notrack".into())]],
    );
    let f = findings(&[c], &rules, &ours());
    assert_eq!(
        f,
        vec!["foreign chain netdev t in (hook ingress device eth0, priority 0, 1 rules) runs before every IP hook (ingress): rule 1: [ notrack ]"]
    );
}

#[test]
fn chains_after_ours_at_our_hooks_input_postrouting_and_egress_are_placed_after_forward_is_not() {
    let o = ours();
    let pos = |family, hook, prio| position(&chain(family, "c", hook, prio), &o);
    let after = |s: &str| Some(Position::After(s.to_string()));
    let all = "inet istio-proxy-nat prerouting (priority -100), inet istio-proxy-nat output (priority -100)";
    assert_eq!(
        pos(NFPROTO_IPV4, NF_INET_PRE_ROUTING, 0),
        after("inet istio-proxy-nat prerouting (priority -100)")
    );
    assert_eq!(
        pos(NFPROTO_INET, NF_INET_LOCAL_OUT, -99),
        after("inet istio-proxy-nat output (priority -100)")
    );
    assert_eq!(pos(NFPROTO_IPV6, NF_INET_LOCAL_IN, -300), after(all));
    assert_eq!(pos(NFPROTO_IPV4, 4, -300), after(all));
    assert_eq!(pos(NFPROTO_NETDEV, 1, -500), after(all));
    assert!(matches!(
        pos(NFPROTO_IPV4, NF_INET_LOCAL_OUT, -100),
        Some(Position::Before(_))
    ));
    for (family, hook, what) in [
        (NFPROTO_IPV4, 2, "forward"),
        (NFPROTO_INET, 2, "inet forward"),
        (7, NF_INET_LOCAL_IN, "bridge input"),
        (7, 4, "bridge postrouting"),
    ] {
        assert_eq!(pos(family, hook, 500), None, "{what}");
    }
    // Nothing of ours at all: nothing to undo.
    assert_eq!(
        position(&chain(NFPROTO_IPV4, "c", NF_INET_LOCAL_IN, 0), &[]),
        None
    );
}

#[test]
fn after_ours_source_nat_notrack_drop_and_reject_are_harmless_writes_marks_queues_and_unknowns_are_named(
) {
    let o = ours();
    let c = chain(NFPROTO_IPV4, "c", NF_INET_PRE_ROUTING, 0);
    let nat = [
        Expr::Other("nat".into()),
        Expr::Other("masq".into()),
        Expr::Redir {
            reg_min: 1,
            flags: 0,
        },
    ];
    // NAT after ours: source NAT at input and postrouting is harmless; at prerouting and output it binds
    // what our chains let through unredirected, so it is named there.
    for e in &nat {
        let mut rules = Rules::new();
        rules.insert(key(NFPROTO_IPV4, "c"), vec![vec![e.clone()]]);
        for h in [NF_INET_LOCAL_IN, 4] {
            let late = chain(NFPROTO_IPV4, "c", h, 100);
            assert!(
                findings(std::slice::from_ref(&late), &rules, &o).is_empty(),
                "{e:?} at hook {h}"
            );
        }
        for h in [NF_INET_PRE_ROUTING, NF_INET_LOCAL_OUT] {
            let late = chain(NFPROTO_IPV4, "c", h, 0);
            let f = findings(std::slice::from_ref(&late), &rules, &o);
            assert_eq!(f.len(), 1, "{e:?} at hook {h}: {f:?}");
        }
    }
    let harmless_after = [
        Expr::Other("notrack".into()),
        Expr::Other("reject".into()),
        verdict(NF_DROP, None),
        Expr::Counter,
        Expr::Ct { key: 0, dreg: 1 },
    ];
    let mut rules = Rules::new();
    for e in &harmless_after {
        rules.insert(key(NFPROTO_IPV4, "c"), vec![vec![e.clone()]]);
        assert!(
            findings(std::slice::from_ref(&c), &rules, &o).is_empty(),
            "{e:?}"
        );
        // The same rule before ours moves traffic (all but the counter and the load).
        let before = chain(NFPROTO_IPV4, "c", NF_INET_PRE_ROUTING, -200);
        let moves = !matches!(e, Expr::Counter | Expr::Ct { .. });
        assert_eq!(
            findings(std::slice::from_ref(&before), &rules, &o).len(),
            usize::from(moves),
            "{e:?}"
        );
    }
    for (moves, named) in [
        (
            Expr::Other("payload(other form)".into()),
            "payload(other form)",
        ),
        (Expr::Other("exthdr".into()), "exthdr"),
        (Expr::MetaSet { key: 3, sreg: 1 }, "meta set mark"),
        (Expr::CtSet { key: 3, sreg: 1 }, "ct"),
        (Expr::Other("queue".into()), "queue"),
        (
            Expr::Tproxy {
                family: 2,
                reg_port: 1,
            },
            "tproxy",
        ),
        (Expr::Other("dup".into()), "dup"),
        (Expr::Other("fwd".into()), "fwd"),
        (Expr::Other("lookup(map)".into()), "lookup(map)"),
        (verdict(3, None), "verdict 3"),
    ] {
        rules.insert(
            key(NFPROTO_IPV4, "c"),
            vec![
                vec![Expr::Other("notrack".into())],
                vec![Expr::Counter, moves],
            ],
        );
        let f = findings(std::slice::from_ref(&c), &rules, &o);
        assert_eq!(f.len(), 1, "{named}: {f:?}");
        assert!(
            f[0].starts_with("foreign chain ip t c (hook prerouting, priority 0, 2 rules) runs after inet istio-proxy-nat prerouting (priority -100) and can undo its redirect: rule 2: "),
            "{f:?}"
        );
        assert!(f[0].contains(named), "{named}: {f:?}");
    }
}

#[test]
fn a_jump_from_a_chain_after_ours_is_judged_as_after_ours() {
    let o = ours();
    let c = chain(NFPROTO_INET, "in", NF_INET_LOCAL_IN, 100);
    let mut rules = Rules::new();
    rules.insert(
        key(NFPROTO_INET, "in"),
        vec![vec![verdict(NFT_JUMP, Some("deeper"))]],
    );
    rules.insert(
        key(NFPROTO_INET, "deeper"),
        vec![
            vec![Expr::Other("notrack".into())],
            vec![verdict(NF_DROP, None)],
        ],
    );
    assert!(findings(std::slice::from_ref(&c), &rules, &o).is_empty());
    rules.insert(
        key(NFPROTO_INET, "deeper"),
        vec![vec![Expr::Other("payload(other form)".into())]],
    );
    let f = findings(&[c], &rules, &o);
    assert_eq!(f.len(), 1);
    assert!(
        f[0].contains("(hook input, priority 100, 1 rules) runs after inet istio-proxy-nat prerouting (priority -100), inet istio-proxy-nat output (priority -100) and can undo its redirect: rule 1 (via inet t deeper): "),
        "{f:?}"
    );
}
