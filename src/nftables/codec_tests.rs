//! The codec against bytes nft 1.0.6 sent for the same objects (captured with `nft --debug=mnl -f` in a
//! scratch namespace; message bodies after the 16-byte `nlmsghdr`, i.e. `nfgenmsg` + attributes), and
//! encode → decode round trips.

use super::*;
use crate::netlink::NLM_F_ACK;
use crate::nftables::batch::{batch, Batch};
use crate::nftables::generate::generate;
use crate::nftables::lower::{lower, no_groups};
use crate::nftables::model::*;
use crate::nftables::{decode, emit};
use crate::redirect::values::{Cidr, IfaceName};

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// The three rules and four chains captured from nft.
fn sample() -> Ruleset {
    let inbound = vec![
        Item::L4(Proto::Tcp),
        emit::tcp_dport(false, 15008),
        Item::Counter,
        Item::Return,
    ];
    let output = vec![
        Item::Oif(IfaceName::parse("lo").unwrap()),
        Item::L4(Proto::Tcp),
        emit::cidr(false, true, &Cidr::parse("127.0.0.1/32").unwrap()),
        Item::PortSet {
            proto: Proto::Tcp,
            neq: true,
            ports: vec![53, 15008],
        },
        emit::owner(false, false, false, Owner::Id(1337)),
        Item::Counter,
        Item::Jump(ISTIO_IN_REDIRECT),
    ];
    let redirect = vec![Item::L4(Proto::Tcp), Item::Counter, Item::Redirect(15006)];
    Ruleset {
        tables: vec![TableSet {
            table: Table::Nat,
            chains: [
                (OUTPUT, vec![]),
                (ISTIO_INBOUND, vec![inbound]),
                (ISTIO_IN_REDIRECT, vec![redirect]),
                (ISTIO_OUTPUT, vec![output]),
            ]
            .map(|(name, rules)| Chain { name, rules })
            .to_vec(),
        }],
    }
}

const NFT_CHAIN_OUTPUT: &str = "0100000014000100697374696f2d70726f78792d6e6174000b0003006f75747075740000080007006e61740014000480080001000000000308000200ffffff9c";
const NFT_CHAIN_INBOUND: &str =
    "0100000014000100697374696f2d70726f78792d6e61740012000300697374696f2d696e626f756e64000000";
const NFT_RULE_INBOUND: &str = "0100000014000100697374696f2d70726f78792d6e61740012000200697374696f2d696e626f756e64000000f800048024000180090001006d6574610000000014000280080002000000001008000100000000012c00018008000100636d700020000280080001000000000108000200000000000c0003800500010006000000340001800c0001007061796c6f6164002400028008000100000000010800020000000002080003000000000208000400000000022c00018008000100636d700020000280080001000000000108000200000000000c000380060001003aa00000140001800c000100636f756e7465720004000280300001800e000100696d6d6564696174650000001c0002800800010000000000100002800c00028008000100fffffffb";
/// nft's NEWSET without its trailing `NFTA_SET_USERDATA` (nft-private, spec §4.3; we do not send it).
const NFT_SET: &str = "0100000014000100697374696f2d70726f78792d6e6174000c0002005f5f7365742564000800030000000003080004000000000d080005000000000208000a00000000010c00098008000100000000 02";
const NFT_SETELEM: &str = "0100000014000100697374696f2d70726f78792d6e6174000c0002005f5f736574256400080004000000000124000380100001800c0001800600010000350000100002800c000180060001003aa00000";
const NFT_RULE_OUTPUT: &str = "0100000014000100697374696f2d70726f78792d6e61740011000200697374696f2d6f7574707574000000007802048024000180090001006d6574610000000014000280080002000000000708000100000000013800018008000100636d70002c0002800800010000000001080002000000000018000380140001006c6f000000000000000000000000000024000180090001006d6574610000000014000280080002000000001008000100000000012c00018008000100636d700020000280080001000000000108000200000000000c000380050001000600000024000180090001006d6574610000000014000280080002000000000f08000100000000012c00018008000100636d700020000280080001000000000108000200000000000c0003800500010002000000340001800c0001007061796c6f6164002400028008000100000000010800020000000001080003000000001008000400000000042c00018008000100636d700020000280080001000000000108000200000000010c000380080001007f000001340001800c0001007061796c6f616400240002800800010000000001080002000000000208000300000000020800040000000002380001800b0001006c6f6f6b757000002800028008000200000000010c0001005f5f7365742564000800040000000001080005000000000124000180090001006d6574610000000014000280080002000000000a08000100000000012c00018008000100636d700020000280080001000000000108000200000000000c0003800800010039050000140001800c000100636f756e7465720004000280480001800e000100696d6d656469617465000000340002800800010000000000280002802400028008000100fffffffd16000200697374696f2d696e2d7265646972656374000000";
const NFT_RULE_REDIRECT: &str = "0100000014000100697374696f2d70726f78792d6e61740016000200697374696f2d696e2d7265646972656374000000b800048024000180090001006d6574610000000014000280080002000000001008000100000000012c00018008000100636d700020000280080001000000000108000200000000000c0003800500010006000000140001800c000100636f756e74657200040002802c0001800e000100696d6d6564696174650000001800028008000100000000010c000280060001003a9e0000240001800a00010072656469720000001400028008000100000000010800030000000002";

