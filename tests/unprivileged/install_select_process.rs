//! The readiness invariant with the real installer process, real files, inotify and signals (issue 11
//! items 1 and 7): we are ready only while the file the runtime will pick (libcni's first valid config)
//! holds our entry. Without CNI_CONF_NAME we follow that file (inject into the new one, take our entry out
//! of the old one); with CNI_CONF_NAME pinned, a higher-priority file without our entry makes us not ready
//! (503, metric 0, one log line per interval). Hostile candidates (FIFO, link to /dev/zero, 1 GB sparse
//! file) neither hang the installer nor grow its memory; a symlinked primary stays a link.
//! Timings are bounded generously ("not hung"), never asserted tightly.

use crate::support::install::node::*;
use crate::support::install::*;
use nix::sys::signal::Signal;
use std::fs;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::time::Duration;

#[test]
fn unpinned_follows_a_new_higher_priority_primary_and_back() {
    let n = Node::new("follow");
    n.write("10-ptp.conflist", &list_text("ptp-net", "ptp"));
    let mut p = n.start(&[]);
    n.settle_ready(&p, "initial");
    assert_eq!(n.entries("10-ptp.conflist"), 1);

    // Another CNI atomically writes a higher-priority config: the runtime switches to it.
    n.write("05-new.conflist", &list_text("new-net", "bridge"));
    poll_until("entry moved to 05-new", LONG, || {
        n.entries("05-new.conflist") == 1 && n.entries("10-ptp.conflist") == 0
    });
    n.settle_ready(&p, "after 05-new appeared");
    assert_eq!(n.runtime_file().as_deref(), Some("05-new.conflist"));

    // It goes away again: back to 10-ptp (re-selected, not waited for).
    fs::remove_file(n.conf.join("05-new.conflist")).unwrap();
    poll_until("entry back in 10-ptp", LONG, || {
        n.entries("10-ptp.conflist") == 1
    });
    n.settle_ready(&p, "after 05-new vanished");

    p.signal(Signal::SIGTERM);
    assert!(p.wait_exit(LONG).success(), "{}", p.stderr());
    assert_eq!(n.entries("10-ptp.conflist"), 0);
}

#[test]
fn restart_reselects_when_the_chosen_primary_vanishes() {
    let n = Node::new("reselect");
    n.write("10-ptp.conflist", &list_text("ptp-net", "ptp"));
    n.write("05-new.conflist", &list_text("new-net", "bridge"));
    let p = n.start(&[]);
    n.settle_ready(&p, "first run");
    assert_eq!(n.entries("05-new.conflist"), 1);
    p.signal(Signal::SIGKILL);
    drop(p);
    fs::remove_file(n.conf.join("05-new.conflist")).unwrap();
    let mut p = n.start(&[]);
    n.settle_ready(&p, "after restart");
    assert_eq!(n.entries("10-ptp.conflist"), 1);
    // And while running: the chosen file vanishes, the next one is used.
    n.write("07-mid.conflist", &list_text("mid-net", "bridge"));
    poll_until("moved to 07-mid", LONG, || {
        n.entries("07-mid.conflist") == 1
    });
    fs::remove_file(n.conf.join("07-mid.conflist")).unwrap();
    poll_until("back in 10-ptp", LONG, || n.entries("10-ptp.conflist") == 1);
    n.settle_ready(&p, "after 07-mid vanished");
    p.signal(Signal::SIGTERM);
    assert!(p.wait_exit(LONG).success());
}

