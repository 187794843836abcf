//! prevResult conversion: any JSON value as prevResult, for any configuration version, gives a result or a
//! CNI error, never a panic. A result is valid JSON in the requested version, and passing it through again
//! (same version) gives the same text.
//! The body of the cargo-fuzz target of the same name (fuzz/fuzz_targets/), also run on stable by
//! tests/fuzz (seeds and mutations).

use istio_cni::cni::{result, version::SUPPORTED};
use istio_cni::json::{self, Value};

pub fn run(data: &[u8]) {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    let version = SUPPORTED[sel as usize % SUPPORTED.len()];
    let Ok(prev) = json::parse(text, "prevResult") else {
        return;
    };
    let Ok(out) = result::passthrough(Some(&prev), version) else {
        return;
    };
    let parsed = json::parse_object(&out, "output").expect("output is a JSON object");
    assert_eq!(json::str_of(&parsed, "cniVersion"), Some(version), "{out}");
    let again = result::passthrough(Some(&Value::Object(parsed)), version)
        .expect("our own output is a valid prevResult");
    assert_eq!(out, again, "passthrough is not idempotent");
}