fn bodies(b: &Batch, msg: u16) -> Vec<Vec<u8>> {
    decode::messages(&b.bytes)
        .unwrap()
        .into_iter()
        .filter(|m| m.kind == nft_type(msg))
        .map(|m| m.body.to_vec())
        .collect()
}

#[test]
fn messages_match_the_bytes_nft_sends() {
    let b = batch(&sample(), &no_groups, None, 0, true).unwrap();
    let chains = bodies(&b, NFT_MSG_NEWCHAIN);
    assert_eq!(chains[0], hex(NFT_CHAIN_OUTPUT));
    assert_eq!(chains[1], hex(NFT_CHAIN_INBOUND));
    let rules = bodies(&b, NFT_MSG_NEWRULE);
    assert_eq!(rules[0], hex(NFT_RULE_INBOUND));
    assert_eq!(rules[1], hex(NFT_RULE_REDIRECT));
    assert_eq!(rules[2], hex(NFT_RULE_OUTPUT));
    assert_eq!(
        bodies(&b, NFT_MSG_NEWSET)[0],
        hex(&NFT_SET.replace(' ', ""))
    );
    assert_eq!(bodies(&b, NFT_MSG_NEWSETELEM)[0], hex(NFT_SETELEM));
}

#[test]
fn batch_framing() {
    let rs = sample();
    let b = batch(&rs, &no_groups, Some(7), 100, true).unwrap();
    let msgs = decode::messages(&b.bytes).unwrap();
    let first = msgs.first().unwrap();
    assert_eq!((first.kind, first.seq), (NFNL_MSG_BATCH_BEGIN, 100));
    // res_id = NFNL_SUBSYS_NFTABLES big-endian, then GENID 7.
    assert_eq!(&first.body[..4], &[0, 0, 0, 10]);
    assert_eq!(&first.body[4..], &hex("0800010000000007")[..]);
    let last = msgs.last().unwrap();
    assert_eq!(last.kind, NFNL_MSG_BATCH_END);
    // Every inner message has its own seq, listed in `what`; only the last asks for an ack.
    let inner = &msgs[1..msgs.len() - 1];
    assert_eq!(inner.len(), b.what.len());
    for (i, (m, w)) in inner.iter().zip(&b.what).enumerate() {
        assert_eq!(m.seq, w.seq);
        assert_eq!(
            m.flags & NLM_F_ACK != 0,
            i == inner.len() - 1,
            "message {i}"
        );
    }
    assert_eq!(first.flags & NLM_F_ACK, 0);
    assert_eq!(last.flags & NLM_F_ACK, 0);
    // Convergent: all three tables created and deleted first.
    let ops: Vec<String> = b.what.iter().take(7).map(|w| w.op(&rs)).collect();
    assert_eq!(
        ops,
        [
            "add table inet istio-proxy-nat",
            "delete table inet istio-proxy-nat",
            "add table inet istio-proxy-mangle",
            "delete table inet istio-proxy-mangle",
            "add table inet istio-proxy-raw",
            "delete table inet istio-proxy-raw",
            "add table inet istio-proxy-nat"
        ]
    );
    // A namespace without our tables gets a create-only batch: nothing for the kernel to destroy.
    let fresh = batch(&rs, &no_groups, Some(7), 100, false).unwrap();
    assert_eq!(fresh.what[0].op(&rs), "add table inet istio-proxy-nat");
    assert!(!fresh.what.iter().any(|w| w.op(&rs).starts_with("delete")));
    assert_eq!(fresh.what.len(), b.what.len() - 6);
    let redirect = b
        .what
        .iter()
        .find(|w| w.op(&rs).contains("redirect to :15006"))
        .unwrap();
    assert_eq!(redirect.modules, vec![("redir".to_string(), "nft_redir")]);
}

