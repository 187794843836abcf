//! cargo-fuzz target `xt_legacy_blob`: the input and the property are in fuzz/targets/xt_legacy_blob.rs, whose body
//! tests/fuzz also runs on stable (seeds and mutations).
#![no_main]

#[path = "../targets/xt_legacy_blob.rs"]
mod body;

libfuzzer_sys::fuzz_target!(|data: &[u8]| body::run(data));
