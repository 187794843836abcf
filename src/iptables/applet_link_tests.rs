//! Tests of the private link directory (applet_link.rs).
use super::*;
use std::os::unix::fs::{symlink, PermissionsExt};

/// Serialises the tests that make and release this process's link directory.
pub(crate) static SERIAL: Mutex<()> = Mutex::new(());

#[test]
fn names_of_link_directories() {
    assert_eq!(
        owner_pid("istio-cni-host-tools-4026531836-42-aB3xYz", 4026531836),
        Some(42)
    );
    // Another pid namespace's: its pid means nothing here.
    assert_eq!(
        owner_pid("istio-cni-host-tools-4026532000-42-aB3xYz", 4026531836),
        None
    );
    // An earlier version's.
    assert_eq!(owner_pid("istio-cni-host-tools-42", 7), Some(42));
    assert_eq!(owner_pid("istio-cni-host-tools-x", 7), None);
    assert_eq!(owner_pid("other-42", 7), None);
}

#[test]
fn only_our_own_closed_directories_count() {
    assert!(is_private(true, 0, 0o40700, 0));
    assert!(!is_private(true, 0, 0o40755, 0));
    assert!(!is_private(true, 65534, 0o40700, 0));
    assert!(!is_private(false, 0, 0o100700, 0));
    assert!(is_ours(true, 0, 0o40755, 0));
    assert!(!is_ours(true, 0, 0o40777, 0));
    assert!(!is_ours(true, 0, 0o41777, 0));
    assert!(!is_ours(true, 1000, 0o40755, 0));
}

/// A link is reached through the opened directory, which is ours alone; release removes it.
#[test]
fn links_live_in_a_private_directory_reached_through_its_descriptor() {
    let _serial = SERIAL.lock();
    let (path, dir) = link("iptables-test-save", Path::new("/bin/true")).unwrap();
    let link_to = |t: &str| link("iptables-test-save", Path::new(t)).unwrap().0;
    assert!(path.starts_with("/proc/self/fd/"), "{path:?}");
    assert_eq!(path.file_name().unwrap(), "iptables-test-save");
    assert_eq!(std::fs::read_link(&path).unwrap(), Path::new("/bin/true"));
    let m = dir.metadata().unwrap();
    assert_eq!(m.mode() & 0o7777, 0o700);
    assert_eq!(m.uid(), nix::unistd::geteuid().as_raw());
    // The same pair again: the same link; another target under the same name: another directory.
    assert_eq!(link_to("/bin/true"), path);
    assert_ne!(link_to("/bin/false"), path);
    assert!(link("a/b", Path::new("/bin/true")).is_err());
    // A link a temp-dir cleaner removed (only root can) is made again.
    std::fs::remove_file(&path).unwrap();
    assert_eq!(link_to("/bin/true"), path);
    assert_eq!(std::fs::read_link(&path).unwrap(), Path::new("/bin/true"));
    let name = DIR
        .lock()
        .unwrap()
        .as_ref()
        .map(|d| d.path.clone())
        .unwrap();
    let base = name.file_name().unwrap().to_string_lossy().into_owned();
    assert!(base.starts_with(&format!(
        "{PREFIX}{}-{}-",
        pid_namespace(),
        std::process::id()
    )));
    release();
    assert!(!name.exists(), "{name:?} left behind");
}

fn dir(p: &Path, mode: u32) -> PathBuf {
    std::fs::create_dir_all(p).unwrap();
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
    p.to_path_buf()
}

/// The directories of processes of our pid namespace that are gone are removed; nothing else is.
#[test]
fn sweep_removes_only_dead_processes_own_directories() {
    let base = dir(
        &std::env::temp_dir().join(format!("applet-link-sweep-{}", std::process::id())),
        0o700,
    );
    let mut child = std::process::Command::new("true").spawn().unwrap();
    child.wait().unwrap();
    let dead = child.id();
    let ns = pid_namespace();
    let name = |n: u64, pid: u32| base.join(format!("{PREFIX}{n}-{pid}-Ab12Cd"));
    let stale = dir(&name(ns, dead), 0o700);
    symlink(
        "/bin/true",
        dir(&stale.join("0"), 0o700).join("iptables-save"),
    )
    .unwrap();
    let legacy = dir(&base.join(format!("{PREFIX}{dead}")), 0o755);
    symlink("/bin/true", legacy.join("iptables-save")).unwrap();
    let mine = dir(&name(ns, std::process::id()), 0o700);
    let alive = dir(&name(ns, 1), 0o700);
    let elsewhere = dir(&name(ns + 1, dead), 0o700);
    let writable = dir(&base.join(format!("{PREFIX}{}", dead + 1)), 0o777);
    let with_file = dir(&name(ns, dead + 2), 0o700);
    std::fs::write(with_file.join("data"), "x").unwrap();
    // A symlink with a stale name is never followed.
    let target = dir(&base.join("target"), 0o700);
    symlink("/bin/true", target.join("keep")).unwrap();
    symlink(&target, name(ns, dead + 3)).unwrap();

    sweep(&base);
    assert!(!stale.exists() && !legacy.exists());
    for kept in [&mine, &alive, &elsewhere, &writable, &with_file] {
        assert!(kept.exists(), "{kept:?} removed");
    }
    assert!(with_file.join("data").exists());
    assert!(target.join("keep").symlink_metadata().is_ok());
    std::fs::remove_dir_all(&base).unwrap();
}
