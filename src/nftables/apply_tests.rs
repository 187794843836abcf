use super::*;
use crate::nftables::lower::no_groups;

fn tproxy_batch() -> (Ruleset, batch::Batch) {
    let o = crate::json::parse_object(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../shared/conformance/capture/tproxy/config.json"
        ))
        .unwrap(),
        "c",
    )
    .unwrap();
    let cfg = crate::redirect::CaptureConfig::from_json(&o).unwrap();
    let rs = crate::nftables::generate(&cfg).unwrap().ruleset();
    let groups = |_: &str| -> Result<u32> { Ok(0) };
    let b = batch::batch(&rs, &groups, None, 10, true).unwrap();
    (rs, b)
}

#[test]
fn a_missing_module_is_named_with_the_rule() {
    let (rs, b) = tproxy_batch();
    let fail = |errno, seq| failure_text(&b, &rs, &[Failure { errno, seq }]);
    let seq_of = |op: &str| b.what.iter().find(|w| w.op(&rs).contains(op)).unwrap().seq;
    let t = fail(2, seq_of("tproxy ip to"));
    assert!(
        t.starts_with("nftables run failed: add rule inet istio-proxy-mangle istio-tproxy meta l4proto tcp ip daddr != 127.0.0.1/32 tproxy ip to :15006"),
        "{t}"
    );
    assert!(t.contains("No such file or directory"), "{t}");
    assert!(t.contains("tproxy needs kernel module nft_tproxy"), "{t}");
    let t = fail(2, seq_of("type nat hook prerouting"));
    assert!(
        t.contains("type nat chain needs kernel module nft_chain_nat"),
        "{t}"
    );
    // Commit-time errors land on the first message: say so.
    let t = fail(22, b.what[0].seq);
    assert!(
        t.contains("add table inet istio-proxy-nat: Invalid argument"),
        "{t}"
    );
    assert!(t.contains("found at commit"), "{t}");
    assert!(no_groups("x").is_err());
}
