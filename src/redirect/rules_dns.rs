//! DNS capture (step 13 of [`super::rules::generate`], upstream `SetupDNSRedir` and
//! `addDNSConntrackZones`): redirect port 53 to the agent, and split the proxy's own DNS traffic from the
//! apps' into two conntrack zones.

use super::builder::{args, Builder};
use super::capture::CaptureConfig;
use super::restore::Table;
use super::rules::*;

pub(crate) fn dns_rules(b: &mut Builder, cfg: &CaptureConfig) {
    let all = cfg.capture_all_dns;
    let (s4, s6) = (&cfg.dns_servers_v4, &cfg.dns_servers_v6);
    b.append(Table::Raw, OUTPUT, args!["-j", ISTIO_OUTPUT_DNS]);
    if all || !s4.is_empty() {
        b.append_v4(Table::Nat, ISTIO_OUTPUT, args!["-j", ISTIO_OUTPUT_DNS]);
    }
    if all || !s6.is_empty() {
        b.append_v6(Table::Nat, ISTIO_OUTPUT, args!["-j", ISTIO_OUTPUT_DNS]);
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
            for s in s4 {
                b.append_v4(
                    Table::Nat,
                    ISTIO_OUTPUT_DNS,
                    args![
                        "-p",
                        proto,
                        "--dport",
                        "53",
                        "-d",
                        format!("{s}/32"),
                        "-j",
                        "REDIRECT",
                        to,
                        DNS_PORT
                    ],
                );
            }
            for s in s6 {
                b.append_v6(
                    Table::Nat,
                    ISTIO_OUTPUT_DNS,
                    args![
                        "-p",
                        proto,
                        "--dport",
                        "53",
                        "-d",
                        format!("{s}/128"),
                        "-j",
                        "REDIRECT",
                        to,
                        DNS_PORT
                    ],
                );
            }
        }
    }
    // Conntrack zones: the proxy's own DNS traffic in zone 1 (upstream), its answers to apps in zone 2.
    for (ids, flag) in [
        (&cfg.proxy_uids, "--uid-owner"),
        (&cfg.proxy_gids, "--gid-owner"),
    ] {
        for id in ids.iter() {
            b.append(
                Table::Raw,
                ISTIO_OUTPUT_DNS,
                args![
                    "-p", "udp", "--dport", "53", "-m", "owner", flag, id, "-j", "CT", "--zone",
                    "1"
                ],
            );
            b.append(
                Table::Raw,
                ISTIO_OUTPUT_DNS,
                args![
                    "-p", "udp", "--sport", DNS_PORT, "-m", "owner", flag, id, "-j", "CT",
                    "--zone", "2"
                ],
            );
        }
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
    if !s4.is_empty() {
        b.append_v4(Table::Raw, PREROUTING, args!["-j", ISTIO_INBOUND]);
    }
    for s in s4 {
        b.append_v4(
            Table::Raw,
            ISTIO_OUTPUT_DNS,
            args![
                "-p",
                "udp",
                "--dport",
                "53",
                "-d",
                format!("{s}/32"),
                "-j",
                "CT",
                "--zone",
                "2"
            ],
        );
        b.append_v4(
            Table::Raw,
            ISTIO_INBOUND,
            args![
                "-p",
                "udp",
                "--sport",
                "53",
                "-s",
                format!("{s}/32"),
                "-j",
                "CT",
                "--zone",
                "1"
            ],
        );
    }
    if !s6.is_empty() {
        b.append_v6(Table::Raw, PREROUTING, args!["-j", ISTIO_INBOUND]);
    }
    for s in s6 {
        b.append_v6(
            Table::Raw,
            ISTIO_OUTPUT_DNS,
            args![
                "-p",
                "udp",
                "--dport",
                "53",
                "-d",
                format!("{s}/128"),
                "-j",
                "CT",
                "--zone",
                "2"
            ],
        );
        b.append_v6(
            Table::Raw,
            ISTIO_INBOUND,
            args![
                "-p",
                "udp",
                "--sport",
                "53",
                "-s",
                format!("{s}/128"),
                "-j",
                "CT",
                "--zone",
                "1"
            ],
        );
    }
}
