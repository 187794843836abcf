//! Tests of the tool lookup (tool.rs, node_root.rs, nss.rs).
use super::super::node_root::names_argv0_option;
use super::*;

#[test]
fn only_remote_nss_sources_need_isolation() {
    assert!(!nss_may_block(
        "passwd: files systemd\ngroup: files systemd\nhosts: files dns\n"
    ));
    assert!(!nss_may_block(
        "passwd: compat [NOTFOUND=return] files\n# group: ldap\n"
    ));
    assert!(nss_may_block("passwd: files sss\ngroup: files sss\n"));
    assert!(nss_may_block("group:  files ldap\n"));
    assert!(!nss_may_block("hosts: files ldap\n"));
}

#[test]
fn absolute_symlinks_resolve_against_the_given_root() {
    use std::os::unix::fs::symlink;
    // A node root shaped like Debian's: usrmerge (/sbin -> usr/sbin), alternatives with absolute links.
    let root = crate::fsutil::test_dir("tool-root");
    for d in ["usr/sbin", "etc/alternatives", "usr/lib/x86_64-linux-gnu"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    symlink("usr/sbin", root.join("sbin")).unwrap();
    std::fs::write(root.join("usr/sbin/xtables-nft-multi"), b"#!/bin/true\n").unwrap();
    symlink(
        "/etc/alternatives/iptables-restore",
        root.join("usr/sbin/iptables-restore"),
    )
    .unwrap();
    symlink(
        "/usr/sbin/../sbin/xtables-nft-multi",
        root.join("etc/alternatives/iptables-restore"),
    )
    .unwrap();
    let got = resolve_under(&root, Path::new("/sbin/iptables-restore")).unwrap();
    assert_eq!(got, root.join("usr/sbin/xtables-nft-multi"));
    // `..` at the top stays at the root.
    assert_eq!(
        resolve_under(&root, Path::new("/../../usr/sbin")).unwrap(),
        root.join("usr/sbin")
    );
    assert!(resolve_under(&root, Path::new("/usr/sbin/nothing")).is_none());
    // A loop is an error, not a hang.
    symlink("/loop", root.join("loop")).unwrap();
    assert!(resolve_under(&root, Path::new("/loop")).is_none());
    let t = find_under(&root, "iptables-restore").expect("found under the root");
    assert_eq!(t.path, Path::new("/usr/sbin/iptables-restore"));
    assert_eq!(
        t.launch,
        Launch::Direct {
            file: root.join("usr/sbin/xtables-nft-multi")
        }
    );
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn parent_pid_from_stat() {
    assert_eq!(parent_pid("42 (a b) c) S 7 42 42 0"), Some(7));
    assert_eq!(parent_pid("42 (sh"), None);
    let roots = node_roots(Path::new("/proc"));
    assert_eq!(roots[0], Path::new("/proc/1/root"));
    // Our parent (cargo's test harness runs us as a child of something) is the second candidate.
    let ppid = nix::unistd::getppid().as_raw();
    if ppid > 1 {
        assert_eq!(roots[1], PathBuf::from(format!("/proc/{ppid}/root")));
    }
}

#[test]
fn elf_interpreter_of_real_binaries() {
    let sh = std::fs::read("/bin/sh").unwrap();
    let i = elf_interp(&sh).unwrap().expect("/bin/sh is dynamic");
    assert!(
        i.is_absolute() && i.to_string_lossy().contains("ld-"),
        "{i:?}"
    );
    assert!(elf_interp(b"#!/bin/sh\n").is_err());
    // This machine's loader (Debian 12, glibc 2.36) takes --argv0; bytes without the option do not.
    let loader = std::fs::read(resolve_under(Path::new("/"), &i).unwrap()).unwrap();
    assert!(names_argv0_option(&loader));
    assert!(!names_argv0_option(b"--argv\0 argv0\0--argv0"));
    assert!(elf_interp(b"\x7fELF\x02\x01").is_err());
}

#[test]
fn node_tools_run_through_the_node_loader_without_chroot() {
    // Our own root seen through /proc/self/root stands for the node's /host/proc/1/root.
    let root = Path::new("/proc/self/root");
    let Some(t) = find_under(root, "iptables") else {
        panic!("iptables not installed (scripts/setup installs it)");
    };
    // Both ways of naming the applet: --argv0 (this loader has it), and the private link older loaders get.
    let _serial = super::super::applet_link::tests::SERIAL.lock();
    for naming in [Naming::Argv0Flag, Naming::PrivateLink] {
        let mut t = t.clone();
        match &mut t.launch {
            Launch::Loader { naming: n, .. } => *n = naming,
            other => panic!("not run through the loader: {other:?}"),
        }
        let out = t.command().unwrap().arg("--version").output().unwrap();
        assert!(out.status.success(), "{naming:?}: {out:?}");
        assert!(
            String::from_utf8_lossy(&out.stdout).starts_with("iptables v"),
            "{naming:?}: {out:?}"
        );
    }
    release();
}

#[test]
fn finds_tools_on_path_or_under_a_root() {
    // `sh` exists on every test machine, under / as well.
    let t = find("sh").expect("sh on PATH");
    assert!(t.root.is_none() && t.path.is_absolute());
    assert!(find("no-such-tool-here").is_none());
}
