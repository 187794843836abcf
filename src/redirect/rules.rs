//! The sidecar rule set (upstream `capture/run.go` `Run`, plugin.md §4.1), generated as data from a typed
//! [`CaptureConfig`], and [`render`]ed to the two `iptables-restore` documents. Every token is a constant
//! or the rendering of a typed value, so the documents cannot carry injected text.

use super::annotations::InterceptionMode;
pub use super::builder::RuleSet;
use super::builder::*;
use super::capture::{CaptureConfig, OwnerGroups, TproxyRoute};
use super::restore::{restore_text, Op, Table};
use super::rules_dns::dns_rules;
use super::rules_steps::{inbound, include_ranges, tproxy_rules};
use crate::error::Result;

/// The restore documents for one pod or configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Documents {
    pub v4: String,
    /// Present exactly when IPv6 is enabled.
    pub v6: Option<String>,
    /// Policy routing to add after the rules (TPROXY only).
    pub tproxy_route: Option<TproxyRoute>,
}

/// Generates and renders the rules for `cfg`.
pub fn render(cfg: &CaptureConfig) -> Result<Documents> {
    let set = generate(cfg)?;
    Ok(Documents {
        v4: restore_text(&set.v4),
        v6: cfg.enable_ipv6.then(|| restore_text(&set.v6)),
        tproxy_route: cfg.tproxy_route(),
    })
}