#[test]
fn rules_decode_back_to_what_was_lowered() {
    let b = batch(&sample(), &no_groups, None, 0, true).unwrap();
    let msgs = decode::messages(&b.bytes).unwrap();
    let decoded: Vec<decode::RuleMsg> = msgs
        .iter()
        .filter(|m| m.kind == nft_type(NFT_MSG_NEWRULE))
        .map(|m| decode::rule(m).unwrap())
        .collect();
    let want: Vec<Vec<Item>> = sample().tables[0]
        .chains
        .iter()
        .flat_map(|c| c.rules.clone())
        .collect();
    assert_eq!(decoded.len(), want.len());
    for (d, items) in decoded.iter().zip(&want) {
        let mut low = lower(items, &no_groups).unwrap().exprs;
        for e in low.iter_mut() {
            if let crate::nftables::expr::Expr::Lookup { set_id, .. } = e {
                *set_id = Some(1); // the batch's id for the only set
            }
        }
        assert_eq!(d.exprs, low);
        assert_eq!(d.table, "istio-proxy-nat");
    }
}

#[test]
fn every_capture_vector_round_trips() {
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/conformance/capture");
    let Ok(rd) = std::fs::read_dir(&dir) else {
        panic!("conformance vectors not found in {}", dir.display())
    };
    let groups = |n: &str| -> crate::Result<u32> { Ok(if n == "java" { 7001 } else { 7002 }) };
    let mut n = 0;
    for e in rd {
        let p = e.unwrap().path().join("config.json");
        let o = crate::json::parse_object(&std::fs::read_to_string(&p).unwrap(), "c").unwrap();
        let cfg = crate::redirect::CaptureConfig::from_json(&o).unwrap();
        let rs = generate(&cfg).unwrap().ruleset();
        let b = batch(&rs, &groups, Some(1), 1, true).unwrap();
        let msgs = decode::messages(&b.bytes).unwrap();
        let mut rules = msgs.iter().filter(|m| m.kind == nft_type(NFT_MSG_NEWRULE));
        for ts in &rs.tables {
            for c in &ts.chains {
                for items in &c.rules {
                    let d = decode::rule(rules.next().unwrap()).unwrap();
                    let low = lower(items, &groups).unwrap().exprs;
                    let strip = |v: Vec<crate::nftables::expr::Expr>| -> Vec<_> {
                        v.into_iter()
                            .map(|e| match e {
                                crate::nftables::expr::Expr::Lookup {
                                    sreg, set, flags, ..
                                } => crate::nftables::expr::Expr::Lookup {
                                    sreg,
                                    set,
                                    set_id: None,
                                    flags,
                                },
                                e => e,
                            })
                            .collect()
                    };
                    assert_eq!(strip(d.exprs), strip(low), "{}", p.display());
                    assert_eq!(
                        (d.table.as_str(), d.chain.as_str()),
                        (ts.table.name(), c.name)
                    );
                }
            }
        }
        assert!(rules.next().is_none());
        n += 1;
    }
    assert_eq!(n, 18);
}

/// A `NEWRULE` message around `body` (`nfgenmsg` + attributes), its header zeroed but for length and type.
fn newrule(body: &[u8]) -> Vec<u8> {
    let mut m = (16 + body.len() as u32).to_ne_bytes().to_vec();
    m.extend_from_slice(&nft_type(NFT_MSG_NEWRULE).to_ne_bytes());
    m.extend_from_slice(&[0; 10]);
    m.extend_from_slice(body);
    m
}

#[test]
fn decoder_rejects_garbage_without_panicking() {
    assert!(decode::messages(&[1, 2, 3]).is_err());
    assert!(decode::messages(&hex("0800000000000000")).is_err()); // length 8 < header
    let truncated = newrule(&hex(NFT_RULE_INBOUND)[..40]);
    let msgs = decode::messages(&truncated).unwrap();
    assert!(decode::rule(&msgs[0]).is_err());
}