#[test]
fn pinned_name_preempted_by_a_file_without_our_entry_is_not_ready() {
    let n = Node::new("pinned");
    n.write("10-ptp.conflist", &list_text("ptp-net", "ptp"));
    let mut p = n.start(&[("CNI_CONF_NAME", "10-ptp.conflist")]);
    n.settle_ready(&p, "initial");
    assert_eq!(n.metric_ready().as_deref(), Some("1"));

    let new_text = list_text("new-net", "bridge");
    n.write("05-new.conflist", &new_text);
    poll_until("503 after preemption", LONG, || n.not_ready());
    poll_until("metric 0", LONG, || {
        n.metric_ready().as_deref() == Some("0")
    });
    // More events in the conf dir: still not ready, and only one log line within the interval.
    for i in 0..5 {
        n.write("05-new.conflist", &new_text);
        n.write("99-other.conflist", &list_text(&format!("o{i}"), "x"));
        std::thread::sleep(Duration::from_millis(50));
    }
    stays(
        "stays not ready while 05-new lacks our entry",
        Duration::from_secs(1),
        || n.not_ready(),
    );
    let log = p.stderr();
    let lines: Vec<&str> = log.lines().filter(|l| l.contains("not ready:")).collect();
    assert_eq!(lines.len(), 1, "one line per interval:\n{log}");
    assert!(
        lines[0].contains("05-new.conflist") && lines[0].contains("CNI_CONF_NAME"),
        "says which file and what to do: {}",
        lines[0]
    );
    assert_eq!(
        fs::read_to_string(n.conf.join("05-new.conflist")).unwrap(),
        new_text
    );
    assert_eq!(
        n.entries("10-ptp.conflist"),
        1,
        "the pinned file keeps our entry"
    );

    fs::remove_file(n.conf.join("05-new.conflist")).unwrap();
    n.settle_ready(&p, "after 05-new removed");
    assert_eq!(n.metric_ready().as_deref(), Some("1"));
    p.signal(Signal::SIGTERM);
    assert!(p.wait_exit(LONG).success());
}

