//! The reader keeps each table's dormant flag, and our tables that are dormant are named; the batch's
//! first `NEWTABLE` of each table clears the flags.

use super::super::{batch, incompatible, plan::Step};
use super::assemble;
use crate::netfilter::Family::V4;
use crate::nftables::decode::{self, ChainMsg};
use crate::nftables::encode::*;

/// A `NEWTABLE` dump message as the kernel sends it (`flags` none: without the attribute).
fn table_msg(name: &str, flags: Option<u32>) -> Vec<u8> {
    let mut a = Attrs::default();
    a.str(NFTA_TABLE_NAME, name);
    if let Some(f) = flags {
        a.be32(NFTA_TABLE_FLAGS, f);
    }
    message(nft_type(NFT_MSG_NEWTABLE), 2, 1, 2, 0, &a.buf)
}

fn chain(table: &str, name: &str) -> (ChainMsg, Option<u32>) {
    let c = ChainMsg {
        table: table.into(),
        name: name.into(),
        base: None,
        devices: Vec::new(),
    };
    (c, None)
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
fn each_tables_first_newtable_clears_its_flags_once() {
    let steps = [
        Step::Table("nat".into()),
        Step::Table("mangle".into()),
        Step::Table("nat".into()),
    ];
    let b = batch::encode(V4, &steps, None, 1);
    let msgs = decode::messages(&b.bytes).unwrap();
    let flags: Vec<Option<u32>> = msgs[1..4]
        .iter()
        .map(|m| {
            let a = decode::nft_attrs(m).unwrap();
            let f = a.iter().find(|(t, _)| *t == NFTA_TABLE_FLAGS);
            f.map(|(_, p)| u32::from_be_bytes(p[..4].try_into().unwrap()))
        })
        .collect();
    assert_eq!(flags, [Some(0), Some(0), None]);
}