/// A deterministic stand-in for the fuzz target: every truncation and many single-byte mutations of real
/// messages decode to a value or an error, never a panic, and what decodes re-encodes to the same rule.
#[test]
fn mutated_messages_never_panic_the_decoder() {
    let b = batch(&sample(), &no_groups, Some(3), 1, true).unwrap();
    let mut inputs = vec![b.bytes.clone()];
    for body in [NFT_RULE_OUTPUT, NFT_RULE_INBOUND, NFT_SETELEM] {
        inputs.push(newrule(&hex(body)));
    }
    let probe = |data: &[u8]| {
        if let Ok(msgs) = decode::messages(data) {
            for m in &msgs {
                let _ = (
                    decode::chain(m),
                    decode::table_name(m),
                    decode::set_elems(m),
                );
                let _ = (decode::gen_id(m), decode::error(m));
                if let Ok(r) = decode::rule(m) {
                    let mut a = Attrs::default();
                    expressions(&r.exprs, &mut a);
                    a.str(NFTA_RULE_TABLE, &r.table)
                        .str(NFTA_RULE_CHAIN, &r.chain);
                    let again = message(nft_type(NFT_MSG_NEWRULE), 1, 0, 1, 0, &a.buf);
                    let r2 = decode::rule(&decode::messages(&again).unwrap()[0]).unwrap();
                    assert_eq!(r2.exprs, r.exprs);
                }
            }
        }
    };
    for input in &inputs {
        for n in 0..input.len() {
            probe(&input[..n]);
        }
        for i in 0..input.len().min(400) {
            for v in [0u8, 1, 0x7f, 0xff] {
                let mut m = input.clone();
                m[i] = v;
                probe(&m);
            }
        }
    }
}

/// Found by fuzzing (seed `fuzz/seeds/nft_decode/crash-error-errno-i32-min`): an `NLMSG_ERROR` whose error
/// code is `i32::MIN` has no positive errno; negating it overflowed (a panic with overflow checks).
#[test]
fn an_error_code_of_i32_min_is_malformed_not_a_panic() {
    let seed = include_bytes!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/fuzz/seeds/nft_decode/crash-error-errno-i32-min"
    ));
    let msgs = decode::messages(seed).unwrap();
    assert_eq!(msgs.len(), 1);
    let e = decode::error(&msgs[0]).unwrap_err().to_string();
    assert!(e.contains("malformed netlink reply"), "{e}");
    // An ordinary error and an ack still decode.
    let mut ok = seed.to_vec();
    ok[16..20].copy_from_slice(&(-85i32).to_ne_bytes());
    assert_eq!(
        decode::error(&decode::messages(&ok).unwrap()[0]).unwrap().0,
        85
    );
    ok[16..20].copy_from_slice(&0i32.to_ne_bytes());
    assert_eq!(
        decode::error(&decode::messages(&ok).unwrap()[0]).unwrap().0,
        0
    );
}

/// One netlink attribute: length, type, payload padded to 4 bytes.
fn nla(ty: u16, payload: &[u8]) -> Vec<u8> {
    let mut a = ((4 + payload.len()) as u16).to_ne_bytes().to_vec();
    a.extend_from_slice(&ty.to_ne_bytes());
    a.extend_from_slice(payload);
    a.resize((a.len() + 3) & !3, 0);
    a
}

/// An expression's `NFTA_LIST_ELEM` payload: its name and its data attributes `(type, big-endian u32)`.
fn expr_payload(name: &str, data: &[(u16, u32)]) -> Vec<u8> {
    let mut n = name.as_bytes().to_vec();
    n.push(0);
    let inner: Vec<u8> = data
        .iter()
        .flat_map(|(t, v)| nla(*t, &v.to_be_bytes()))
        .collect();
    [nla(1, &n), nla(2 | crate::netlink::NLA_F_NESTED, &inner)].concat()
}

/// Attributes we never send are not dropped on the way in: a redirect to a port range (REG_PROTO_MAX
/// another register), a tproxy to an address, a ct load or set with a direction each decode as a foreign
/// form, never as the expression of ours they would otherwise equal.
#[test]
fn attributes_we_never_send_make_an_expression_foreign() {
    let ours = [
        (expr_payload("redir", &[(1, 1)]), "redir"),
        (expr_payload("redir", &[(1, 1), (2, 1)]), "redir"),
        (expr_payload("tproxy", &[(1, 2), (3, 1)]), "tproxy"),
        (expr_payload("ct", &[(1, 1), (2, 0)]), "ct"),
        (expr_payload("ct", &[(2, 2), (4, 1)]), "ct"),
    ];
    for (p, name) in &ours {
        let e = decode::expr(p).unwrap();
        assert!(!matches!(e, Expr::Other(_)), "{name}: {e:?}");
    }
    let same_as_ours_but = [
        expr_payload("redir", &[(1, 1), (2, 2)]),
        expr_payload("tproxy", &[(1, 2), (2, 2), (3, 1)]),
        expr_payload("ct", &[(1, 1), (2, 0), (3, 0)]),
        expr_payload("ct", &[(2, 2), (3, 0), (4, 1)]),
    ];
    for p in &same_as_ours_but {
        let e = decode::expr(p).unwrap();
        assert!(
            matches!(&e, Expr::Other(o) if o.ends_with("(other form)")),
            "{e:?}"
        );
    }
}
