//! cargo-fuzz target `nft_decode`: the input and the property are in fuzz/targets/nft_decode.rs, whose body tests/fuzz
//! also runs on stable (seeds and mutations).
#![no_main]

#[path = "../targets/nft_decode.rs"]
mod body;

libfuzzer_sys::fuzz_target!(|data: &[u8]| body::run(data));
