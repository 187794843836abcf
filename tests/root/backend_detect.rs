//! The host backend probe without exec (root): iptables-wrapper's rule on rule counts read from the
//! kernel (legacy x_tables by getsockopt, iptables-nft's tables by a netlink dump) in a namespace the test
//! made, and the probe instantiates no legacy table.

use crate::support::{require_root, words, Netns};
use istio_cni::iptables::backend::detect_host;
use istio_cni::iptables::Backend;

fn detect(ns: &Netns) -> Backend {
    istio_cni::netns::run_in(&ns.path(), detect_host).unwrap()
}

#[test]
fn the_backend_holding_more_rules_wins_and_nothing_is_instantiated() {
    if !require_root() {
        return;
    }
    let ns = Netns::new("detect");
    let legacy_tables = || ns.exec_ok(&["cat", "/proc/net/ip_tables_names"]);
    let before = legacy_tables();
    assert_eq!(detect(&ns), Backend::Nft, "no rules anywhere: nft");
    assert_eq!(
        legacy_tables(),
        before,
        "the probe instantiated a legacy table"
    );

    for i in 0..3 {
        ns.exec_ok(&words(&format!(
            "iptables-legacy -t filter -A INPUT -s 10.0.0.{i} -j ACCEPT"
        )));
    }
    ns.exec_ok(&words("ip6tables-legacy -t mangle -A OUTPUT -j RETURN"));
    assert_eq!(detect(&ns), Backend::Legacy, "4 legacy rules, no nft rule");

    for i in 0..4 {
        ns.exec_ok(&words(&format!(
            "iptables-nft -t nat -A OUTPUT -d 10.1.0.{i} -j RETURN"
        )));
    }
    assert_eq!(
        detect(&ns),
        Backend::Nft,
        "as many nft rules as legacy ones: nft"
    );
    ns.exec_ok(&words("iptables-legacy -t nat -A OUTPUT -j RETURN"));
    assert_eq!(detect(&ns), Backend::Legacy, "5 legacy rules against 4");
    // Rules in a native nftables table are nobody's iptables rules.
    ns.exec_ok(&words("nft add table ip other"));
    ns.exec_ok(&words("nft add chain ip other c"));
    for _ in 0..3 {
        ns.exec_ok(&words("nft add rule ip other c counter"));
    }
    assert_eq!(
        detect(&ns),
        Backend::Legacy,
        "native nft rules do not count"
    );
}
