//! The cargo-fuzz targets on stable, as one test per target: the same bodies (fuzz/targets/*.rs) run on
//! every seed in fuzz/seeds/<target>/ (crashes found by fuzzing stay there as regression seeds), then on
//! inputs mutated from the seeds by a deterministic generator (byte flips, boundary integers, insertions,
//! deletions, splices). Not coverage-guided: `scripts/fuzz` (nightly, cargo-fuzz) is. By default a fixed
//! number of mutations per target (fast, for every `cargo test`); `ISTIO_CNI_FUZZ_SECS=N` runs each target
//! for N seconds instead (`scripts/test.d/fuzz` uses 25). A failing input is written to
//! target/fuzz-stable/<target>/ and named in the failure.

#[path = "../../fuzz/targets/cni_args.rs"]
mod cni_args;
#[path = "../../fuzz/targets/conf_parse.rs"]
mod conf_parse;
#[path = "../../fuzz/targets/nft_decode.rs"]
mod nft_decode;
#[path = "../../fuzz/targets/plugin_handle.rs"]
mod plugin_handle;
#[path = "../../fuzz/targets/prev_result.rs"]
mod prev_result;
#[path = "../../fuzz/targets/xt_legacy_blob.rs"]
mod xt_legacy_blob;
#[path = "../../fuzz/targets/xt_nft_roundtrip.rs"]
mod xt_nft_roundtrip;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Mutations per target when no time is given.
const DEFAULT_MUTATIONS: u64 = 3000;

/// xorshift64*: deterministic, seeded per target.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
}

const INTERESTING: [i32; 9] = [0, 1, -1, 0x7f, 0x80, 0xff, 0x7fff_ffff, i32::MIN, 16];

fn mutate(rng: &mut Rng, seeds: &[Vec<u8>]) -> Vec<u8> {
    let mut v = seeds[rng.below(seeds.len())].clone();
    for _ in 0..1 + rng.below(4) {
        let at = rng.below(v.len() + 1);
        match rng.below(7) {
            0 if !v.is_empty() => {
                let i = rng.below(v.len());
                v[i] ^= 1 << rng.below(8);
            }
            1 if v.len() >= 4 => {
                let i = rng.below(v.len() - 3);
                let x = INTERESTING[rng.below(INTERESTING.len())];
                v[i..i + 4].copy_from_slice(&x.to_ne_bytes());
            }
            2 => {
                let n = 1 + rng.below(8);
                let bytes: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
                v.splice(at..at, bytes);
            }
            3 if !v.is_empty() => {
                let end = (at + 1 + rng.below(16)).min(v.len());
                v.drain(at.min(end)..end);
            }
            4 => {
                let other = &seeds[rng.below(seeds.len())];
                let from = rng.below(other.len() + 1);
                v.truncate(at);
                v.extend_from_slice(&other[from..]);
            }
            5 => v.truncate(at),
            _ if !v.is_empty() => {
                let i = rng.below(v.len());
                v[i] = INTERESTING[rng.below(INTERESTING.len())] as u8;
            }
            _ => v.push(rng.next() as u8),
        }
    }
    v
}

fn seeds(target: &str) -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/seeds")
        .join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    let out: Vec<Vec<u8>> = files.iter().map(|f| std::fs::read(f).unwrap()).collect();
    assert!(!out.is_empty(), "no seeds in {}", dir.display());
    out
}

/// Runs `body` on `input`; a panic keeps the input and fails naming it.
fn one(target: &str, body: fn(&[u8]), input: &[u8]) {
    if std::panic::catch_unwind(|| body(input)).is_err() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("target/fuzz-stable")
            .join(target);
        std::fs::create_dir_all(&dir).unwrap();
        let hash = input.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3)
        });
        let path = dir.join(format!("crash-{hash:016x}"));
        std::fs::write(&path, input).unwrap();
        panic!("{target} panicked on the input saved as {}", path.display());
    }
}

fn run(target: &str, body: fn(&[u8])) {
    let seeds = seeds(target);
    for s in &seeds {
        one(target, body, s);
    }
    let secs: Option<u64> = std::env::var("ISTIO_CNI_FUZZ_SECS")
        .ok()
        .map(|v| v.parse().expect("ISTIO_CNI_FUZZ_SECS: a number of seconds"));
    let deadline = secs.map(|s| Instant::now() + Duration::from_secs(s));
    let mut rng =
        Rng(0x9e37_79b9_7f4a_7c15 ^ target.len() as u64 ^ (target.as_bytes()[0] as u64) << 32);
    let mut n = 0u64;
    loop {
        match deadline {
            Some(d) if Instant::now() >= d => break,
            None if n >= DEFAULT_MUTATIONS => break,
            _ => {}
        }
        let input = mutate(&mut rng, &seeds);
        one(target, body, &input);
        n += 1;
    }
    eprintln!(
        "{target}: {} seeds, {n} mutated inputs, no panic",
        seeds.len()
    );
}

#[test]
fn cni_args() {
    run("cni_args", cni_args::run);
}

#[test]
fn conf_parse() {
    run("conf_parse", conf_parse::run);
}

#[test]
fn nft_decode() {
    run("nft_decode", nft_decode::run);
}

#[test]
fn plugin_handle() {
    run("plugin_handle", plugin_handle::run);
}

#[test]
fn prev_result() {
    run("prev_result", prev_result::run);
}

#[test]
fn xt_legacy_blob() {
    run("xt_legacy_blob", xt_legacy_blob::run);
}

#[test]
fn xt_nft_roundtrip() {
    run("xt_nft_roundtrip", xt_nft_roundtrip::run);
}
