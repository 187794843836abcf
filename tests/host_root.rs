//! `ISTIO_CNI_HOST_ROOT`: the installer and repair agent run the node's iptables from a scratch image
//! through the node's own dynamic loader (no chroot: upstream's chart drops SYS_CHROOT). Here the "node
//! root" is `/proc/self/root`, standing for a container's `/host/proc/1/root`. Its own test binary: it sets
//! a process-wide variable. Root only.

mod support;

use istio_cni::iptables::apply::{apply, Addresses, Outcome, Plan};
use istio_cni::iptables::{backend, tool, Backend, Family};
use support::{conformance_dir, require_root, Netns};

#[test]
fn iptables_run_from_the_host_root_through_its_loader() {
    if !require_root() {
        return;
    }
    std::env::set_var(tool::HOST_ROOT_ENV, "/proc/self/root");
    let t = tool::find("iptables-nft-restore").expect("found under the host root");
    assert_eq!(
        t.root.as_deref(),
        Some(std::path::Path::new("/proc/self/root"))
    );
    assert!(
        t.path.starts_with("/usr") || t.path.starts_with("/sbin"),
        "{:?}",
        t.path
    );
    assert!(backend::detect_host().is_ok());

    let ns = Netns::new("hostroot");
    let doc = std::fs::read_to_string(conformance_dir().join("pod/basic/expected.rules")).unwrap();
    let plan = Plan {
        docs: vec![(Family::V4, doc)],
        tproxy: None,
        ipv6_passthrough: false,
    };
    let r = apply(&ns.path(), Backend::Nft, move |_: &Addresses| Ok(plan)).unwrap();
    assert_eq!(r.families[0].1, Outcome::Applied);
    assert!(ns.exec_ok(&["iptables-nft-save"]).contains(":ISTIO_OUTPUT"));

    std::env::set_var(tool::HOST_ROOT_ENV, "/nonexistent-root");
    let e = backend::require(Backend::Nft, Family::V4, "restore")
        .unwrap_err()
        .to_string();
    assert!(e.contains("under the host root /nonexistent-root"), "{e}");
    // The node tools' applet links (src/iptables/tool.rs) live as long as the process.
    let _ = std::fs::remove_dir_all(
        std::env::temp_dir().join(format!("istio-cni-host-tools-{}", std::process::id())),
    );
}
