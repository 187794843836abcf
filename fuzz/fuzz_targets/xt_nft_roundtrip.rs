//! cargo-fuzz target `xt_nft_roundtrip`: the input and the property are in fuzz/targets/xt_nft_roundtrip.rs,
//! whose body tests/fuzz also runs on stable (seeds and mutations).
#![no_main]

#[path = "../targets/xt_nft_roundtrip.rs"]
mod body;

libfuzzer_sys::fuzz_target!(|data: &[u8]| body::run(data));
