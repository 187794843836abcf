//! The forms of research §2.3 (issue 40) of matches and targets: ports (compat `tcp`/`udp` revision 0 as
//! 1.8.7 writes them; native `payload @th` + `cmp` as 1.8.9 and 1.8.11 do), owner, multiport, mark (compat
//! revision 1; native `meta mark`), conntrack, connmark, REDIRECT (ip and ip6), MARK, CONNMARK, TPROXY, CT,
//! info bytes as the kernel holds them (issue40-data/v1.8.7-written).

use super::test_exprs::*;
use super::xexpr::XExpr;
use crate::netfilter::Family::{V4, V6};
use crate::xtables::rule::*;

pub fn cases() -> Vec<Case> {
    let mut c: Vec<Case> = Vec::new();
    let l4 = |p: &str| vec![meta(PROTO), cmp(0, p)];
    let nh9 = |p: &str| vec![pl(1, 9, 1), cmp(0, p)];
    let cat = |parts: &[&[XExpr]]| parts.concat();
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
    c
}
