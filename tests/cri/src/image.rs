//! Images without a registry: a root filesystem directory packed as a one-layer OCI archive (tar, sha256sum),
//! imported into a containerd with `ctr images import`. The pause image's only file is `pause`, built here
//! from `tests/cri/pause/pause.c` as a static binary.

use crate::util::{repo, run_ok, TempDir};
use std::path::{Path, PathBuf};

fn sha256_file(p: &Path) -> String {
    let out = run_ok("sha256sum", &[p.as_os_str()]);
    out.split_whitespace()
        .next()
        .expect("sha256sum output")
        .to_string()
}

/// Stores `path` as a blob of the OCI layout at `dir`; returns (digest, size).
fn add_blob(dir: &Path, path: &Path) -> (String, u64) {
    let hex = sha256_file(path);
    let size = std::fs::metadata(path).expect("blob").len();
    std::fs::rename(path, dir.join("blobs/sha256").join(&hex)).expect("move blob");
    (format!("sha256:{hex}"), size)
}

/// Packs `rootfs` into an OCI archive at `out` naming the image `name` (the `ref.name` annotation, which
/// `ctr images import` uses as the image name), with `config` (the image config's `config` object, e.g.
/// `{"Entrypoint":["/pause"]}`).
pub fn oci_archive(rootfs: &Path, config: &serde_json::Value, name: &str, out: &Path) {
    let work = TempDir::new("oci");
    let layout = work.join("layout");
    std::fs::create_dir_all(layout.join("blobs/sha256")).unwrap();
    let layer = work.join("layer.tar");
    run_ok(
        "tar",
        &[
            "--numeric-owner",
            "--owner=0",
            "--group=0",
            "-C",
            &rootfs.to_string_lossy(),
            "-cf",
            &layer.to_string_lossy(),
            ".",
        ],
    );
    let (layer_digest, layer_size) = add_blob(&layout, &layer);
    let cfg = serde_json::json!({
        "architecture": "amd64", "os": "linux", "config": config,
        "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
    });
    let cfg_path = work.join("config.json");
    std::fs::write(&cfg_path, serde_json::to_vec(&cfg).unwrap()).unwrap();
    let (cfg_digest, cfg_size) = add_blob(&layout, &cfg_path);
    let manifest = serde_json::json!({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cfg_digest, "size": cfg_size},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": layer_digest, "size": layer_size}],
    });
    let m_path = work.join("manifest.json");
    std::fs::write(&m_path, serde_json::to_vec(&manifest).unwrap()).unwrap();
    let (m_digest, m_size) = add_blob(&layout, &m_path);
    let index = serde_json::json!({
        "schemaVersion": 2,
        "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": m_digest,
            "size": m_size, "platform": {"architecture": "amd64", "os": "linux"},
            "annotations": {"org.opencontainers.image.ref.name": name, "io.containerd.image.name": name}}],
    });
    std::fs::write(
        layout.join("index.json"),
        serde_json::to_vec(&index).unwrap(),
    )
    .unwrap();
    std::fs::write(
        layout.join("oci-layout"),
        br#"{"imageLayoutVersion":"1.0.0"}"#,
    )
    .unwrap();
    run_ok(
        "tar",
        &[
            "-C",
            &layout.to_string_lossy(),
            "-cf",
            &out.to_string_lossy(),
            ".",
        ],
    );
}

/// The static pause binary, compiled into `dir` (musl-gcc when present, else glibc's static libc).
pub fn build_pause(dir: &Path) -> PathBuf {
    let src = repo().join("tests/cri/pause/pause.c");
    let out = dir.join("pause");
    let cc = if run_ok("sh", &["-c", "command -v musl-gcc || true"])
        .trim()
        .is_empty()
    {
        "gcc"
    } else {
        "musl-gcc"
    };
    run_ok(
        cc,
        &[
            "-static",
            "-Os",
            "-s",
            "-o",
            &out.to_string_lossy(),
            &src.to_string_lossy(),
        ],
    );
    out
}

/// The pause image's OCI archive, written to `out`.
pub fn pause_archive(name: &str, out: &Path) {
    let work = TempDir::new("pause");
    let rootfs = work.join("rootfs");
    std::fs::create_dir_all(&rootfs).unwrap();
    let bin = build_pause(work.path());
    std::fs::rename(&bin, rootfs.join("pause")).unwrap();
    oci_archive(
        &rootfs,
        &serde_json::json!({"Entrypoint": ["/pause"]}),
        name,
        out,
    );
}
