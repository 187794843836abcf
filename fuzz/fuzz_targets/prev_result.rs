//! cargo-fuzz target `prev_result`: the input and the property are in fuzz/targets/prev_result.rs, whose body tests/fuzz
//! also runs on stable (seeds and mutations).
#![no_main]

#[path = "../targets/prev_result.rs"]
mod body;

libfuzzer_sys::fuzz_target!(|data: &[u8]| body::run(data));
