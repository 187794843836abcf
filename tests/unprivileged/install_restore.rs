//! Uninstall gives every other CNI's file back as it was (issue 38): the default layout merges our entry
//! into every file the runtime falls back to (a single-plugin `.conf` becoming its `.conflist`); the
//! uninstall puts each back under its own name with its own bytes and mode, also after a crash (the
//! originals are recorded in the run dir before the merge), unless its owner changed it since (then only
//! our entry goes).

use crate::support::install::node::*;
use crate::support::install::*;
use nix::sys::signal::Signal;
use std::fs;
use std::os::unix::fs::PermissionsExt;

/// Formatting no merge reproduces (tabs, key order, no trailing newline): only a restore gives it back.
const FLANNEL_CONF: &str = "{\t\"type\":\"flannel\", \"cniVersion\":\"0.3.1\",\"name\":\"fl\",\"delegate\":{\"hairpinMode\":true}}";
const BRIDGE_LIST: &str =
    "{\"plugins\":[{\"type\":\"bridge\"}],\"name\":\"br\",  \"cniVersion\":\"0.4.0\"}\n";

fn setup(tag: &str) -> Node {
    let n = Node::new(tag);
    n.write("10-calico.conflist", &list_text("calico-net", "calico"));
    n.write("20-flannel.conf", FLANNEL_CONF);
    n.write("30-bridge.conflist", BRIDGE_LIST);
    fs::set_permissions(
        n.conf.join("20-flannel.conf"),
        fs::Permissions::from_mode(0o640),
    )
    .unwrap();
    n
}

fn fallbacks_merged(n: &Node) -> bool {
    n.entries("20-flannel.conflist") == 1
        && !n.conf.join("20-flannel.conf").exists()
        && n.entries("30-bridge.conflist") == 1
}

fn given_back(n: &Node, p: &Proc) {
    let mut got = names(&n.conf);
    got.sort();
    assert_eq!(
        got,
        [
            "10-calico.conflist",
            "20-flannel.conf",
            "30-bridge.conflist"
        ],
        "{}",
        p.stderr()
    );
    assert_eq!(
        fs::read_to_string(n.conf.join("20-flannel.conf")).unwrap(),
        FLANNEL_CONF
    );
    let mode = fs::metadata(n.conf.join("20-flannel.conf"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o7777, 0o640);
    assert_eq!(
        fs::read_to_string(n.conf.join("30-bridge.conflist")).unwrap(),
        BRIDGE_LIST
    );
    assert_eq!(n.entries("10-calico.conflist"), 0);
}

#[test]
fn sigterm_gives_the_fallbacks_back_with_their_names_and_bytes() {
    let n = setup("restore-term");
    let mut p = n.start(&[]);
    n.settle_ready(&p, "installed");
    assert!(fallbacks_merged(&n), "{}", p.stderr());
    p.signal(Signal::SIGTERM);
    assert!(p.wait_exit(LONG).success(), "{}", p.stderr());
    given_back(&n, &p);
}

#[test]
fn after_a_crash_the_uninstall_still_gives_them_back() {
    let n = setup("restore-crash");
    let p = n.start(&[]);
    n.settle_ready(&p, "installed");
    assert!(fallbacks_merged(&n), "{}", p.stderr());
    p.signal(Signal::SIGKILL);
    drop(p);
    let mut u = spawn_installer(&n.env(&[]), &["--uninstall"], &n.root.join("stderr-u"));
    assert!(u.wait_exit(LONG).success(), "{}", u.stderr());
    given_back(&n, &u);
}

#[test]
fn a_fallback_its_owner_changed_since_only_loses_our_entry() {
    let n = setup("restore-changed");
    let mut p = n.start(&[]);
    n.settle_ready(&p, "installed");
    // The owner rewrites its list (another setting), without our entry; we add it back.
    let newer = BRIDGE_LIST.replace("\"br\"", "\"br2\"");
    n.write("30-bridge.conflist", &newer);
    poll_until("our entry back in the rewritten file", LONG, || {
        n.entries("30-bridge.conflist") == 1
    });
    n.settle_ready(&p, "again");
    // The flannel list is edited in place, keeping our entry: not ours to give back any more.
    let edited = fs::read_to_string(n.conf.join("20-flannel.conflist"))
        .unwrap()
        .replace("\"fl\"", "\"fl-edited\"");
    n.write("20-flannel.conflist", &edited);
    n.settle_ready(&p, "after the edit");
    p.signal(Signal::SIGTERM);
    assert!(p.wait_exit(LONG).success(), "{}", p.stderr());
    // Its newest version is what we recorded before merging into it again: given back exactly.
    assert_eq!(
        fs::read_to_string(n.conf.join("30-bridge.conflist")).unwrap(),
        newer
    );
    // The edited one keeps the edit and loses our entry only; the .conf is not brought back over it.
    let kept = fs::read_to_string(n.conf.join("20-flannel.conflist")).unwrap();
    assert!(kept.contains("fl-edited"), "{kept}");
    assert_eq!(n.entries("20-flannel.conflist"), 0);
    assert!(!n.conf.join("20-flannel.conf").exists());
}
