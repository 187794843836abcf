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
}

impl Node {
    fn new(tag: &str) -> Node {
        let root = fsutil::test_dir(tag);
        let conf = root.join("conf");
        for d in [
            &conf,
            &root.join("bin"),
            &root.join("run"),
            &root.join("other"),
        ] {
            fs::create_dir_all(d).unwrap();
        }
        Node { root, conf }
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
