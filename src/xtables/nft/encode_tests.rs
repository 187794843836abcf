//! Every form of research §2.3 (issue 40): the model encodes to iptables-nft 1.8.7's expressions (info
//! bytes as recorded from the kernel in issue40-data/v1.8.7-written), those decode back to the same rule,
//! and 1.8.9's and 1.8.11's encodings of the same rule (native ports, native mark, `payload nh+9` for -p,
//! other native order) decode to it too.

use super::compat::Ext;
use super::decode_rule::decode;
use super::encode_rule::encode;
use super::xexpr::{self, XExpr};
use crate::netfilter::Family::{self, V4, V6};
use crate::nftables::encode::Attrs;
use crate::nftables::expr::{Data, Expr};
use crate::xtables::rule::*;

pub fn h(s: &str) -> Vec<u8> {
    let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn n(e: Expr) -> XExpr {
    XExpr::Native(e)
}
pub fn meta(key: u32) -> XExpr {
    n(Expr::Meta { key, dreg: 1 })
}
pub fn cmp(op: u32, data: &str) -> XExpr {
    n(Expr::Cmp {
        sreg: 1,
        op,
        data: h(data),
    })
}
pub fn pl(base: u32, offset: u32, len: u32) -> XExpr {
    n(Expr::Payload {
        dreg: 1,
        base,
        offset,
        len,
    })
}
fn bitwise(mask: &str) -> XExpr {
    let mask = h(mask);
    n(Expr::Bitwise {
        sreg: 1,
        dreg: 1,
        len: mask.len() as u32,
        xor: vec![0; mask.len()],
        mask,
    })
}
pub fn counter() -> XExpr {
    n(Expr::Counter)
}
pub fn verdict(code: i32, chain: Option<&str>) -> XExpr {
    n(Expr::Immediate {
        dreg: 0,
        data: Data::Verdict {
            code,
            chain: chain.map(str::to_string),
        },
    })
}
fn ext(name: &str, rev: u32, info: &str) -> Ext {
    Ext {
        name: name.into(),
        rev,
        info: h(info),
    }
}
pub fn mt(name: &str, rev: u32, info: &str) -> XExpr {
    XExpr::Match(ext(name, rev, info))
}
pub fn tg(name: &str, rev: u32, info: &str) -> XExpr {
    XExpr::Target(ext(name, rev, info))
}

pub fn neg<T>(inv: bool, value: T) -> Option<Neg<T>> {
    Some(Neg { inv, value })
}

const RET: i32 = -5;
const JUMP: i32 = -3;
const PROTO: u32 = 16;
const OIF: u32 = 7;
const IIF: u32 = 6;

/// `(family, rule, 1.8.7 encoding, other writers' encodings)`.
type Case = (Family, Rule, Vec<XExpr>, Vec<Vec<XExpr>>);

fn tcp() -> Rule {
    Rule {
        proto: Some(TCP),
        ..Rule::any()
    }
}

fn cases() -> Vec<Case> {
    let mut c: Vec<Case> = Vec::new();
    let l4 = |p: &str| vec![meta(PROTO), cmp(0, p)];
    let nh9 = |p: &str| vec![pl(1, 9, 1), cmp(0, p)];
    let cat = |parts: &[&[XExpr]]| parts.concat();
    // -p tcp -j ISTIO_INBOUND
    let r = Rule {
        target: Target::Jump("ISTIO_INBOUND".into()),
        ..tcp()
    };
    let tail = [counter(), verdict(JUMP, Some("ISTIO_INBOUND"))];
    c.push((
        V4,
        r.clone(),
        cat(&[&l4("06"), &tail]),
        vec![cat(&[&nh9("06"), &tail])],
    ));
    c.push((V6, r, cat(&[&l4("06"), &tail]), vec![]));
    // -i not-istio-nic -j RETURN ; -o lo -j RETURN ; ! -o lo ; -i eth+ ; a 15-character name
    for (key, name, inv, data) in [
        (IIF, "not-istio-nic", false, "6e6f742d697374696f2d6e696300"),
        (OIF, "lo", false, "6c6f00"),
        (OIF, "lo", true, "6c6f00"),
        (IIF, "eth+", false, "657468"),
        (
            OIF,
            "abcdefghijklmno",
            false,
            "6162636465666768696a6b6c6d6e6f00",
        ),
    ] {
        let mut r = Rule {
            target: Target::Return,
            ..Rule::any()
        };
        let slot = if key == IIF { &mut r.iif } else { &mut r.oif };
        *slot = neg(inv, name.to_string());
        let e = vec![
            meta(key),
            cmp(inv as u32, data),
            counter(),
            verdict(RET, None),
        ];
        c.push((V4, r, e, vec![]));
    }
    // -j ISTIO_OUTPUT ; -j DROP ; -j ACCEPT ; no target
    for (t, v) in [
        (
            Target::Jump("ISTIO_OUTPUT".into()),
            verdict(JUMP, Some("ISTIO_OUTPUT")),
        ),
        (Target::Drop, verdict(0, None)),
        (Target::Accept, verdict(1, None)),
    ] {
        c.push((
            V4,
            Rule {
                target: t,
                ..Rule::any()
            },
            vec![counter(), v],
            vec![],
        ));
    }
    c.push((V4, Rule::any(), vec![counter()], vec![]));
    // -p tcp --dport 15020 -j RETURN (1.8.7 compat tcp; 1.8.9 native; 1.8.11 native with nh+9)
    let port = |proto: u8, dir: PortDir, port: u16, inv: bool| Rule {
        proto: Some(proto),
        matches: vec![Match::Port { dir, port, inv }],
        target: Target::Return,
        ..Rule::any()
    };
    let ret = [counter(), verdict(RET, None)];
    let r = port(TCP, PortDir::Dst, 15020, false);
    let compat = mt("tcp", 0, "0000ffff ac3aac3a 00000000 00000000");
    let native = [pl(2, 2, 2), cmp(0, "3aac")];
    c.push((
        V4,
        r.clone(),
        cat(&[&l4("06"), std::slice::from_ref(&compat), &ret]),
        vec![
            cat(&[&l4("06"), &native, &ret]),
            cat(&[&nh9("06"), &native, &ret]),
        ],
    ));
    c.push((
        V6,
        r,
        cat(&[&l4("06"), &[compat], &ret]),
        vec![cat(&[&l4("06"), &native, &ret])],
    ));
    // -p udp --dport 53 ; -p udp --sport 15053 ; -p tcp ! --dport 15008
    let r = port(UDP, PortDir::Dst, 53, false);
    let native = [pl(2, 2, 2), cmp(0, "0035")];
    let compat = mt("udp", 0, "0000ffff 35003500 00000000 00000000");
    c.push((
        V4,
        r,
        cat(&[&l4("11"), &[compat], &ret]),
        vec![cat(&[&l4("11"), &native, &ret])],
    ));
    let r = port(UDP, PortDir::Src, 15053, false);
    let native = [pl(2, 0, 2), cmp(0, "3acd")];
    let compat = mt("udp", 0, "cd3acd3a 0000ffff 00000000 00000000");
    c.push((
        V4,
        r,
        cat(&[&l4("11"), &[compat], &ret]),
        vec![cat(&[&l4("11"), &native, &ret])],
    ));
    let r = port(TCP, PortDir::Dst, 15008, true);
    let native = [pl(2, 2, 2), cmp(1, "3aa0")];
    let compat = mt("tcp", 0, "0000ffff a03aa03a 00000002 00000000");
    c.push((
        V4,
        r,
        cat(&[&l4("06"), &[compat], &ret]),
        vec![cat(&[&l4("06"), &native, &ret])],
    ));
    // ! -d 127.0.0.1/32 -o lo -p tcp -m tcp ! --dport 15008 -m owner --uid-owner 1337 -j ISTIO_IN_REDIRECT
    let r = Rule {
        dst: neg(true, "127.0.0.1/32".parse().unwrap()),
        oif: neg(false, "lo".into()),
        proto: Some(TCP),
        matches: vec![
            Match::Port {
                dir: PortDir::Dst,
                port: 15008,
                inv: true,
            },
            Match::Owner {
                kind: OwnerKind::Uid,
                id: 1337,
                inv: false,
            },
        ],
        target: Target::Jump("ISTIO_IN_REDIRECT".into()),
        ..Rule::any()
    };
    let oif = [meta(OIF), cmp(0, "6c6f00")];
    let daddr = [pl(1, 16, 4), cmp(1, "7f000001")];
    let owner = mt(
        "owner",
        1,
        "39050000 39050000 00000000 00000000 01000000 00000000",
    );
    let tail = [owner, counter(), verdict(JUMP, Some("ISTIO_IN_REDIRECT"))];
    let compat = mt("tcp", 0, "0000ffff a03aa03a 00000002 00000000");
    let native = [pl(2, 2, 2), cmp(1, "3aa0")];
    c.push((
        V4,
        r,
        cat(&[&oif, &l4("06"), &daddr, &[compat], &tail]),
        vec![
            cat(&[&oif, &l4("06"), &daddr, &native, &tail]),
            cat(&[&daddr, &oif, &nh9("06"), &native, &tail]),
        ],
    ));
    // -m owner ! --gid-owner 201 -m owner ! --gid-owner 202 -j RETURN (two owner matches)
    let gid = |id| Match::Owner {
        kind: OwnerKind::Gid,
        id,
        inv: true,
    };
    let r = Rule {
        matches: vec![gid(201), gid(202)],
        target: Target::Return,
        ..Rule::any()
    };
    c.push((
        V4,
        r,
        vec![
            mt(
                "owner",
                1,
                "00000000 00000000 c9000000 c9000000 02020000 00000000",
            ),
            mt(
                "owner",
                1,
                "00000000 00000000 ca000000 ca000000 02020000 00000000",
            ),
            counter(),
            verdict(RET, None),
        ],
        vec![],
    ));
    // -p tcp -m multiport ! --dports 53,15008 -m owner --uid-owner 1337 -j ISTIO_IN_REDIRECT
    let mut info = "0102 3500 a03a".to_string() + &"00".repeat(26 + 15) + "01";
    info.retain(|c| c != ' ');
    let r = Rule {
        matches: vec![Match::Multiport {
            ports: vec![53, 15008],
            inv: true,
        }],
        target: Target::Return,
        ..tcp()
    };
    c.push((
        V4,
        r,
        cat(&[&l4("06"), &[mt("multiport", 1, &info)], &ret]),
        vec![],
    ));
    // -p tcp -m mark --mark 1337 -j RETURN ; -p tcp -i lo -m mark ! --mark 1338 -j RETURN
    for (mark, inv, le) in [(1337u32, false, "39050000"), (1338, true, "3a050000")] {
        let r = Rule {
            iif: if inv { neg(false, "lo".into()) } else { None },
            matches: vec![Match::Mark {
                mark,
                mask: u32::MAX,
                inv,
            }],
            target: Target::Return,
            ..tcp()
        };
        let iif: Vec<XExpr> = if inv {
            vec![meta(IIF), cmp(0, "6c6f00")]
        } else {
            vec![]
        };
        let compat = mt(
            "mark",
            1,
            &format!("{le} ffffffff 0{}000000 00000000", inv as u8),
        );
        let native = [meta(3), cmp(inv as u32, le)];
        c.push((
            V4,
            r,
            cat(&[&iif, &l4("06"), &[compat], &ret]),
            vec![
                cat(&[&iif, &l4("06"), &native, &ret]),
                cat(&[&iif, &nh9("06"), &native, &ret]),
            ],
        ));
    }
    // -m conntrack --ctstate INVALID -j ISTIO_DROP ; RELATED,ESTABLISHED
    for (states, b) in [(CT_INVALID, "01"), (CT_RELATED | CT_ESTABLISHED, "06")] {
        let info = "00".repeat(146) + "0100 0000 " + b + "00" + &"00".repeat(16);
        let r = Rule {
            matches: vec![Match::Conntrack { states }],
            target: Target::Jump("ISTIO_DROP".into()),
            ..Rule::any()
        };
        let e = vec![
            mt("conntrack", 3, &info),
            counter(),
            verdict(JUMP, Some("ISTIO_DROP")),
        ];
        c.push((V4, r, e, vec![]));
    }
    // -p tcp -m connmark --mark 1337 -j CONNMARK --restore-mark ; -m mark ... -j CONNMARK --save-mark
    for (mode, b) in [(ConnmarkMode::Restore, "02"), (ConnmarkMode::Save, "01")] {
        let r = Rule {
            matches: vec![Match::Connmark {
                mark: 1337,
                mask: u32::MAX,
                inv: false,
            }],
            target: Target::Connmark {
                mode,
                nfmask: u32::MAX,
                ctmask: u32::MAX,
            },
            ..tcp()
        };
        let e = cat(&[
            &l4("06"),
            &[
                mt("connmark", 1, "39050000 ffffffff 00000000 00000000"),
                counter(),
                tg(
                    "CONNMARK",
                    2,
                    &format!("00000000 ffffffff ffffffff 0000{b}00"),
                ),
            ],
        ]);
        c.push((V4, r, e, vec![]));
    }
    // -p tcp -j REDIRECT --to-ports 15001 (ip: 24 bytes, ip6: 40 bytes)
    let r = Rule {
        target: Target::Redirect { port: 15001 },
        ..tcp()
    };
    let v4 = "01000000 02000000 00000000 00000000 3a993a99 00000000";
    let v6 = "02000000".to_string() + &"00".repeat(32) + "3a993a99";
    c.push((
        V4,
        r.clone(),
        cat(&[&l4("06"), &[counter(), tg("REDIRECT", 0, v4)]]),
        vec![],
    ));
    c.push((
        V6,
        r,
        cat(&[&l4("06"), &[counter(), tg("REDIRECT", 0, &v6)]]),
        vec![],
    ));
    // -j MARK --set-mark 1337
    let r = Rule {
        target: Target::Mark {
            mark: 1337,
            mask: u32::MAX,
        },
        ..Rule::any()
    };
    c.push((
        V4,
        r,
        vec![counter(), tg("MARK", 2, "39050000 ffffffff")],
        vec![],
    ));
    // ! -d 127.0.0.1/32 -p tcp -j TPROXY --on-port 15006 --tproxy-mark 0x539/0xffffffff (ip and ip6)
    let tp = "ffffffff 39050000".to_string() + &"00".repeat(16) + "3a9e 000000000000";
    for (f, d, daddr) in [
        (V4, "127.0.0.1/32", vec![pl(1, 16, 4), cmp(1, "7f000001")]),
        (
            V6,
            "::1/128",
            vec![pl(1, 24, 16), cmp(1, "00000000000000000000000000000001")],
        ),
    ] {
        let r = Rule {
            dst: neg(true, d.parse().unwrap()),
            target: Target::Tproxy {
                port: 15006,
                mark: 1337,
                mask: u32::MAX,
            },
            ..tcp()
        };
        let tail = [counter(), tg("TPROXY", 1, &tp)];
        let other = match f {
            V4 => vec![cat(&[&daddr, &nh9("06"), &tail])],
            V6 => vec![],
        };
        c.push((f, r, cat(&[&l4("06"), &daddr, &tail]), other));
    }
    // -p udp --dport 53 -m owner --uid-owner 1337 -j CT --zone 1
    let r = Rule {
        proto: Some(UDP),
        matches: vec![
            Match::Port {
                dir: PortDir::Dst,
                port: 53,
                inv: false,
            },
            Match::Owner {
                kind: OwnerKind::Uid,
                id: 1337,
                inv: false,
            },
        ],
        target: Target::Ct { zone: 1 },
        ..Rule::any()
    };
    let ct = "0000 0100".to_string() + &"00".repeat(68);
    let e = cat(&[
        &l4("11"),
        &[
            mt("udp", 0, "0000ffff 35003500 00000000 00000000"),
            mt(
                "owner",
                1,
                "39050000 39050000 00000000 00000000 01000000 00000000",
            ),
            counter(),
            tg("CT", 2, &ct),
        ],
    ]);
    c.push((V4, r, e, vec![]));
    // Addresses: -s 127.0.0.6/32, /8, /16, /12 (bitwise), ip6 /128, /32, /12, /33
    for (f, src, net, e) in [
        (
            V4,
            true,
            "127.0.0.6/32",
            vec![pl(1, 12, 4), cmp(0, "7f000006")],
        ),
        (V4, false, "10.0.0.0/8", vec![pl(1, 16, 1), cmp(0, "0a")]),
        (V4, false, "9.9.0.0/16", vec![pl(1, 16, 2), cmp(0, "0909")]),
        (
            V4,
            false,
            "10.96.0.0/12",
            vec![pl(1, 16, 4), bitwise("fff00000"), cmp(0, "0a600000")],
        ),
        (
            V6,
            true,
            "::6/128",
            vec![pl(1, 8, 16), cmp(0, "00000000000000000000000000000006")],
        ),
        (
            V6,
            false,
            "2001:db8::/32",
            vec![pl(1, 24, 4), cmp(0, "20010db8")],
        ),
        (
            V6,
            false,
            "fd00::/12",
            vec![
                pl(1, 24, 16),
                bitwise("fff00000000000000000000000000000"),
                cmp(0, "fd000000000000000000000000000000"),
            ],
        ),
        (
            V6,
            false,
            "2001:db8::/33",
            vec![
                pl(1, 24, 16),
                bitwise("ffffffff800000000000000000000000"),
                cmp(0, "20010db8000000000000000000000000"),
            ],
        ),
    ] {
        let mut r = Rule {
            target: Target::Return,
            ..Rule::any()
        };
        let a = neg(false, net.parse().unwrap());
        if src {
            r.src = a;
        } else {
            r.dst = a;
        }
        c.push((f, r, cat(&[&e, &ret]), vec![]));
    }
    c
}

#[test]
fn every_form_encodes_as_1_8_7_and_decodes_back() {
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
        Target::Other("target LOG revision 0 (1 bytes)".into())
    );
    let t = decode(V4, &[counter(), verdict(RET, None), meta(PROTO)]);
    assert!(matches!(t.matches[..], [Match::Other(_)]), "{t:?}");
}

#[test]
fn short_or_empty_infos_are_named_not_a_panic() {
    // Found by the xt_nft_roundtrip fuzz target: a REDIRECT target with no info bytes.
    for f in [V4, V6] {
        let t = decode(f, &[counter(), tg("REDIRECT", 0, "")]);
        assert_eq!(
            t.target,
            Target::Other("target REDIRECT revision 0 (0 bytes)".into())
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
