//! The apply layer against real namespaces and real iptables (both backends): fresh apply, idempotent
//! re-apply, convergence to different rules, CHECK after tampering, TPROXY routing and `::6` on lo.
//! Root only (see tests/common).

use crate::support::{conformance_dir, require_root, words, Netns};
use istio_cni::iptables::apply::{self, Addresses, Plan, Report};
use istio_cni::iptables::{Backend, Io};
use istio_cni::netfilter::Family;
use istio_cni::netfilter::Outcome;

fn doc(rel: &str) -> String {
    let p = conformance_dir().join(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()))
}

/// `iptables-save` of our tables, without comments and counters, for equality checks.
fn saved(ns: &Netns, prog: &str) -> String {
    ns.saved_rules(prog)
}

/// Applies a fixed plan (the namespace's addresses do not matter here).
fn apply(ns: &str, b: Io, plan: Plan) -> istio_cni::Result<Report> {
    apply::apply(ns, b, move |_: &Addresses| Ok(plan))
}

fn check(ns: &str, b: Io, docs: Vec<(Family, String)>) -> istio_cni::Result<()> {
    apply::check(ns, b, move |_: &Addresses| {
        Ok(Plan {
            docs,
            tproxy: None,
            ipv6_passthrough: false,
        })
    })
}

/// The tables of a dump that hold a rule or one of our chains, sorted (legacy dumps tables in the order
/// the namespace first used them).
fn with_rules(dump: &str) -> String {
    let mut tables: Vec<&str> = dump
        .split_inclusive("COMMIT")
        .map(str::trim)
        .filter(|t| t.contains("\n-A ") || t.contains(":ISTIO"))
        .collect();
    tables.sort();
    tables.join("\n")
}

fn v4(d: String) -> Plan {
    Plan {
        docs: vec![(Family::V4, d)],
        tproxy: None,
        ipv6_passthrough: false,
    }
}

/// Both backends, each written by us (the default) and by the node's binaries (IPTABLES_NODE_BINARIES),
/// with the node's `-save` to look at them.
fn backends() -> Vec<(Io, &'static str)> {
    let mut out = Vec::new();
    for node_binaries in [false, true] {
        for (backend, save) in [
            (Backend::Nft, "iptables-nft-save"),
            (Backend::Legacy, "iptables-legacy-save"),
        ] {
            out.push((
                Io {
                    backend,
                    node_binaries,
                },
                save,
            ));
        }
    }
    out
}

#[test]
fn fresh_apply_then_reapply_is_a_no_op_then_converges() {
    if !require_root() {
        return;
    }
    for (b, save) in backends() {
        let ns = Netns::new("apply");
        let basic = doc("pod/basic/expected.rules");
        let r = apply(&ns.path(), b, v4(basic.clone())).unwrap();
        assert_eq!(r.families[0].1, Outcome::Applied, "{b:?}");
        let first = saved(&ns, save);
        assert!(first.contains(":ISTIO_OUTPUT"), "{first}");

        let r = apply(&ns.path(), b, v4(basic.clone())).unwrap();
        assert_eq!(r.families[0].1, Outcome::AlreadyInPlace, "{b:?}");
        assert_eq!(
            saved(&ns, save),
            first,
            "re-apply changed the rules ({b:?})"
        );
        check(&ns.path(), b, vec![(Family::V4, basic.clone())]).unwrap();

        // Different desired rules: one atomic convergence, ending exactly where a fresh apply would (also
        // to and from TPROXY's several mangle rules in built-in chains, which are re-inserted in order).
        for other in [
            "pod/include-exclude-ip/expected.rules",
            "capture/tproxy/expected.v4.rules",
            "pod/basic/expected.rules",
        ] {
            let other = doc(other);
            let r = apply(&ns.path(), b, v4(other.clone())).unwrap();
            assert_eq!(r.families[0].1, Outcome::Converged, "{b:?}");
            let fresh = Netns::new("apply-ref");
            apply(&fresh.path(), b, v4(other.clone())).unwrap();
            // nft keeps a table it once had (empty after converging away from it): compare the rules.
            assert_eq!(
                with_rules(&saved(&ns, save)),
                with_rules(&saved(&fresh, save)),
                "{b:?}"
            );
            check(&ns.path(), b, vec![(Family::V4, other)]).unwrap();
        }
    }
}

