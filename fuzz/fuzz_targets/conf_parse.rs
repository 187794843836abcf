//! cargo-fuzz target `conf_parse`: the input and the property are in fuzz/targets/conf_parse.rs, whose body tests/fuzz
//! also runs on stable (seeds and mutations).
#![no_main]

#[path = "../targets/conf_parse.rs"]
mod body;

libfuzzer_sys::fuzz_target!(|data: &[u8]| body::run(data));