fn vm_kb(pid: u32, key: &str) -> u64 {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// A hostile candidate next to a valid primary: ready, small, responsive, SIGTERM works.
fn hostile_candidate(tag: &str, make: impl Fn(&Path)) {
    let n = Node::new(tag);
    n.write(
        "10-calico.conflist",
        &list_text("k8s-pod-network", "calico"),
    );
    make(&n.conf);
    let mut p = n.start(&[]);
    let pid = p.child.id();
    n.settle_ready(&p, tag);
    // Events on the conf dir make it look at every candidate again.
    for i in 0..5 {
        n.write(&format!("20-x{i}.conflist"), &list_text("x", "x"));
        std::thread::sleep(Duration::from_millis(20));
    }
    n.settle_ready(&p, tag);
    let hwm = vm_kb(pid, "VmHWM:");
    let rss = vm_kb(pid, "VmRSS:");
    eprintln!("{tag}: VmRSS {rss} kB, peak VmHWM {hwm} kB");
    assert!(hwm > 0 && hwm < 20 * 1024, "{tag}: peak RSS {hwm} kB");
    assert!(
        p.stderr().contains("not a regular file") || p.stderr().contains("larger than"),
        "{tag}: the skipped candidate is named:\n{}",
        p.stderr()
    );
    p.signal(Signal::SIGTERM);
    assert!(p.wait_exit(LONG).success(), "{tag}: {}", p.stderr());
}

#[test]
fn a_fifo_candidate_does_not_hang_the_installer() {
    hostile_candidate("fifo", |conf| {
        nix::unistd::mkfifo(
            &conf.join("00-x.conflist"),
            nix::sys::stat::Mode::from_bits_truncate(0o644),
        )
        .unwrap();
    });
}

#[test]
fn a_link_to_dev_zero_is_not_read() {
    hostile_candidate("zero", |conf| {
        symlink("/dev/zero", conf.join("00-zero.conflist")).unwrap();
    });
}

#[test]
fn a_sparse_1g_candidate_is_not_read() {
    hostile_candidate("sparse", |conf| {
        let f = fs::File::create(conf.join("00-big.conflist")).unwrap();
        f.set_len(1 << 30).unwrap();
    });
}

#[test]
fn a_symlinked_primary_stays_a_link() {
    let n = Node::new("symlink");
    let outside = n.root.join("outside");
    fs::create_dir_all(&outside).unwrap();
    let original = list_text("k8s-pod-network", "calico");
    fs::write(outside.join("calico.conflist"), &original).unwrap();
    let link = n.conf.join("10-calico.conflist");
    symlink("../outside/calico.conflist", &link).unwrap();
    let mut p = n.start(&[]);
    n.settle_ready(&p, "symlinked primary");
    assert!(
        fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink(),
        "still a link"
    );
    assert_eq!(
        fs::read_link(&link).unwrap(),
        Path::new("../outside/calico.conflist")
    );
    assert_eq!(n.entries("10-calico.conflist"), 1);
    let temps = |d: &Path| names(d).into_iter().filter(|f| f.contains(".tmp")).count();
    assert_eq!(temps(&outside) + temps(&n.conf), 0);
    // The primary CNI rewrites its file where it lives: our entry comes back, the link stays.
    let rewritten =
        list_text("k8s-pod-network", "calico").replace("calico\" }", "calico\", \"mtu\": 1400 }");
    atomic_write(
        &outside.join("calico.conflist"),
        rewritten.as_bytes(),
        0o644,
    );
    poll_until("entry back after the target was rewritten", LONG, || {
        n.entries("10-calico.conflist") == 1
            && fs::read_to_string(&link).is_ok_and(|t| t.contains("1400"))
    });
    n.settle_ready(&p, "after the target was rewritten");
    assert!(fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    p.signal(Signal::SIGTERM);
    assert!(p.wait_exit(LONG).success(), "{}", p.stderr());
    assert!(
        fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink(),
        "still a link after cleanup"
    );
    let restored = fs::read_to_string(outside.join("calico.conflist")).unwrap();
    assert_eq!(
        canon(&restored),
        canon(&rewritten),
        "cleanup restores the target"
    );
    assert_eq!(names(&outside), vec!["calico.conflist"]);
}

#[test]
fn the_kubeconfig_log_names_server_and_ca_fingerprint_only() {
    let n = Node::new("kclog");
    n.write(
        "10-calico.conflist",
        &list_text("k8s-pod-network", "calico"),
    );
    let mut p = n.start(&[]);
    n.settle_ready(&p, "kubeconfig log");
    p.signal(Signal::SIGTERM);
    assert!(p.wait_exit(LONG).success());
    let log = p.stderr();
    let ca = fs::read(n.root.join("sa/ca.crt")).unwrap();
    let ca_b64 = istio_cni::install::config::kubeconfig::base64(&ca);
    let line = log
        .lines()
        .find(|l| l.contains("wrote kubeconfig"))
        .unwrap_or_else(|| panic!("no kubeconfig line:\n{log}"));
    assert!(
        line.contains("https://10.96.0.1:443") && line.contains("CA sha256:"),
        "{line}"
    );
    assert!(
        !log.contains(&ca_b64[..40]),
        "the CA blob is not logged:\n{log}"
    );
    assert!(!log.contains("certificate-authority-data"), "{log}");
}

#[test]
fn an_istio_cni_conf_primary_gets_one_entry_and_cleanup_leaves_no_empty_list() {
    let n = Node::new("ownconf");
    fs::write(
        n.conf.join("10-istio.conf"),
        "{\"cniVersion\":\"0.3.1\",\"name\":\"istio-cni\",\"type\":\"istio-cni\"}\n",
    )
    .unwrap();
    let mut p = n.start(&[]);
    n.settle_ready(&p, "istio-cni .conf primary");
    assert_eq!(names(&n.conf), vec!["10-istio.conflist"]);
    assert_eq!(
        n.entries("10-istio.conflist"),
        1,
        "exactly one istio-cni entry"
    );
    p.signal(Signal::SIGTERM);
    assert!(p.wait_exit(LONG).success(), "{}", p.stderr());
    for f in names(&n.conf) {
        let t = fs::read_to_string(n.conf.join(&f)).unwrap();
        assert!(
            !istio_cni::install::config::conflist::has_empty_plugins(&t),
            "{f}: {t}"
        );
    }
    assert!(names(&n.conf).is_empty(), "{:?}", names(&n.conf));
}

/// The conf dir's file names, sorted (temp files included: none may be left).
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// A `.json` holding a plugin list: the runtimes load a `.json` as one plugin (libcni
/// `NetworkPluginConfFromBytes`: `type` required), so it is skipped (CRI-O goes on to the next file;
/// containerd's go-cni stops loading there) and the node's network is `20-flannel.conflist`. Pinned to it
/// with CNI_CONF_NAME, our entry goes into the list in place, as upstream 1.30.3 puts it, so it stays a
/// file the runtime skips, and we are not ready, saying why; unpinned, the runtime's file gets our entry.
/// Either way the runtime's network is flannel during the install and after the uninstall, and the conf
/// dir holds the files it held, byte for byte apart from our entry (checked to fail when the `.json` was
/// turned into `10-calico.conflist`).
#[test]
fn a_json_holding_a_list_never_becomes_the_runtimes_network() {
    let go = |t: &str| {
        let v = istio_cni::json::parse(t, "t").unwrap();
        istio_cni::install::config::conflist::render(&v).unwrap()
    };
    let calico = go(r#"{"name":"k8s-pod-network","cniVersion":"0.3.1",
        "plugins":[{"type":"calico","ipam":{"type":"calico-ipam"}},{"type":"portmap","capabilities":{"portMappings":true}}]}"#);
    let flannel = go(&list_text("cbr0", "flannel"));
    let both = ["10-calico.json", "20-flannel.conflist"];
    for pinned in [true, false] {
        let n = Node::new("json-list");
        n.write("10-calico.json", &calico);
        n.write("20-flannel.conflist", &flannel);
        assert_eq!(n.runtime_file().as_deref(), Some("20-flannel.conflist"));
        let env: &[(&str, &str)] = if pinned {
            &[("CNI_CONF_NAME", "10-calico.json")]
        } else {
            &[]
        };
        let mut p = n.start(env);
        if pinned {
            poll_until("ready, or not ready saying why", LONG, || {
                n.ready() || p.stderr().contains("not ready:")
            });
            let log = p.stderr();
            assert_eq!(
                n.runtime_file().as_deref(),
                Some("20-flannel.conflist"),
                "{log}"
            );
            assert_eq!(names(&n.conf), both, "{log}");
            assert!(n.not_ready(), "{log}");
            let line = log.lines().find(|l| l.contains("not ready:")).unwrap();
            assert!(
                line.contains("20-flannel.conflist")
                    && line.contains("does not load CNI_CONF_NAME=10-calico.json")
                    && line.contains("missing 'type'"),
                "{line}"
            );
            assert_eq!(n.entries("10-calico.json"), 1, "in place, as upstream");
            assert!(
                !log.lines().any(|l| l.trim_end().ends_with("removed:")),
                "a reason with nothing after it:\n{log}"
            );
        } else {
            n.settle_ready(&p, "unpinned");
            assert_eq!(names(&n.conf), both);
            assert_eq!(
                fs::read_to_string(n.conf.join("10-calico.json")).unwrap(),
                calico
            );
        }
        p.signal(Signal::SIGTERM);
        assert!(p.wait_exit(LONG).success(), "{}", p.stderr());
        assert_eq!(names(&n.conf), both);
        assert_eq!(n.runtime_file().as_deref(), Some("20-flannel.conflist"));
        assert_eq!(
            fs::read_to_string(n.conf.join("10-calico.json")).unwrap(),
            calico
        );
        assert_eq!(
            fs::read_to_string(n.conf.join("20-flannel.conflist")).unwrap(),
            flannel
        );
    }
}
