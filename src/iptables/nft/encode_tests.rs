//! Every form of research §2.3 (issue 40): the model encodes to iptables-nft 1.8.7's expressions, those
//! decode back to the same rule, and 1.8.9's and 1.8.11's encodings of the same rule (native ports, native
//! mark, `payload nh+9` for -p, other native order) decode to it too; the whole batch of the smallest rule is
//! byte for byte iptables-nft's; what is not understood is named, never dropped, never a panic.

use super::decode_rule::decode;
use super::encode_rule::encode;
use super::test_exprs::*;
use super::xexpr::{self, XExpr};
use super::{ext_forms, header_forms};
use crate::netfilter::Family::{V4, V6};
use crate::nftables::encode::Attrs;
use crate::nftables::expr::Expr;
use crate::xtables::rule::*;

fn cases() -> Vec<Case> {
    let mut c = header_forms::cases();
    c.extend(ext_forms::cases());
    c
}

#[test]
fn every_form_encodes_as_1_8_7_and_decodes_back() {
    assert!(cases().len() >= 39, "{}", cases().len());
    for (f, rule, want, _) in cases() {
        assert_eq!(encode(f, &rule).unwrap(), want, "{f:?} {rule:?}");
        assert_eq!(decode(f, &want), rule, "{f:?} {want:?}");
    }
}

#[test]
fn other_writers_encodings_decode_to_the_same_rule() {
    let mut n = 0;
    for (f, rule, _, others) in cases() {
        for e in others {
            assert_eq!(decode(f, &e), rule, "{f:?} {e:?}");
            n += 1;
        }
    }
    assert!(n >= 14, "{n}");
}

#[test]
fn expressions_survive_the_netlink_codec() {
    for (_, _, want, _) in cases() {
        let mut a = Attrs::default();
        xexpr::encode(&want, &mut a);
        // attribute header (4 bytes) then the list.
        assert_eq!(xexpr::decode(&a.buf[4..]).unwrap(), want);
    }
}