#[test]
fn check_lists_tampered_rules_and_reapply_repairs_them() {
    if !require_root() {
        return;
    }
    for (b, _) in backends() {
        let ns = Netns::new("check");
        let basic = doc("pod/basic/expected.rules");
        apply(&ns.path(), b, v4(basic.clone())).unwrap();
        let prog = b
            .backend
            .program(Family::V4, "restore")
            .replace("-restore", "");
        for rule in [
            "-t nat -D ISTIO_OUTPUT -o lo -s 127.0.0.6/32 -j RETURN",
            "-t nat -A ISTIO_OUTPUT -j ACCEPT",
        ] {
            ns.exec_ok(&[vec![prog.as_str()], words(rule)].concat());
        }
        let e = check(&ns.path(), b, vec![(Family::V4, basic.clone())])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("missing -t nat -A ISTIO_OUTPUT -s 127.0.0.6/32 -o lo -j RETURN"),
            "{e}"
        );
        assert!(
            e.contains("unexpected -t nat -A ISTIO_OUTPUT -j ACCEPT"),
            "{e}"
        );
        let r = apply(&ns.path(), b, v4(basic.clone())).unwrap();
        assert_eq!(r.families[0].1, Outcome::Converged);
        check(&ns.path(), b, vec![(Family::V4, basic)]).unwrap();
    }
}

#[test]
fn a_bad_document_fails_and_leaves_nothing() {
    if !require_root() {
        return;
    }
    let bad =
        doc("pod/basic/expected.rules").replace("-j ISTIO_IN_REDIRECT", "-j NO_SUCH_TARGET_X");
    for (b, save) in backends() {
        let ns = Netns::new("bad");
        let e = apply(&ns.path(), b, v4(bad.clone()))
            .unwrap_err()
            .to_string();
        let names = if b.node_binaries {
            "restore"
        } else {
            "NO_SUCH_TARGET_X"
        };
        assert!(e.contains(names), "{b:?}: {e}");
        assert!(
            !saved(&ns, save).contains("ISTIO"),
            "a failed restore left rules behind ({b:?})"
        );
    }
}

#[test]
fn tproxy_routing_and_ipv6_passthrough_address() {
    if !require_root() {
        return;
    }
    let ns = Netns::new("tproxy");
    let plan = Plan {
        docs: vec![
            (Family::V4, doc("capture/tproxy/expected.v4.rules")),
            (Family::V6, doc("capture/tproxy/expected.v6.rules")),
        ],
        tproxy: Some((1337, 133)),
        ipv6_passthrough: true,
    };
    apply(&ns.path(), Io::kernel(Backend::Nft), plan.clone()).unwrap();
    let rules = ns.exec_ok(&["ip", "-4", "rule"]);
    assert!(rules.contains("fwmark 0x539 lookup 133"), "{rules}");
    assert!(ns
        .exec_ok(&["ip", "-6", "rule"])
        .contains("fwmark 0x539 lookup 133"));
    let routes = ns.exec_ok(&["ip", "-4", "route", "show", "table", "133"]);
    assert!(routes.contains("local default dev lo"), "{routes}");
    let lo = ns.exec_ok(&["ip", "-6", "addr", "show", "dev", "lo"]);
    assert!(lo.contains("::6/128"), "{lo}");
    // Idempotent: routing and address already there.
    let again = apply(&ns.path(), Io::kernel(Backend::Nft), plan).unwrap();
    assert!(
        again
            .families
            .iter()
            .all(|(_, o, _)| *o == Outcome::AlreadyInPlace),
        "{again:?}"
    );
    let rules = ns.exec_ok(&["ip", "-4", "rule"]);
    assert_eq!(rules.matches("lookup 133").count(), 1, "{rules}");
}

