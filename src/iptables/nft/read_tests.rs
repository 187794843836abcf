//! The reader keeps each table's dormant flag, and our tables that are dormant are named; a batch ends
//! clearing the flags of each table it writes to.

use super::super::{batch, incompatible, plan};
use super::assemble;
use crate::netfilter::Family::V4;
use crate::nftables::decode::{self, ChainMsg};
use crate::nftables::encode::*;
use crate::xtables::rule::TableOps;

/// A `NEWTABLE` dump message as the kernel sends it (`flags` none: without the attribute).
fn table_msg(name: &str, flags: Option<u32>) -> Vec<u8> {
    let mut a = Attrs::default();
    a.str(NFTA_TABLE_NAME, name);
    if let Some(f) = flags {
        a.be32(NFTA_TABLE_FLAGS, f);
    }
    message(nft_type(NFT_MSG_NEWTABLE), 2, 1, 2, 0, &a.buf)
}

fn chain(table: &str, name: &str) -> ChainMsg {
    ChainMsg {
        table: table.into(),
        name: name.into(),
        base: None,
        policy: None,
        devices: Vec::new(),
    }
}

#[test]
fn a_dormant_table_is_read_and_named_only_when_it_holds_our_chains() {
    let mut dump = table_msg("nat", Some(NFT_TABLE_F_DORMANT));
    dump.extend(table_msg("mangle", Some(NFT_TABLE_F_DORMANT)));
    dump.extend(table_msg("raw", Some(0)));
    dump.extend(table_msg("filter", None));
    let tables: Vec<(String, u32)> = decode::messages(&dump)
        .unwrap()
        .iter()
        .map(|m| decode::table(m).unwrap())
        .collect();
    let chains = [
        chain("nat", "ISTIO_OUTPUT"),
        chain("mangle", "OTHER"),
        chain("raw", "ISTIO_INBOUND"),
        chain("filter", "ISTIO_X"),
    ];
    let current = assemble(V4, &tables, &chains, &[]);
    let dormant: Vec<(&str, bool)> = current
        .iter()
        .map(|t| (t.name.as_str(), t.dormant))
        .collect();
    assert_eq!(
        dormant,
        [
            ("mangle", true),
            ("raw", false),
            ("filter", false),
            ("nat", true)
        ]
    );
    // The dormant mangle table holds nothing of ours: only nat is named.
    assert_eq!(
        incompatible::dormant("ip", &current),
        ["table ip nat is dormant (none of its chains is hooked: traffic is not redirected)"]
    );
}

#[test]
fn the_batch_ends_waking_each_table_once() {
    let doc = |t: &str| TableOps {
        table: t.into(),
        ops: vec![],
    };
    let steps = plan::plan(V4, &[doc("nat"), doc("mangle"), doc("nat")], None).unwrap();
    let b = batch::encode(V4, &steps, None, 1);
    let msgs = decode::messages(&b.bytes).unwrap();
    // BATCH_BEGIN, the three tables as iptables-nft sends them, two wakes, BATCH_END.
    let tables: Vec<(String, Option<u32>)> = msgs[1..6]
        .iter()
        .map(|m| {
            assert_eq!(m.kind, nft_type(NFT_MSG_NEWTABLE));
            let a = decode::nft_attrs(m).unwrap();
            let f = a.iter().find(|(t, _)| *t == NFTA_TABLE_FLAGS);
            let f = f.map(|(_, p)| u32::from_be_bytes(p[..4].try_into().unwrap()));
            (decode::table(m).unwrap().0, f)
        })
        .collect();
    let t = |n: &str, f: Option<u32>| (n.to_string(), f);
    assert_eq!(
        tables,
        [
            t("nat", None),
            t("mangle", None),
            t("nat", None),
            t("nat", Some(0)),
            t("mangle", Some(0))
        ]
    );
    assert_eq!(msgs.len(), 7);
    assert_eq!(b.ack_seq, Some(6));
}