/// The whole rule set, in upstream's order.
// Each `args!` stays on one or two lines as upstream writes its rules (rustfmt: a token a line).
#[rustfmt::skip::macros(args)]
pub fn generate(cfg: &CaptureConfig) -> Result<RuleSet> {
    let mut b = Builder {
        ipv6: cfg.enable_ipv6,
        set: RuleSet::default(),
    };
    let tproxy = cfg.mode == InterceptionMode::Tproxy;
    let lo4 = cfg.host_ipv4_loopback_cidr.to_string();
    let lo6 = "::1/128";
    let (inc4, inc6) = split_family(&cfg.outbound_ip_ranges_include);
    let no_dns_servers = cfg.dns_servers_v4.is_empty() && cfg.dns_servers_v6.is_empty();
    // DNS requested without servers and without capture-all is silently disabled (upstream logs a warning).
    let dns = cfg.redirect_dns && (cfg.capture_all_dns || !no_dns_servers);
    if cfg.redirect_dns && !dns {
        log::warn!(
            "DNS redirection requested without DNS servers or capture-all: DNS capture disabled"
        );
    }
    let tunnel = cfg.inbound_tunnel_port.to_string();

    // 1. Excluded interfaces bypass everything.
    for x in &cfg.exclude_interfaces {
        b.append(Table::Nat, PREROUTING, args!["-i", x, "-j", "RETURN"]);
        b.append(Table::Nat, OUTPUT, args!["-o", x, "-j", "RETURN"]);
    }
    if tproxy {
        for x in &cfg.exclude_interfaces {
            b.append(Table::Mangle, PREROUTING, args!["-i", x, "-j", "RETURN"]);
            b.append(Table::Mangle, OUTPUT, args!["-o", x, "-j", "RETURN"]);
        }
    }
    // 2. Virtual interfaces are not captured inbound.
    for x in &cfg.reroute_virtual_interfaces {
        b.insert(Table::Nat, PREROUTING, 1, args!["-i", x, "-j", "RETURN"]);
    }
    // 3. Drop conntrack-INVALID packets.
    if cfg.drop_invalid {
        b.append(
            Table::Mangle,
            PREROUTING,
            args!["-m", "conntrack", "--ctstate", "INVALID", "-j", ISTIO_DROP],
        );
        b.append(Table::Mangle, ISTIO_DROP, args!["-j", "DROP"]);
    }
    // 4, 5. Tunnel port, and the two redirect chains.
    b.append(
        Table::Nat,
        ISTIO_INBOUND,
        args!["-p", "tcp", "--dport", tunnel, "-j", "RETURN"],
    );
    b.append(
        Table::Nat,
        ISTIO_REDIRECT,
        args!["-p", "tcp", "-j", "REDIRECT", "--to-ports", cfg.proxy_port],
    );
    b.append(
        Table::Nat,
        ISTIO_IN_REDIRECT,
        args!["-p", "tcp", "-j", "REDIRECT", "--to-ports", cfg.inbound_capture_port],
    );
    // 6. Inbound.
    inbound(&mut b, cfg, &lo4, lo6);
    // 7, 8. Outbound entry and port exclusions.
    b.append(Table::Nat, OUTPUT, args!["-j", ISTIO_OUTPUT]);
    for p in &cfg.outbound_ports_exclude {
        b.append(
            Table::Nat,
            ISTIO_OUTPUT,
            args!["-p", "tcp", "--dport", p, "-j", "RETURN"],
        );
        b.append(
            Table::Nat,
            ISTIO_OUTPUT,
            args!["-p", "udp", "--dport", p, "-j", "RETURN"],
        );
    }
    // 9. Inbound passthrough source.
    b.versioned(
        "127.0.0.6/32",
        "::6/128",
        Table::Nat,
        ISTIO_OUTPUT,
        args!["-o", "lo", "-s", VERSIONED, "-j", "RETURN"],
    );
    // 10, 11. Proxy uid/gid.
    let loopback_included = inc4.has_loopback || inc6.has_loopback;
    for (flag, id) in owner_ids(cfg) {
        let mut p = args!["-o", "lo", "!", "-d", VERSIONED, "-p", "tcp"];
        // Only the uid rules skip the DNS ports.
        if dns && flag == "--uid-owner" {
            p.extend(args!["-m", "multiport", "!", "--dports", format!("53,{tunnel}")]);
        } else {
            p.extend(args!["!", "--dport", tunnel]);
        }
        p.extend(args!["-m", "owner", flag, id, "-j", ISTIO_IN_REDIRECT]);
        b.versioned(&lo4, lo6, Table::Nat, ISTIO_OUTPUT, p);
        if !loopback_included {
            if dns {
                b.append(
                    Table::Nat,
                    ISTIO_OUTPUT,
                    args!["-o", "lo", "-p", "tcp", "!", "--dport", "53", "-m", "owner", "!",
                          flag, id, "-j", "RETURN"],
                );
            } else {
                b.append(
                    Table::Nat,
                    ISTIO_OUTPUT,
                    args!["-o", "lo", "-m", "owner", "!", flag, id, "-j", "RETURN"],
                );
            }
        }
        b.append(
            Table::Nat,
            ISTIO_OUTPUT,
            args!["-m", "owner", flag, id, "-j", "RETURN"],
        );
    }
    // 12. Owner groups.
    match &cfg.owner_groups {
        OwnerGroups::AllExcept(groups) => {
            for g in groups {
                b.append(
                    Table::Nat,
                    ISTIO_OUTPUT,
                    args!["-m", "owner", "--gid-owner", g, "-j", "RETURN"],
                );
            }
        }
        OwnerGroups::Only(groups) => {
            let mut p = Vec::new();
            for g in groups {
                p.extend(args!["-m", "owner", "!", "--gid-owner", g]);
            }
            p.extend(args!["-j", "RETURN"]);
            b.append(Table::Nat, ISTIO_OUTPUT, p);
        }
    }
    // 13. DNS.
    if dns {
        dns_rules(&mut b, cfg);
    }
    // 14, 15. Loopback, then excluded ranges.
    b.versioned(
        &lo4,
        lo6,
        Table::Nat,
        ISTIO_OUTPUT,
        args!["-d", VERSIONED, "-j", "RETURN"],
    );
    for c in &cfg.outbound_ip_ranges_exclude {
        let rule = args!["-d", c, "-j", "RETURN"];
        b.push(!c.is_ipv4(), Table::Nat, ISTIO_OUTPUT, Op::Append, rule);
    }
    // 16. Included outbound ports.
    for p in &cfg.outbound_ports_include {
        b.append(
            Table::Nat,
            ISTIO_OUTPUT,
            args!["-p", "tcp", "--dport", p, "-j", ISTIO_REDIRECT],
        );
    }
    // 17. Included ranges, per family.
    include_ranges(&mut b, cfg, &inc4, false);
    include_ranges(&mut b, cfg, &inc6, true);
    // 18. TPROXY marks.
    if tproxy {
        tproxy_rules(&mut b, cfg, &lo4, lo6);
    }
    Ok(b.set)
}

#[cfg(test)]
#[path = "rules_tests.rs"]
mod tests;
