//! nftables mode, text: every `<CONFORMANCE_DIR>/capture/*/config.json` through the nftables generator gives
//! the case's `expected.nft` byte for byte, through the library and through `istio-cni explain --nft`.

use istio_cni::json;
use istio_cni::nftables::{generate, script};
use istio_cni::redirect::CaptureConfig;
use std::path::{Path, PathBuf};
use std::process::Command;

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
    let bin = env!("CARGO_BIN_EXE_istio-cni-node");
    for case in capture_cases() {
        let out = Command::new(bin)
            .args(["istio-cni", "explain", "--nft", "--capture"])
            .arg(case.join("config.json"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}: {}",
            case.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        let got = String::from_utf8(out.stdout).unwrap();
        let want = read(&case.join("expected.nft"));
        let script_only: String = got
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| format!("{l}\n"))
            .collect();
        assert_eq!(script_only, want, "{}", case.display());
    }
}
