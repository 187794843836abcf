//! The installer's steps on real files in a temporary node (conf dir, bin dir, run dir).

use super::*;
use crate::install::settings::options::tests::resolve_with;
use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};

const PRIMARY: &[u8] = br#"{"cniVersion":"0.3.1","name":"a","plugins":[{"type":"bridge"}]}"#;
const FALLBACK: &[u8] = br#"{"cniVersion":"0.3.1","name":"b","plugins":[{"type":"ptp"}]}"#;

struct Node {
    root: PathBuf,
    conf: PathBuf,
    bin: PathBuf,
}

impl Node {
    fn new(tag: &str) -> Node {
        let root = fsutil::test_dir(tag);
        let (conf, bin) = (root.join("conf"), root.join("bin"));
        for d in [&conf, &bin, &root.join("run"), &root.join("other")] {
            fs::create_dir_all(d).unwrap();
        }
        Node { root, conf, bin }
    }

    /// An installer of this node installing `exe` (chained, default layout).
    fn installer(&self, exe: &Path) -> Installer {
        let p = |d: &str| self.root.join(d).display().to_string();
        let s = resolve_with(
            &Default::default(),
            &[
                ("MOUNTED_CNI_NET_DIR", &p("conf")),
                ("CNI_BIN_DIR", &p("bin")),
                ("SECONDARY_BIN_DIR", &p("no-such-dir")),
                ("CNI_AGENT_RUN_DIR", &p("run")),
                ("REPAIR_ENABLED", "false"),
            ],
        )
        .unwrap();
        Installer::new(s, exe.to_path_buf())
    }

    /// An executable to install, mode 0755.
    fn exe(&self) -> PathBuf {
        let exe = self.root.join("exe");
        fs::write(&exe, b"#!/bin/sh\nexit 0\n").unwrap();
        fs::set_permissions(&exe, fs::Permissions::from_mode(0o755)).unwrap();
        exe
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.root);
    }
}

#[test]
fn cleanup_gives_a_symlinked_fallback_back_through_its_link() {
    let n = Node::new("steps-linked-fallback");
    fs::write(n.conf.join("10-a.conflist"), PRIMARY).unwrap();
    let target = n.root.join("other/b.conflist");
    fs::write(&target, FALLBACK).unwrap();
    fs::set_permissions(&target, fs::Permissions::from_mode(0o640)).unwrap();
    let link = n.conf.join("20-b.conflist");
    symlink("../other/b.conflist", &link).unwrap();
    let mut inst = n.installer(&n.exe());
    inst.write_config().unwrap();
    // The install merged our entry through the link into its target.
    assert!(fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    assert!(check::holds_entry(&fs::read(&target).unwrap()));
    inst.cleanup().unwrap();
    let meta = fs::symlink_metadata(&link).unwrap();
    assert!(meta.file_type().is_symlink(), "the link was replaced");
    assert_eq!(
        fs::read_link(&link).unwrap(),
        Path::new("../other/b.conflist")
    );
    assert_eq!(
        fs::read(&target).unwrap(),
        FALLBACK,
        "target not given back"
    );
    assert_eq!(fsutil::mode_of(&target).unwrap(), Some(0o640));
    assert!(!check::holds_entry(
        &fs::read(n.conf.join("10-a.conflist")).unwrap()
    ));
}

#[test]
fn check_is_not_ready_while_our_binary_cannot_run() {
    let n = Node::new("steps-binary-check");
    fs::write(n.conf.join("10-a.conflist"), PRIMARY).unwrap();
    let mut inst = n.installer(&n.exe());
    inst.install_binaries().unwrap();
    inst.write_config().unwrap();
    assert_eq!(inst.check(), Outcome::Valid { warning: None });
    let bin = n.bin.join(PLUGIN_BINARY);
    let not_ready = |inst: &Installer, why: &str| {
        let out = inst.check();
        assert!(!matches!(out, Outcome::Valid { .. }), "ready: {out:?}");
        let text = format!("{out:?}");
        assert!(
            text.contains(&bin.display().to_string()) && text.contains(why),
            "{text}"
        );
    };
    // The same bytes, but no execute bit: CRI-O's VERSION exec fails and it skips our list.
    fs::set_permissions(&bin, fs::Permissions::from_mode(0o644)).unwrap();
    not_ready(&inst, "mode 0644");
    inst.install_binaries().unwrap();
    assert_eq!(inst.check(), Outcome::Valid { warning: None });
    fs::remove_file(&bin).unwrap();
    not_ready(&inst, "is missing");
    fs::create_dir(&bin).unwrap();
    not_ready(&inst, "not a regular file");
    fs::remove_dir(&bin).unwrap();
    inst.install_binaries().unwrap();
    assert_eq!(inst.check(), Outcome::Valid { warning: None });
}
