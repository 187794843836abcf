//! The forms of research §2.3 (issue 40) in a rule's header: `-p`, `-i`/`-o` (with `!`, `+`, 15 characters),
//! `-s`/`-d` (whole-byte prefixes and `bitwise` masks, ip and ip6) and the verdicts, as iptables-nft 1.8.7
//! encodes them, with 1.8.11's `payload nh+9` for `-p`.

use super::test_exprs::*;
use super::xexpr::XExpr;
use crate::netfilter::Family::{V4, V6};
use crate::xtables::rule::*;

pub fn cases() -> Vec<Case> {
    let mut c: Vec<Case> = Vec::new();
    let l4 = |p: &str| vec![meta(PROTO), cmp(0, p)];
    let nh9 = |p: &str| vec![pl(1, 9, 1), cmp(0, p)];
    let cat = |parts: &[&[XExpr]]| parts.concat();
    let ret = [counter(), verdict(RET, None)];
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
