//! DNS capture (step 13 of [`super::rules::generate`], upstream `SetupDNSRedir` and
//! `addDNSConntrackZones`): redirect port 53 to the agent, and split the proxy's own DNS traffic from the
//! apps' into two conntrack zones.

use super::builder::*;
use super::capture::CaptureConfig;
use super::restore::{Op, Table};

// Each `args!` stays on one or two lines as upstream writes its rules (rustfmt: a token a line).
#[rustfmt::skip::macros(args)]
pub(crate) fn dns_rules(b: &mut Builder, cfg: &CaptureConfig) {
    let all = cfg.capture_all_dns;
    let (s4, s6) = (&cfg.dns_servers_v4, &cfg.dns_servers_v6);
    // (IPv6?, servers, host prefix) for the per-server rules.
    let per_family = [(false, s4, "/32"), (true, s6, "/128")];
    b.append(Table::Raw, OUTPUT, args!["-j", ISTIO_OUTPUT_DNS]);
    for (v6, servers, _) in per_family {
        if all || !servers.is_empty() {
            let rule = args!["-j", ISTIO_OUTPUT_DNS];
            b.push(v6, Table::Nat, ISTIO_OUTPUT, Op::Append, rule);
        }
    }
    // TCP, then UDP (`--to-port`, singular, as upstream).
    for (proto, to) in [("tcp", "--to-ports"), ("udp", "--to-port")] {
        if all {
            b.append(
                Table::Nat,
                ISTIO_OUTPUT_DNS,
                args!["-p", proto, "--dport", "53", "-j", "REDIRECT", to, DNS_PORT],
            );
        } else {
            for (v6, servers, bits) in per_family {
                for srv in servers {
                    let d = format!("{srv}{bits}");
                    let rule = args!["-p", proto, "--dport", "53", "-d", d,
                                     "-j", "REDIRECT", to, DNS_PORT];
                    b.push(v6, Table::Nat, ISTIO_OUTPUT_DNS, Op::Append, rule);
                }
            }
        }
    }
    // Conntrack zones: the proxy's own DNS traffic in zone 1 (upstream), its answers to apps in zone 2.
    for (flag, id) in owner_ids(cfg) {
        b.append(
            Table::Raw,
            ISTIO_OUTPUT_DNS,
            args!["-p", "udp", "--dport", "53", "-m", "owner", flag, id,
                  "-j", "CT", "--zone", "1"],
        );
        b.append(
            Table::Raw,
            ISTIO_OUTPUT_DNS,
            args!["-p", "udp", "--sport", DNS_PORT, "-m", "owner", flag, id,
                  "-j", "CT", "--zone", "2"],
        );
    }
    if all {
        b.append(Table::Raw, PREROUTING, args!["-j", ISTIO_INBOUND]);
        b.append(
            Table::Raw,
            ISTIO_OUTPUT_DNS,
            args!["-p", "udp", "--dport", "53", "-j", "CT", "--zone", "2"],
        );
        b.append(
            Table::Raw,
            ISTIO_INBOUND,
            args!["-p", "udp", "--sport", "53", "-j", "CT", "--zone", "1"],
        );
        return;
    }
    // Per server: only the families that have servers get the PREROUTING jump.
    for (v6, servers, bits) in per_family {
        if !servers.is_empty() {
            b.push(
                v6,
                Table::Raw,
                PREROUTING,
                Op::Append,
                args!["-j", ISTIO_INBOUND],
            );
        }
        for srv in servers {
            let addr = format!("{srv}{bits}");
            let out = args!["-p", "udp", "--dport", "53", "-d", addr, "-j", "CT", "--zone", "2"];
            b.push(v6, Table::Raw, ISTIO_OUTPUT_DNS, Op::Append, out);
            let back = args!["-p", "udp", "--sport", "53", "-s", addr, "-j", "CT", "--zone", "1"];
            b.push(v6, Table::Raw, ISTIO_INBOUND, Op::Append, back);
        }
    }
}