/// The whole batch iptables-nft 1.8.9 sent for `-N ISTIO_REDIRECT` + `-A ISTIO_REDIRECT -p tcp -j REDIRECT
/// --to-ports 15001` (issue40-data/nft-small-batch.hex), byte for byte, but for the generation id (none
/// here) and the ack our last message asks for (flags 0x0c05).
#[test]
fn the_smallest_rule_is_byte_identical_with_iptables_nft() {
    use super::plan::Step;
    let rule = Rule {
        target: Target::Redirect { port: 15001 },
        ..tcp()
    };
    let (table, chain) = ("nat".to_string(), "ISTIO_REDIRECT".to_string());
    let steps = [
        Step::Table(table.clone()),
        Step::NewChain {
            table: table.clone(),
            chain: chain.clone(),
        },
        Step::Table(table.clone()),
        Step::Rule {
            table,
            chain,
            exprs: encode(V4, &rule).unwrap(),
            rule,
            id: 1,
            append: true,
            after: None,
        },
    ];
    let b = super::batch::encode(V4, &steps, None, 1);
    let want = h("
        14000000 10000100 01000000 00000000 0000000a
        1c000000000a0104020000000000000002000000080001006e617400
        30000000030a0102030000000000000002000000080001006e61740013000300495354494f5f52454449524543540000
        1c000000000a0104040000000000000002000000080001006e617400
        0c010000060a050c050000000000000002000000080001006e61740013000200495354494f5f52454449524543540000
        c800048024000180090001006d6574610000000014000280080002000000001008000100000000012c000180080001
        00636d700020000280080001000000000108000200000000000c00038005000100060000002c0001800c000100636f
        756e746572001c0002800c00010000000000000000000c0002000000000000000000480001800b000100746172676574
        0000380002800d00010052454449524543540000000008000200000000001c00030001000000020000000000000000
        0000003a993a99000000001400058008000100000000060800020000000000
        140000001100010006000000000000000000000a");
    assert_eq!(b.bytes, want);
    assert_eq!(b.ack_seq, Some(5));
}

#[test]
fn what_is_not_understood_is_kept_and_never_equal() {
    let any_ret = |m: Vec<XExpr>| {
        let mut e = m;
        e.extend([counter(), verdict(RET, None)]);
        decode(V4, &e)
    };
    let cases = [
        // port range, `! -p tcp`, an unknown match, a uid range, a tcp match without -p
        vec![
            meta(PROTO),
            cmp(0, "06"),
            pl(2, 2, 2),
            n(Expr::Other("range".into())),
        ],
        vec![meta(PROTO), cmp(1, "06")],
        vec![mt("comment", 0, "00")],
        vec![mt(
            "owner",
            1,
            "39050000 3a050000 00000000 00000000 01000000 00000000",
        )],
        vec![mt("tcp", 0, "0000ffff ac3aac3a 00000000 00000000")],
        vec![
            meta(PROTO),
            cmp(0, "11"),
            mt("tcp", 0, "0000ffff ac3aac3a 00000000 00000000"),
        ],
        vec![pl(1, 16, 4), bitwise("ff0f0000"), cmp(0, "0a000000")],
        vec![XExpr::Broken("malformed expression".into())],
    ];
    for e in cases {
        let r = any_ret(e.clone());
        assert!(
            r.matches.iter().any(|m| matches!(m, Match::Other(_))),
            "{e:?} -> {r:?}"
        );
    }
    // A goto, an unknown target, an expression after the target.
    let t = decode(V4, &[counter(), verdict(-4, Some("X"))]);
    assert!(matches!(t.target, Target::Other(_)), "{t:?}");
    let t = decode(V4, &[counter(), tg("LOG", 0, "00")]);
    assert_eq!(
        t.target,
        Target::Other("-j LOG (revision 0, 1 bytes of options)".into())
    );
    let t = decode(V4, &[counter(), verdict(RET, None), meta(PROTO)]);
    assert!(matches!(t.matches[..], [Match::Other(_)]), "{t:?}");
}

/// A rule of iptables-nft's tables holding an expression iptables never writes as a match (a native
/// `notrack`, `ct set`, NAT, ... put there with `nft`) may act on the packet whatever its verdict: it reads
/// back with a target nobody mistakes for "only matches" (the bypass walk counts it as moving traffic).
#[test]
fn an_expression_that_may_act_reads_as_an_unknown_target_whatever_follows() {
    for tail in [vec![], vec![verdict(RET, None)], vec![verdict(1, None)]] {
        let mut e = vec![n(Expr::Other("notrack".into())), counter()];
        e.extend(tail);
        let r = decode(V4, &e);
        let text = crate::xtables::spec::render(V4, &r);
        assert!(matches!(r.target, Target::Other(_)), "{r:?}");
        assert!(text.contains("-j ?("), "{text}");
        let t = crate::iptables::save::target(&text);
        assert!(
            t.is_some_and(|t| !["ACCEPT", "RETURN", "DROP"].contains(&t)),
            "{text}"
        );
    }
    // CT --notrack, which CHECK names most, as iptables-save names it.
    let info = format!("01{}", "00".repeat(71));
    let r = decode(V4, &[counter(), tg("CT", 2, &info)]);
    assert_eq!(crate::xtables::spec::render(V4, &r), "-j CT --notrack");
}

/// What iptables-nft 1.8.9 writes natively for `--dport 1000:2000` (`range`) and `-m limit` (`limit`) only
/// matches: the rule reads with its own verdict (kept unequal to ours by the match it cannot show), not as
/// one that may act.
#[test]
fn a_native_match_iptables_nft_writes_does_not_read_as_acting() {
    for m in ["range", "limit"] {
        let load = pl(2, 2, 2);
        let r = decode(
            V4,
            &[load, n(Expr::Other(m.into())), counter(), verdict(1, None)],
        );
        assert_eq!(r.target, Target::Accept, "{m}: {r:?}");
        assert!(matches!(r.matches[..], [.., Match::Other(_)]), "{m}: {r:?}");
        assert!(!super::decode_rule::acts(&r), "{m}");
    }
}

/// A compatibility target that answers "continue" (`LOG`, `MARK`, ...) lets the kernel run the expressions
/// after it in the same rule: a native `redirect to :8080` after `xt target LOG` re-points traffic
/// (measured: root test `an_expression_after_a_log_target_re_pointing_an_excluded_port_fails_check_and_re_add`),
/// a jump after it runs a chain nobody walked. Such a rule never reads back as its target alone.
#[test]
fn what_follows_a_target_may_act() {
    let redirect = [
        n(Expr::Immediate {
            dreg: 1,
            data: crate::nftables::expr::Data::Value(vec![0x1f, 0x90]),
        }),
        n(Expr::Redir {
            reg_min: 1,
            flags: 2,
        }),
    ];
    for tail in [redirect.to_vec(), vec![verdict(JUMP, Some("X"))]] {
        for target in [
            tg("LOG", 0, &"00".repeat(32)),
            tg("MARK", 2, "01000000 ffffffff"),
        ] {
            let mut e = vec![counter(), target];
            e.extend(tail.clone());
            let r = decode(V4, &e);
            let text = crate::xtables::spec::render(V4, &r);
            assert!(text.contains("-j ?("), "{e:?}: {text}");
            let t = crate::iptables::save::target(&text);
            assert!(
                t.is_some_and(|t| !["LOG", "MARK", "ACCEPT", "RETURN"].contains(&t)),
                "{text}"
            );
        }
    }
}

#[test]
fn short_or_empty_infos_are_named_not_a_panic() {
    // Found by the xt_nft_roundtrip fuzz target: a REDIRECT target with no info bytes.
    for f in [V4, V6] {
        let t = decode(f, &[counter(), tg("REDIRECT", 0, "")]);
        assert_eq!(
            t.target,
            Target::Other("-j REDIRECT (revision 0, 0 bytes of options)".into())
        );
        for (name, rev) in [("TPROXY", 1), ("CT", 2), ("MARK", 2), ("CONNMARK", 2)] {
            let t = decode(f, &[counter(), tg(name, rev, "0000")]);
            assert!(matches!(t.target, Target::Other(_)), "{name}");
        }
        for (name, rev) in [
            ("tcp", 0),
            ("udp", 0),
            ("owner", 1),
            ("multiport", 1),
            ("conntrack", 3),
            ("mark", 1),
        ] {
            let r = decode(
                f,
                &[meta(PROTO), cmp(0, "06"), mt(name, rev, "00"), counter()],
            );
            assert!(matches!(r.matches[..], [Match::Other(_)]), "{name}: {r:?}");
        }
    }
}