/// Issue 11 item 4: a rule inserted before our jump in a chain we hook (`-I OUTPUT 1 -j ACCEPT`, the same in
/// PREROUTING) disables redirection. CHECK names it; re-ADD converges by putting our jumps first again.
#[test]
fn a_rule_inserted_before_our_jumps_fails_check_and_reapply_puts_ours_first() {
    if !require_root() {
        return;
    }
    for (b, _) in backends() {
        let ns = Netns::new("bypass");
        let case = "capture/ipv6-inbound-ports";
        let docs = vec![
            (Family::V4, doc(&format!("{case}/expected.v4.rules"))),
            (Family::V6, doc(&format!("{case}/expected.v6.rules"))),
        ];
        let plan = Plan {
            docs: docs.clone(),
            tproxy: None,
            ipv6_passthrough: false,
        };
        apply(&ns.path(), b, plan.clone()).unwrap();
        check(&ns.path(), b, docs.clone()).unwrap();
        for family in [Family::V4, Family::V6] {
            let prog = b.backend.program(family, "restore").replace("-restore", "");
            for chain in ["OUTPUT", "PREROUTING"] {
                ns.exec_ok(&[prog.as_str(), "-t", "nat", "-I", chain, "1", "-j", "ACCEPT"]);
            }
        }
        let e = check(&ns.path(), b, docs.clone()).unwrap_err().to_string();
        for fam in ["IPv4", "IPv6"] {
            for chain in ["OUTPUT", "PREROUTING"] {
                let want =
                    format!("{fam}: unexpected -t nat -A {chain} -j ACCEPT (before our rules");
                assert!(e.contains(&want), "{b:?}: {want} not in {e}");
            }
        }
        let r = apply(&ns.path(), b, plan.clone()).unwrap();
        assert!(
            r.families.iter().all(|(_, o, _)| *o == Outcome::Converged),
            "{b:?}: {r:?}"
        );
        check(&ns.path(), b, docs.clone()).unwrap();
        for family in [Family::V4, Family::V6] {
            let save = b.backend.program(family, "save");
            let nat = ns.exec_ok(&[save.as_str(), "-t", "nat"]);
            for chain in ["OUTPUT", "PREROUTING"] {
                let rules: Vec<&str> = nat
                    .lines()
                    .filter(|l| l.starts_with(&format!("-A {chain} ")))
                    .collect();
                assert!(
                    rules.first().is_some_and(|l| l.contains("-j ISTIO_")),
                    "{b:?} {family:?} {chain}: our jump is not first: {rules:?}"
                );
                assert_eq!(
                    rules.last(),
                    Some(&format!("-A {chain} -j ACCEPT").as_str())
                );
            }
        }
        // A second re-apply is a no-op.
        let r = apply(&ns.path(), b, plan).unwrap();
        assert!(
            r.families
                .iter()
                .all(|(_, o, _)| *o == Outcome::AlreadyInPlace),
            "{b:?}: {r:?}"
        );
    }
}

/// A foreign rule between two of ours in a chain we hook (nat OUTPUT `[-o nic -j RETURN, -j ISTIO_OUTPUT]`
/// with `-I OUTPUT 2 -j ACCEPT`) takes the traffic past our jump as surely as one before both: CHECK names
/// it, and re-ADD converges with ours first again (never "already in place").
#[test]
fn a_rule_inserted_between_our_rules_fails_check_and_reapply_puts_ours_first() {
    if !require_root() {
        return;
    }
    for (b, _) in backends() {
        let ns = Netns::new("between");
        let docs = vec![(
            Family::V4,
            doc("capture/basic-exclude-nic/expected.v4.rules"),
        )];
        let plan = Plan {
            docs: docs.clone(),
            tproxy: None,
            ipv6_passthrough: false,
        };
        apply(&ns.path(), b, plan.clone()).unwrap();
        check(&ns.path(), b, docs.clone()).unwrap();
        let prog = b.backend.command(Family::V4);
        for chain in ["OUTPUT", "PREROUTING"] {
            // PREROUTING holds one rule of ours: the ACCEPT after it bypasses nothing.
            ns.exec_ok(&[prog.as_str(), "-t", "nat", "-I", chain, "2", "-j", "ACCEPT"]);
        }
        let e = check(&ns.path(), b, docs.clone()).unwrap_err().to_string();
        let want =
            "IPv4: unexpected -t nat -A OUTPUT -j ACCEPT (before our rules: it bypasses them)";
        assert!(e.contains(want), "{b:?}: {want} not in {e}");
        assert!(!e.contains("PREROUTING"), "{b:?}: {e}");
        let r = apply(&ns.path(), b, plan.clone()).unwrap();
        assert!(
            r.families.iter().all(|(_, o, _)| *o == Outcome::Converged),
            "{b:?}: {r:?}"
        );
        check(&ns.path(), b, docs.clone()).unwrap();
        let nat = ns.exec_ok(&[b.backend.program(Family::V4, "save").as_str(), "-t", "nat"]);
        let rules: Vec<&str> = nat
            .lines()
            .filter(|l| l.starts_with("-A OUTPUT "))
            .collect();
        assert_eq!(
            rules,
            [
                "-A OUTPUT -o not-istio-nic -j RETURN",
                "-A OUTPUT -j ISTIO_OUTPUT",
                "-A OUTPUT -j ACCEPT"
            ],
            "{b:?}"
        );
        let r = apply(&ns.path(), b, plan).unwrap();
        assert!(
            r.families
                .iter()
                .all(|(_, o, _)| *o == Outcome::AlreadyInPlace),
            "{b:?}: {r:?}"
        );
    }
}

