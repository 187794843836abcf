//! nftables mode, text: every `<CONFORMANCE_DIR>/capture/*/config.json` through the nftables generator gives
//! the case's `expected.nft` byte for byte, through the library and through `istio-cni explain --nft`.

use crate::support::explain_nft_script;
use istio_cni::json;
use istio_cni::nftables::{generate, script};
use istio_cni::redirect::CaptureConfig;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

fn capture_cases() -> Vec<PathBuf> {
    let dir = crate::support::conformance_dir().join("capture");
    let mut out: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("expected.nft").is_file())
        .collect();
    out.sort();
    assert_eq!(
        out.len(),
        18,
        "expected 18 nft capture vectors in {}",
        dir.display()
    );
    out
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()))
}

#[test]
fn every_capture_vector_gives_the_golden_script() {
    let mut failed = Vec::new();
    for case in capture_cases() {
        let cfg_path = case.join("config.json");
        let o = json::parse_object(&read(&cfg_path), "config.json").unwrap();
        let cfg = CaptureConfig::from_json(&o).unwrap();
        let got = script(&generate(&cfg).unwrap());
        let want = read(&case.join("expected.nft"));
        if got != want {
            eprintln!("--- {}\nwant:\n{want}\ngot:\n{got}", case.display());
            failed.push(case.display().to_string());
        }
    }
    assert!(failed.is_empty(), "script differs for {failed:?}");
}

#[test]
fn explain_nft_prints_the_golden_script() {
    for case in capture_cases() {
        let what = case.display().to_string();
        let script_only = explain_nft_script(
            &what,
            &[
                OsStr::new("--capture"),
                case.join("config.json").as_os_str(),
            ],
        );
        let want = read(&case.join("expected.nft"));
        assert_eq!(script_only, want, "{}", case.display());
    }
}
