use super::*;

fn names(kind: OwnerKind, name: &str) -> Result<u32> {
    match (kind, name) {
        (OwnerKind::Gid, "java") => Ok(7001),
        (OwnerKind::Uid, "istio-proxy") => Ok(1337),
        _ => Err(Error::Rules(format!("unknown name {name}"))),
    }
}

/// `(family, what the generator writes, what iptables-save 1.8.9 printed after restoring it)`: the
/// canonical forms recorded for issue 40 (every distinct form of the goldens, nft and legacy alike).
const FORMS: [(Family, &str, &str); 24] = [
    (Family::V4, "-p tcp --dport 15008 -j RETURN", "-p tcp -m tcp --dport 15008 -j RETURN"),
    (Family::V4, "-o lo -s 127.0.0.6/32 -j RETURN", "-s 127.0.0.6/32 -o lo -j RETURN"),
    (Family::V4, "-o lo ! -d 127.0.0.1/32 -p tcp ! --dport 15008 -m owner --uid-owner 1337 -j ISTIO_IN_REDIRECT",
        "! -d 127.0.0.1/32 -o lo -p tcp -m tcp ! --dport 15008 -m owner --uid-owner 1337 -j ISTIO_IN_REDIRECT"),
    (Family::V4, "-o lo ! -d 127.0.0.1/32 -p tcp -m multiport ! --dports 53,15008 -m owner --uid-owner 3 -j ISTIO_IN_REDIRECT",
        "! -d 127.0.0.1/32 -o lo -p tcp -m multiport ! --dports 53,15008 -m owner --uid-owner 3 -j ISTIO_IN_REDIRECT"),
    (Family::V4, "-o lo -p tcp ! --dport 53 -m owner ! --gid-owner 1337 -j RETURN",
        "-o lo -p tcp -m tcp ! --dport 53 -m owner ! --gid-owner 1337 -j RETURN"),
    (Family::V4, "-m owner ! --gid-owner java -m owner ! --gid-owner 202 -j RETURN",
        "-m owner ! --gid-owner 7001 -m owner ! --gid-owner 202 -j RETURN"),
    (Family::V4, "-p udp --dport 53 -d 127.0.0.53/32 -j REDIRECT --to-port 15053",
        "-d 127.0.0.53/32 -p udp -m udp --dport 53 -j REDIRECT --to-ports 15053"),
    (Family::V4, "-p udp --sport 15053 -m owner --uid-owner 3 -j CT --zone 2",
        "-p udp -m udp --sport 15053 -m owner --uid-owner 3 -j CT --zone 2"),
    (Family::V4, "-p udp --sport 53 -s 127.0.0.53/32 -j CT --zone 1",
        "-s 127.0.0.53/32 -p udp -m udp --sport 53 -j CT --zone 1"),
    (Family::V4, "-j MARK --set-mark 1337", "-j MARK --set-xmark 0x539/0xffffffff"),
    (Family::V4, "! -d 127.0.0.1/32 -p tcp -j TPROXY --tproxy-mark 1337/0xffffffff --on-port 15006",
        "! -d 127.0.0.1/32 -p tcp -j TPROXY --on-port 15006 --on-ip 0.0.0.0 --tproxy-mark 0x539/0xffffffff"),
    (Family::V4, "-p tcp -m mark --mark 1337 -j CONNMARK --save-mark",
        "-p tcp -m mark --mark 0x539 -j CONNMARK --save-mark --nfmask 0xffffffff --ctmask 0xffffffff"),
    (Family::V4, "-p tcp -m connmark --mark 1337 -j CONNMARK --restore-mark",
        "-p tcp -m connmark --mark 0x539 -j CONNMARK --restore-mark --nfmask 0xffffffff --ctmask 0xffffffff"),
    (Family::V4, "-p tcp -i lo -m mark ! --mark 1338 -j RETURN", "-i lo -p tcp -m mark ! --mark 0x53a -j RETURN"),
    (Family::V4, "-p tcp -s 127.0.0.6/32 -i lo -j RETURN", "-s 127.0.0.6/32 -i lo -p tcp -j RETURN"),
    (Family::V4, "! -d 127.0.0.1/32 -p tcp -o lo -m owner --gid-owner 1337 -j MARK --set-mark 1338",
        "! -d 127.0.0.1/32 -o lo -p tcp -m owner --gid-owner 1337 -j MARK --set-xmark 0x53a/0xffffffff"),
    (Family::V4, "-m conntrack --ctstate INVALID -j ISTIO_DROP", "-m conntrack --ctstate INVALID -j ISTIO_DROP"),
    (Family::V4, "-p tcp -m conntrack --ctstate RELATED,ESTABLISHED -j ISTIO_DIVERT",
        "-p tcp -m conntrack --ctstate RELATED,ESTABLISHED -j ISTIO_DIVERT"),
    (Family::V4, "-i eth1 -d 10.0.0.0/8 -j ISTIO_REDIRECT", "-d 10.0.0.0/8 -i eth1 -j ISTIO_REDIRECT"),
    (Family::V4, "-d 0.0.0.0/0 -j RETURN", "-j RETURN"),
    (Family::V6, "-o lo -s ::6/128 -j RETURN", "-s ::6/128 -o lo -j RETURN"),
    (Family::V6, "-p udp --dport 53 -d ::127.0.0.53/128 -j CT --zone 2",
        "-d ::127.0.0.53/128 -p udp -m udp --dport 53 -j CT --zone 2"),
    (Family::V6, "! -d ::1/128 -p tcp -j TPROXY --tproxy-mark 1337/0xffffffff --on-port 15006",
        "! -d ::1/128 -p tcp -j TPROXY --on-port 15006 --on-ip :: --tproxy-mark 0x539/0xffffffff"),
    (Family::V6, "-d 2001:db8::1/32 -j ISTIO_REDIRECT", "-d 2001:db8::/32 -j ISTIO_REDIRECT"),
];

