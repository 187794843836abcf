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

/// The whole rule set, in upstream's order (the step numbers of plugin.md §4.1).
pub fn generate(cfg: &CaptureConfig) -> Result<RuleSet> {
    let mut b = Builder {
        ipv6: cfg.enable_ipv6,
        set: RuleSet::default(),
    };
    let lo4 = cfg.host_ipv4_loopback_cidr.to_string();
    let lo6 = "::1/128";
    // DNS requested without servers and without capture-all is silently disabled (upstream logs a warning).
    let dns = cfg.dns_captured();
    if cfg.redirect_dns && !dns {
        log::warn!(
            "DNS redirection requested without DNS servers or capture-all: DNS capture disabled"
        );
    }
    bypasses(&mut b, cfg);
    redirect_chains(&mut b, cfg);
    // 6. Inbound.
    inbound(&mut b, cfg, &lo4, lo6);
    outbound_owners(&mut b, cfg, &lo4, lo6);
    // 13. DNS.
    if dns {
        dns_rules(&mut b, cfg);
    }
    outbound_ranges(&mut b, cfg, &lo4, lo6);
    // 18. TPROXY marks.
    if cfg.mode == InterceptionMode::Tproxy {
        tproxy_rules(&mut b, cfg, &lo4, lo6);
    }
    Ok(b.set)
}

/// Steps 1 to 3: excluded and virtual interfaces bypass the capture, conntrack-INVALID packets are dropped.
// Each `args!` stays on one or two lines as upstream writes its rules (rustfmt: a token a line).
#[rustfmt::skip::macros(args)]
fn bypasses(b: &mut Builder, cfg: &CaptureConfig) {
    // 1. Excluded interfaces bypass everything.
    let tables: &[Table] = if cfg.mode == InterceptionMode::Tproxy {
        &[Table::Nat, Table::Mangle]
    } else {
        &[Table::Nat]
    };
    for &t in tables {
        for x in &cfg.exclude_interfaces {
            b.append(t, PREROUTING, args!["-i", x, "-j", "RETURN"]);
            b.append(t, OUTPUT, args!["-o", x, "-j", "RETURN"]);
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
}

/// Steps 4 and 5: the tunnel port returns from inbound capture; the two redirect chains.
#[rustfmt::skip::macros(args)]
fn redirect_chains(b: &mut Builder, cfg: &CaptureConfig) {
    b.append(
        Table::Nat,
        ISTIO_INBOUND,
        args!["-p", "tcp", "--dport", cfg.inbound_tunnel_port, "-j", "RETURN"],
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
}

/// Steps 7 to 12: the outbound entry, then the returns for excluded ports, the inbound passthrough
/// source, the proxy's uids and gids ([`proxy_ids`]) and the owner groups.
#[rustfmt::skip::macros(args)]
fn outbound_owners(b: &mut Builder, cfg: &CaptureConfig, lo4: &str, lo6: &str) {
    // 7, 8. Outbound entry and port exclusions.
    b.append(Table::Nat, OUTPUT, args!["-j", ISTIO_OUTPUT]);
    for p in &cfg.outbound_ports_exclude {
        for proto in ["tcp", "udp"] {
            let rule = args!["-p", proto, "--dport", p, "-j", "RETURN"];
            b.append(Table::Nat, ISTIO_OUTPUT, rule);
        }
    }
    // 9. Inbound passthrough source.
    b.versioned(
        "127.0.0.6/32",
        "::6/128",
        Table::Nat,
        ISTIO_OUTPUT,
        args!["-o", "lo", "-s", VERSIONED, "-j", "RETURN"],
    );
    proxy_ids(b, cfg, lo4, lo6);
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
}

/// Steps 10 and 11, per proxy uid then gid: its own traffic to a local address goes to inbound capture,
/// local traffic of other owners returns (unless a loopback range is included), and the rest of its own
/// returns.
#[rustfmt::skip::macros(args)]
fn proxy_ids(b: &mut Builder, cfg: &CaptureConfig, lo4: &str, lo6: &str) {
    let (inc4, inc6) = split_family(&cfg.outbound_ip_ranges_include);
    let loopback_included = inc4.has_loopback || inc6.has_loopback;
    let (dns, tunnel) = (cfg.dns_captured(), cfg.inbound_tunnel_port);
    for (flag, id) in owner_ids(cfg) {
        let mut p = args!["-o", "lo", "!", "-d", VERSIONED, "-p", "tcp"];
        // Only the uid rules skip the DNS ports.
        if dns && flag == "--uid-owner" {
            p.extend(args!["-m", "multiport", "!", "--dports", format!("53,{tunnel}")]);
        } else {
            p.extend(args!["!", "--dport", tunnel]);
        }
        p.extend(args!["-m", "owner", flag, id, "-j", ISTIO_IN_REDIRECT]);
        b.versioned(lo4, lo6, Table::Nat, ISTIO_OUTPUT, p);
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
}

/// Steps 14 to 17: loopback and the excluded ranges return, then the included ports and ranges are
/// redirected.
#[rustfmt::skip::macros(args)]
fn outbound_ranges(b: &mut Builder, cfg: &CaptureConfig, lo4: &str, lo6: &str) {
    // 14, 15. Loopback, then excluded ranges.
    b.versioned(
        lo4,
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
    let (inc4, inc6) = split_family(&cfg.outbound_ip_ranges_include);
    include_ranges(b, cfg, &inc4, false);
    include_ranges(b, cfg, &inc6, true);
}

#[cfg(test)]
#[path = "rules_tests.rs"]
mod tests;
