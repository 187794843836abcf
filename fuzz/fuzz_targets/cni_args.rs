//! cargo-fuzz target `cni_args`: the input and the property are in fuzz/targets/cni_args.rs, whose body tests/fuzz
//! also runs on stable (seeds and mutations).
#![no_main]

#[path = "../targets/cni_args.rs"]
mod body;

libfuzzer_sys::fuzz_target!(|data: &[u8]| body::run(data));
