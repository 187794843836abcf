//! The nf_tables netlink decoder: any bytes give messages, rules, chains, set elements or errors, never a
//! panic; a rule it decodes re-encodes and decodes to the same expressions.
//! The body of the cargo-fuzz target of the same name (fuzz/fuzz_targets/), also run on stable by
//! tests/fuzz (seeds and mutations).

use istio_cni::nftables::{decode, encode};

pub fn run(data: &[u8]) {
    let Ok(msgs) = decode::messages(data) else {
        return;
    };
    for m in &msgs {
        let _ = decode::chain(m);
        let _ = decode::table_name(m);
        let _ = decode::set_elems(m);
        let _ = decode::gen_id(m);
        let _ = decode::error(m);
        if let Ok(r) = decode::rule(m) {
            let mut a = encode::Attrs::default();
            a.str(encode::NFTA_RULE_TABLE, &r.table)
                .str(encode::NFTA_RULE_CHAIN, &r.chain);
            encode::expressions(&r.exprs, &mut a);
            let bytes = encode::message(
                encode::nft_type(encode::NFT_MSG_NEWRULE),
                1,
                0,
                1,
                0,
                &a.buf,
            );
            let again = decode::messages(&bytes).expect("our own message parses");
            let r2 = decode::rule(&again[0]).expect("our own rule decodes");
            assert_eq!(r2.exprs, r.exprs);
        }
    }
}