#[test]
fn generator_forms_render_as_iptables_save_prints_them_and_save_forms_are_fixed_points() {
    for (family, input, saved) in FORMS {
        let r = parse_rule(family, input, &names).unwrap_or_else(|e| panic!("{input}: {e}"));
        assert_eq!(render(family, &r), saved, "{input}");
        let again = parse_rule(family, saved, &names).unwrap_or_else(|e| panic!("{saved}: {e}"));
        assert_eq!(again, r, "{saved} parses to the same rule");
    }
}

#[test]
fn the_model_holds_what_the_kernel_gets() {
    let r = parse_rule(
        Family::V4,
        "-o lo ! -d 10.96.0.0/12 -p tcp ! --dport 15008 -m owner --uid-owner istio-proxy -j ISTIO_IN_REDIRECT",
        &names,
    )
    .unwrap();
    assert_eq!(
        r.oif,
        Some(Neg {
            inv: false,
            value: "lo".to_string()
        })
    );
    assert_eq!(
        r.dst,
        Some(Neg {
            inv: true,
            value: "10.96.0.0/12".parse().unwrap()
        })
    );
    assert_eq!(r.proto, Some(TCP));
    assert_eq!(
        r.matches,
        vec![
            Match::Port {
                dir: PortDir::Dst,
                port: 15008,
                inv: true
            },
            Match::Owner {
                kind: OwnerKind::Uid,
                id: 1337,
                inv: false
            },
        ]
    );
    assert_eq!(r.target, Target::Jump("ISTIO_IN_REDIRECT".into()));
}

