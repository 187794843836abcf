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
        self.installer_with(exe, &[])
    }

    /// An installer of this node installing `exe`, with more settings (`extra`).
    fn installer_with(&self, exe: &Path, extra: &[(&str, &str)]) -> Installer {
        let p = |d: &str| self.root.join(d).display().to_string();
        let mut env = vec![
            ("MOUNTED_CNI_NET_DIR", p("conf")),
            ("CNI_BIN_DIR", p("bin")),
            ("SECONDARY_BIN_DIR", p("no-such-dir")),
            ("CNI_AGENT_RUN_DIR", p("run")),
            ("REPAIR_ENABLED", "false".into()),
        ];
        env.extend(extra.iter().map(|(k, v)| (*k, v.to_string())));
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let s = resolve_with(&Default::default(), &env).unwrap();
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

const OWNED: &str = "02-istio-cni.conflist";

/// The owned layout installs its copy of the primary (10-a.conflist) on this node.
fn owned_layout_installed(n: &Node) {
    fs::write(n.conf.join("10-a.conflist"), PRIMARY).unwrap();
    let mut on = n.installer_with(&n.exe(), &[("ISTIO_OWNED_CNI_CONFIG", "true")]);
    on.write_config().unwrap();
    assert!(check::holds_entry(&fs::read(n.conf.join(OWNED)).unwrap()));
    assert_eq!(fs::read(n.conf.join("10-a.conflist")).unwrap(), PRIMARY);
}

#[test]
fn owned_layout_switched_off_removes_its_copy_after_the_primary_has_our_entry() {
    let n = Node::new("steps-owned-off");
    owned_layout_installed(&n);
    // The primary's CNI rewrites its file while the owned layout is off: the runtime must load it.
    let rewritten =
        br#"{"cniVersion":"0.3.1","name":"a2","plugins":[{"type":"bridge","mtu":1400}]}"#;
    fs::write(n.conf.join("10-a.conflist"), rewritten).unwrap();
    let mut off = n.installer(&n.exe());
    off.install_binaries().unwrap();
    off.write_config().unwrap();
    assert!(
        !n.conf.join(OWNED).exists(),
        "the owned layout's stale copy still shadows the primary"
    );
    let primary = fs::read(n.conf.join("10-a.conflist")).unwrap();
    assert!(check::holds_our_entry(&primary, &off.entry().to_object()));
    assert!(String::from_utf8_lossy(&primary).contains("1400"));
    assert_eq!(off.check(), Outcome::Valid { warning: None });
    off.cleanup().unwrap();
    assert!(!n.conf.join(OWNED).exists());
    assert!(!check::holds_entry(
        &fs::read(n.conf.join("10-a.conflist")).unwrap()
    ));
}

#[test]
fn retiring_the_owned_copy_first_gives_our_entry_to_what_an_older_libcni_loads_next() {
    let n = Node::new("steps-owned-off-older");
    owned_layout_installed(&n);
    // Between the copy and the primary: a list only libcni v1.1 (Debian 12's runtimes) loads. While the
    // copy sorted first nobody loaded it; once the copy is gone such a runtime does.
    fs::write(n.conf.join("05-x.conflist"), OLD_LIBCNI_ONLY[1]).unwrap();
    let mut off = n.installer(&n.exe());
    assert!(off.retire_owned_copy().unwrap());
    assert!(!n.conf.join(OWNED).exists());
    let x = fs::read(n.conf.join("05-x.conflist")).unwrap();
    assert!(
        check::holds_our_entry(&x, &off.entry().to_object()),
        "the copy went before 05-x.conflist, which an older libcni now loads, had our entry"
    );
}

#[test]
fn owned_copy_left_behind_keeps_the_default_layout_not_ready() {
    let n = Node::new("steps-owned-off-check");
    owned_layout_installed(&n);
    let mut off = n.installer(&n.exe());
    off.install_binaries().unwrap();
    // As a previous default-layout agent would have left it: the copy first, the primary with our entry.
    off.assume_installed(OWNED.into());
    let merged = crate::install::config::conflist::merge(
        std::str::from_utf8(PRIMARY).unwrap(),
        &off.entry().to_object(),
    )
    .unwrap();
    fs::write(n.conf.join("10-a.conflist"), merged).unwrap();
    let out = off.check();
    assert!(
        matches!(&out, Outcome::Invalid { reason } if reason.contains(OWNED)),
        "{out:?}"
    );
}

#[test]
fn uninstall_with_the_owned_layout_off_removes_its_copy() {
    let n = Node::new("steps-owned-off-uninstall");
    owned_layout_installed(&n);
    let off = n.installer(&n.exe());
    off.cleanup().unwrap();
    assert!(
        !n.conf.join(OWNED).exists(),
        "the stale copy survived the uninstall"
    );
    assert_eq!(fs::read(n.conf.join("10-a.conflist")).unwrap(), PRIMARY);
}

#[test]
fn a_file_at_the_owned_name_we_did_not_write_stays() {
    let n = Node::new("steps-owned-off-foreign");
    fs::write(n.conf.join("10-a.conflist"), PRIMARY).unwrap();
    // Not in our rendering (one line), and our entry is not last: no copy of ours.
    let foreign =
        br#"{"cniVersion":"0.3.1","name":"x","plugins":[{"type":"istio-cni"},{"type":"ptp"}]}"#;
    fs::write(n.conf.join(OWNED), foreign).unwrap();
    let mut off = n.installer(&n.exe());
    // With our binary in place, so that the check gets as far as the conf dir.
    off.install_binaries().unwrap();
    let got = off.check();
    assert!(!matches!(got, Outcome::Binary { .. }), "{got:?}");
    assert!(
        !matches!(&got, Outcome::Invalid { reason } if reason.contains("ISTIO_OWNED")),
        "{got:?}"
    );
    off.cleanup().unwrap();
    assert!(
        n.conf.join(OWNED).exists(),
        "a file we did not write was deleted"
    );
    assert!(!check::holds_entry(&fs::read(n.conf.join(OWNED)).unwrap()));
}

#[test]
fn cleanup_gives_a_symlinked_conf_fallback_back_as_its_link() {
    let n = Node::new("steps-linked-conf-fallback");
    fs::write(n.conf.join("10-a.conflist"), PRIMARY).unwrap();
    let conf = br#"{"cniVersion":"0.4.0","name":"b","type":"ptp"}"#;
    let target = n.root.join("other/b.conf");
    fs::write(&target, conf).unwrap();
    let link = n.conf.join("20-b.conf");
    symlink("../other/b.conf", &link).unwrap();
    let mut inst = n.installer(&n.exe());
    inst.write_config().unwrap();
    // The single-plugin file became its list, which holds our entry.
    assert!(check::holds_entry(
        &fs::read(n.conf.join("20-b.conflist")).unwrap()
    ));
    inst.cleanup().unwrap();
    assert!(!n.conf.join("20-b.conflist").exists(), "the list stayed");
    let meta = fs::symlink_metadata(&link).unwrap();
    assert!(meta.file_type().is_symlink(), "the link was not given back");
    assert_eq!(fs::read_link(&link).unwrap(), Path::new("../other/b.conf"));
    assert_eq!(fs::read(&target).unwrap(), conf);
}

/// Lists libcni v1.3 skips but v1.1 (Debian 12's containerd 1.6 and podman 4.3) loads: a name naming a
/// regular file (its plugin directory cannot be listed), an unparsable `cniVersions`, a `disableGC` of
/// another type, a plugin's GC attachments of another type.
const OLD_LIBCNI_ONLY: [&str; 4] = [
    r#"{"cniVersion":"0.4.0","name":"10-a.conflist","plugins":[{"type":"ptp"}]}"#,
    r#"{"cniVersion":"0.4.0","name":"x","cniVersions":["x.y"],"plugins":[{"type":"ptp"}]}"#,
    r#"{"cniVersion":"0.4.0","name":"x","disableGC":1,"plugins":[{"type":"ptp"}]}"#,
    r#"{"cniVersion":"0.4.0","name":"x","plugins":[{"type":"ptp","cni.dev/valid-attachments":1}]}"#,
];

#[test]
fn a_list_only_an_older_libcni_loads_sorting_first_gets_our_entry_too() {
    for (i, text) in OLD_LIBCNI_ONLY.iter().enumerate() {
        let n = Node::new(&format!("steps-old-libcni-{i}"));
        fs::write(n.conf.join("10-a.conflist"), PRIMARY).unwrap();
        fs::write(n.conf.join("05-x.conflist"), text).unwrap();
        let mut inst = n.installer(&n.exe());
        inst.install_binaries().unwrap();
        inst.write_config().unwrap();
        // Debian 12's runtimes load 05-x.conflist: ready only once it holds our entry.
        let out = inst.check();
        let x = fs::read(n.conf.join("05-x.conflist")).unwrap();
        assert!(
            check::holds_our_entry(&x, &inst.entry().to_object()),
            "{text}: 05-x.conflist lacks our entry ({out:?})"
        );
        assert_eq!(out, Outcome::Valid { warning: None }, "{text}");
        // Its owner rewrites it without our entry: not ready until it has it again.
        fs::write(n.conf.join("05-x.conflist"), text).unwrap();
        let out = inst.check();
        assert!(
            matches!(&out, Outcome::Invalid { reason } if reason.contains("05-x.conflist")),
            "{text}: {out:?}"
        );
        inst.write_config().unwrap();
        assert_eq!(inst.check(), Outcome::Valid { warning: None }, "{text}");
        // The uninstall gives it back as found.
        inst.cleanup().unwrap();
        assert_eq!(
            fs::read(n.conf.join("05-x.conflist")).unwrap(),
            text.as_bytes()
        );
    }
}

#[test]
fn owned_layout_a_list_only_an_older_libcni_loads_sorting_first_keeps_us_not_ready() {
    let n = Node::new("steps-old-libcni-owned");
    fs::write(n.conf.join("10-a.conflist"), PRIMARY).unwrap();
    fs::write(n.conf.join("01-x.conflist"), OLD_LIBCNI_ONLY[0]).unwrap();
    let mut inst = n.installer_with(&n.exe(), &[("ISTIO_OWNED_CNI_CONFIG", "true")]);
    inst.install_binaries().unwrap();
    inst.write_config().unwrap();
    let out = inst.check();
    assert!(
        matches!(&out, Outcome::Preempted { runtime_file, .. } if runtime_file == "01-x.conflist"),
        "{out:?}"
    );
    assert!(check::holds_entry(
        &fs::read(n.conf.join("01-x.conflist")).unwrap()
    ));
}
