//! The owned layout (`ISTIO_OWNED_CNI_CONFIG=true`) with the real installer process, real files, inotify
//! and signals (issue 32): the owned file is always the primary as it is now plus our entry, never a stale
//! copy (at start, before ready, and while running); with no primary it holds our entry alone, marked
//! `no_primary` (the plugin refuses every pod), and we are not ready; a file sorting before it gets our entry
//! and keeps us not ready. The containerd side of the same windows: `tests/cri/tests/windows.rs`.

use crate::support::install::node::*;
use crate::support::install::*;
use nix::sys::signal::Signal;
use std::fs;

const OWNED: &[(&str, &str)] = &[("ISTIO_OWNED_CNI_CONFIG", "true")];
const OWNED_FILE: &str = "02-istio-cni.conflist";

fn text(n: &Node, name: &str) -> String {
    fs::read_to_string(n.conf.join(name)).unwrap_or_default()
}

/// Not ready now, and still not ready a little later (the state has settled: the file is as expected).
fn stays_not_ready(n: &Node, p: &Proc, what: &str) {
    for _ in 0..20 {
        assert!(!n.ready(), "{what}: ready\n{}", p.stderr());
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

#[test]
fn a_stale_owned_file_at_start_is_rederived_before_ready() {
    let n = Node::new("owned-stale");
    n.write("10-ptp.conflist", &list_text("ptp-net", "ptp"));
    let p = n.start(OWNED);
    n.settle_ready(&p, "first run");
    assert!(text(&n, OWNED_FILE).contains("\"ptp\""));
    p.signal(Signal::SIGKILL);
    drop(p);
    // While we were down the primary went away: the owned file copies a network that is gone.
    fs::remove_file(n.conf.join("10-ptp.conflist")).unwrap();
    let mut p = n.start(OWNED);
    poll_until("the stale copy replaced by our entry alone", LONG, || {
        let t = text(&n, OWNED_FILE);
        !t.contains("\"ptp\"") && t.contains("\"no_primary\": true")
    });
    poll_until("not ready", LONG, || n.not_ready());
    stays_not_ready(&n, &p, "no primary");
    // A primary appears (another one): the owned file is derived from it, then ready.
    n.write("10-calico.conflist", &list_text("calico-net", "calico"));
    n.settle_ready(&p, "with the new primary");
    let t = text(&n, OWNED_FILE);
    assert!(t.contains("\"calico\"") && !t.contains("no_primary"), "{t}");
    assert_eq!(
        n.entries("10-calico.conflist"),
        0,
        "the primary is left alone"
    );
    p.signal(Signal::SIGTERM);
    assert!(p.wait_exit(LONG).success(), "{}", p.stderr());
    assert!(!n.conf.join(OWNED_FILE).exists(), "uninstall removes it");
}

#[test]
fn a_primary_rewritten_with_the_same_plugin_types_is_copied_again() {
    let n = Node::new("owned-rewrite");
    n.write("10-ptp.conflist", &list_text("ptp-net", "ptp"));
    let mut p = n.start(OWNED);
    n.settle_ready(&p, "first run");
    // The primary's agent rewrites its file: same plugin type, other settings (a new subnet, say).
    n.write(
        "10-ptp.conflist",
        &list_text("ptp-net", "ptp").replace("\"ptp\" }", "\"ptp\", \"mtu\": 1400 }"),
    );
    poll_until("the owned file follows the primary", LONG, || {
        text(&n, OWNED_FILE).contains("1400")
    });
    n.settle_ready(&p, "after the rewrite");
    p.signal(Signal::SIGTERM);
    assert!(p.wait_exit(LONG).success(), "{}", p.stderr());
}

#[test]
fn a_file_sorting_before_the_owned_one_gets_our_entry_and_keeps_us_not_ready() {
    let n = Node::new("owned-first");
    n.write("10-ptp.conflist", &list_text("ptp-net", "ptp"));
    let mut p = n.start(OWNED);
    n.settle_ready(&p, "first run");
    n.write("01-first.conflist", &list_text("first-net", "bridge"));
    poll_until("our entry in the file the runtime now uses", LONG, || {
        n.entries("01-first.conflist") == 1
    });
    assert_eq!(n.runtime_file().as_deref(), Some("01-first.conflist"));
    poll_until("not ready", LONG, || n.not_ready());
    stays_not_ready(&n, &p, "a file sorts before ours");
    assert!(
        p.stderr().contains("ISTIO_OWNED_CNI_CONFIG_FILENAME"),
        "the log says what to do:\n{}",
        p.stderr()
    );
    fs::remove_file(n.conf.join("01-first.conflist")).unwrap();
    n.settle_ready(&p, "after it went");
    // Uninstall: our entry goes wherever it is, and the owned file.
    n.write("01-first.conflist", &list_text("first-net", "bridge"));
    poll_until("our entry in 01-first again", LONG, || {
        n.entries("01-first.conflist") == 1
    });
    p.signal(Signal::SIGTERM);
    assert!(p.wait_exit(LONG).success(), "{}", p.stderr());
    assert_eq!(n.entries("01-first.conflist"), 0);
    assert!(!n.conf.join(OWNED_FILE).exists());
}

/// O1 (issue 38): CNI_CONF_NAME pinned to a file the runtime does not load first (a lower-priority list,
/// or a `.json` holding a list, which libcni skips) never becomes the node's network through the owned
/// file: the owned file is derived from the runtime's own choice, and we stay not ready, naming the pin.
#[test]
fn a_pin_to_a_file_the_runtime_does_not_load_first_keeps_the_network_and_is_not_ready() {
    for (pinned, why) in [
        ("20-flannel.conflist", "loads another file before it"),
        ("05-list.json", "does not load it at all"),
    ] {
        let n = Node::new(&format!("owned-pin-{}", &pinned[..2]));
        n.write("10-calico.conflist", &list_text("calico-net", "calico"));
        n.write(pinned, &list_text("flannel-net", "flannel"));
        let mut env = OWNED.to_vec();
        env.push(("CNI_CONF_NAME", pinned));
        let mut p = n.start(&env);
        poll_until("the owned file derived from calico", LONG, || {
            text(&n, OWNED_FILE).contains("\"calico\"")
        });
        stays_not_ready(&n, &p, pinned);
        let t = text(&n, OWNED_FILE);
        assert!(
            !t.contains("flannel"),
            "{pinned}: the node moved to flannel: {t}"
        );
        assert_eq!(n.runtime_file().as_deref(), Some(OWNED_FILE));
        poll_until("the log names the pin", LONG, || {
            p.stderr().contains(&format!("CNI_CONF_NAME={pinned}")) && p.stderr().contains(why)
        });
        p.signal(Signal::SIGTERM);
        assert!(p.wait_exit(LONG).success(), "{}", p.stderr());
        assert!(!n.conf.join(OWNED_FILE).exists());
    }
}

#[test]
fn switched_off_the_owned_file_goes_and_the_primary_gets_our_entry_before_ready() {
    let n = Node::new("owned-switched-off");
    n.write("10-ptp.conflist", &list_text("ptp-net", "ptp"));
    let p = n.start(OWNED);
    n.settle_ready(&p, "owned layout");
    assert!(text(&n, OWNED_FILE).contains("\"ptp\""));
    p.signal(Signal::SIGKILL);
    drop(p);
    // The primary's CNI changes its file while the agent is replaced by one with the owned layout off.
    n.write("10-ptp.conflist", &list_text("ptp-net-2", "ptp"));
    let mut p = n.start(&[]);
    poll_until("the owned layout's copy removed", LONG, || {
        !n.conf.join(OWNED_FILE).exists()
    });
    n.settle_ready(&p, "default layout");
    assert_eq!(n.runtime_file().as_deref(), Some("10-ptp.conflist"));
    assert!(text(&n, "10-ptp.conflist").contains("ptp-net-2"));
    p.signal(Signal::SIGTERM);
    assert!(p.wait_exit(LONG).success(), "{}", p.stderr());
}