#[test]
fn what_the_generator_never_writes_is_an_error_naming_it() {
    for (spec, says) in [
        ("-p tcp -m comment --comment x -j RETURN", "--comment"),
        ("--dport 53 -j RETURN", "needs -p tcp or -p udp"),
        ("-p icmp --dport 53 -j RETURN", "needs -p tcp or -p udp"),
        ("-d 10.0.0.300 -j RETURN", "10.0.0.300"),
        ("-d ::1/128 -j RETURN", "not an IPv4 address"),
        ("-j REDIRECT", "--to-ports"),
        ("-j TPROXY --on-port 15006 --on-ip 10.0.0.1", "unspecified"),
        ("-j CT --zone 1 --notrack", "--notrack"),
        ("-m owner --gid-owner nosuchgroup -j RETURN", "nosuchgroup"),
        (
            "-m multiport --dports 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16 -j RETURN",
            "1 to 15 ports",
        ),
        ("-j RETURN !", "`!` among the target's options"),
        ("-p tcp !", "`!` at the end"),
        ("! -p tcp -j RETURN", "! -p"),
    ] {
        let e = parse_rule(Family::V4, spec, &names)
            .unwrap_err()
            .to_string();
        assert!(e.contains(says), "{spec}: {e}");
    }
}

#[test]
fn documents_become_operations_per_table() {
    let doc = "* nat\n-N ISTIO_OUTPUT\n-A OUTPUT -j ISTIO_OUTPUT\n-I ISTIO_OUTPUT 2 -m owner --uid-owner 1337 -j RETURN\nCOMMIT\n# c\n*mangle\n-D OUTPUT -o eth0 -j RETURN\n-F ISTIO_DIVERT\n-X ISTIO_DIVERT\nCOMMIT\n";
    let t = parse_doc(Family::V4, doc, &names).unwrap();
    assert_eq!(t.len(), 2);
    assert_eq!(t[0].table, "nat");
    let owner = Match::Owner {
        kind: OwnerKind::Uid,
        id: 1337,
        inv: false,
    };
    assert_eq!(
        t[0].ops,
        vec![
            Op::NewChain("ISTIO_OUTPUT".into()),
            Op::Append(
                "OUTPUT".into(),
                Rule {
                    target: Target::Jump("ISTIO_OUTPUT".into()),
                    ..Rule::any()
                }
            ),
            Op::Insert(
                "ISTIO_OUTPUT".into(),
                2,
                Rule {
                    matches: vec![owner],
                    target: Target::Return,
                    ..Rule::any()
                }
            ),
        ]
    );
    assert_eq!(t[1].table, "mangle");
    assert!(
        matches!(&t[1].ops[..], [Op::Delete(c, _), Op::Flush(f), Op::DeleteChain(x)]
        if c == "OUTPUT" && f == "ISTIO_DIVERT" && x == "ISTIO_DIVERT")
    );
    for (bad, says) in [
        ("-A OUTPUT -j RETURN\n", "outside a table"),
        ("*nat\n-A OUTPUT -j RETURN\n", "no COMMIT"),
        ("*nat\n-Z OUTPUT\nCOMMIT\n", "line 2: unsupported line"),
        (
            "*nat\n-A OUTPUT -p tcp --dport x -j RETURN\nCOMMIT\n",
            "line 2",
        ),
    ] {
        let e = parse_doc(Family::V4, bad, &names).unwrap_err().to_string();
        assert!(e.contains(says), "{bad:?}: {e}");
    }
}

#[test]
fn save_text_is_what_the_dump_parser_reads() {
    let r = parse_rule(Family::V4, "-p tcp -j REDIRECT --to-ports 15001", &names).unwrap();
    let t = Table {
        name: "nat".into(),
        chains: vec![
            Chain {
                name: "OUTPUT".into(),
                rules: vec![],
            },
            Chain {
                name: "ISTIO_REDIRECT".into(),
                rules: vec![r, Rule::any()],
            },
        ],
    };
    let text = save_text(Family::V4, &[t]);
    assert_eq!(
        text,
        "*nat\n:OUTPUT ACCEPT [0:0]\n:ISTIO_REDIRECT - [0:0]\n-A ISTIO_REDIRECT -p tcp -j REDIRECT --to-ports 15001\n-A ISTIO_REDIRECT\nCOMMIT\n"
    );
    let d = crate::iptables::save::parse(&text);
    assert_eq!(
        d["nat"].chains["ISTIO_REDIRECT"][0],
        "-p tcp -j REDIRECT --to-ports 15001"
    );
}