/// Our jump deleted and a chain named `OUTPUT -j ISTIO_OUTPUT` holding an empty rule written in its place,
/// in either backend through the kernel's own interface (iptables refuses the name; the kernel takes it):
/// as `iptables-save` text it prints our jump back, from our reader and from the node's `-save` alike.
/// CHECK names the chain, and re-ADD fails instead of answering "already in place".
#[test]
fn a_chain_named_like_our_jump_fails_check_and_reapply() {
    use istio_cni::xtables::rule::{Op, Rule, TableOps};
    if !require_root() {
        return;
    }
    for (io, _) in backends() {
        let b = io.backend;
        let ns = Netns::new("chainname");
        let docs = vec![(
            Family::V4,
            doc("capture/basic-exclude-nic/expected.v4.rules"),
        )];
        let plan = Plan {
            docs: docs.clone(),
            tproxy: None,
            ipv6_passthrough: false,
        };
        apply(&ns.path(), io, plan.clone()).unwrap();
        check(&ns.path(), io, docs.clone()).unwrap();
        let prog = b.command(Family::V4);
        ns.exec_ok(&[
            prog.as_str(),
            "-t",
            "nat",
            "-D",
            "OUTPUT",
            "-j",
            "ISTIO_OUTPUT",
        ]);
        let fake = "OUTPUT -j ISTIO_OUTPUT".to_string();
        let ops = vec![TableOps {
            table: "nat".into(),
            ops: vec![Op::NewChain(fake.clone()), Op::Append(fake, Rule::any())],
        }];
        istio_cni::netns::run_in(&ns.path(), move || match b {
            Backend::Nft => istio_cni::iptables::nft::restore(Family::V4, &ops),
            _ => istio_cni::xtables::legacy::restore(Family::V4, &ops),
        })
        .unwrap();
        // Read from the model, the chain is named; from the node's `-save` text, its declaration line.
        let want = if io.node_binaries {
            format!("{prog} (IPv4) -t nat: \":OUTPUT -j ISTIO_OUTPUT - [0:0]\": not a chain declaration")
        } else {
            format!("{prog} (IPv4) -t nat chain \"OUTPUT -j ISTIO_OUTPUT\": a chain name iptables refuses")
        };
        let e = check(&ns.path(), io, docs.clone()).unwrap_err().to_string();
        assert!(e.contains(&want), "{b:?}: {want} not in {e}");
        let e = apply(&ns.path(), io, plan).unwrap_err().to_string();
        assert!(e.contains(&want), "{b:?}: {want} not in {e}");
    }
}

/// The planner sees the namespace's real addresses from the rtnetlink dump, in the order upstream's
/// `getLocalIP` reads them: by interface, IPv4 before IPv6, whatever order they were added in.
#[test]
fn the_planner_gets_the_namespace_addresses_in_kernel_order() {
    if !require_root() {
        return;
    }
    let ns = Netns::new("addrs");
    ns.exec_ok(&[
        "ip", "link", "add", "eth0", "type", "veth", "peer", "name", "peer0",
    ]);
    for a in ["fd00:7::2/64", "10.7.0.2/24", "10.7.1.2/24"] {
        let mut argv = vec!["ip", "addr", "add", a, "dev", "eth0"];
        if a.contains(':') {
            argv.push("nodad");
        }
        ns.exec_ok(&argv);
    }
    let basic = doc("pod/basic/expected.rules");
    let (tx, rx) = std::sync::mpsc::channel();
    apply::apply(
        &ns.path(),
        Io::kernel(Backend::Nft),
        move |addrs: &Addresses| {
            tx.send(addrs.to_vec()).unwrap();
            Ok(v4(basic))
        },
    )
    .unwrap();
    let got = istio_cni::redirect::kernel_address_order(&rx.recv().unwrap());
    let want: Vec<std::net::IpAddr> = ["127.0.0.1", "::1", "10.7.0.2", "10.7.1.2", "fd00:7::2"]
        .iter()
        .map(|a| a.parse().unwrap())
        .collect();
    // eth0's link-local IPv6 may or may not be there yet (the peer is down); it never decides anything.
    let got: Vec<_> = got
        .into_iter()
        .filter(|a| !matches!(a, std::net::IpAddr::V6(v) if v.segments()[0] == 0xfe80))
        .collect();
    assert_eq!(got, want);
    assert!(!istio_cni::redirect::enable_ipv6(&got, false).unwrap());
    assert!(istio_cni::redirect::enable_ipv6(&got, true).unwrap());
}
