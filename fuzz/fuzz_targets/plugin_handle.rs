//! cargo-fuzz target `plugin_handle`: the input and the property are in fuzz/targets/plugin_handle.rs, whose body tests/fuzz
//! also runs on stable (seeds and mutations).
#![no_main]

#[path = "../targets/plugin_handle.rs"]
mod body;

libfuzzer_sys::fuzz_target!(|data: &[u8]| body::run(data));
