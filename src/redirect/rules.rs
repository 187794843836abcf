//! The sidecar rule set (upstream `capture/run.go` `Run`, plugin.md §4.1), generated as data from a typed
//! [`CaptureConfig`], and [`render`]ed to the two `iptables-restore` documents. Every token is a constant
//! or the rendering of a typed value, so the documents cannot carry injected text.

use super::annotations::InterceptionMode;
use super::capture::{CaptureConfig, OwnerGroups, TproxyRoute};
use super::restore::{restore_text, Op, Rule, Table};
use super::values::{Cidr, IpRanges, Ports};
use crate::error::Result;

pub const ISTIO_INBOUND: &str = "ISTIO_INBOUND";
pub const ISTIO_REDIRECT: &str = "ISTIO_REDIRECT";
pub const ISTIO_IN_REDIRECT: &str = "ISTIO_IN_REDIRECT";
pub const ISTIO_OUTPUT: &str = "ISTIO_OUTPUT";
pub const ISTIO_OUTPUT_DNS: &str = "ISTIO_OUTPUT_DNS";
pub const ISTIO_DIVERT: &str = "ISTIO_DIVERT";
pub const ISTIO_TPROXY: &str = "ISTIO_TPROXY";
pub const ISTIO_DROP: &str = "ISTIO_DROP";
const PREROUTING: &str = "PREROUTING";
const OUTPUT: &str = "OUTPUT";

/// The agent's DNS listener.
const DNS_PORT: &str = "15053";
/// Mark Envoy's outbound-to-inbound loopback packets carry in TPROXY mode.
const OUTBOUND_MARK: &str = "1338";

/// The restore documents for one pod or configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Documents {
    pub v4: String,
    /// Present exactly when IPv6 is enabled.
    pub v6: Option<String>,
    /// Policy routing to add after the rules (TPROXY only).
    pub tproxy_route: Option<TproxyRoute>,
}

/// The rules per family.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuleSet {
    pub v4: Vec<Rule>,
    /// Empty unless IPv6 is enabled.
    pub v6: Vec<Rule>,
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

macro_rules! args {
    ($($x:expr),* $(,)?) => { vec![$(($x).to_string()),*] };
}

/// Stands for the family-specific address in a versioned rule.
const VERSIONED: &str = "\u{0}family-specific\u{0}";

struct Builder {
    ipv6: bool,
    set: RuleSet,
}

impl Builder {
    fn push(&mut self, v6: bool, table: Table, chain: &'static str, op: Op, params: Vec<String>) {
        let r = Rule {
            table,
            chain,
            op,
            params,
        };
        if v6 {
            if self.ipv6 {
                self.set.v6.push(r);
            }
        } else {
            self.set.v4.push(r);
        }
    }
    fn append(&mut self, table: Table, chain: &'static str, params: Vec<String>) {
        self.push(false, table, chain, Op::Append, params.clone());
        self.push(true, table, chain, Op::Append, params);
    }
    fn append_v4(&mut self, table: Table, chain: &'static str, params: Vec<String>) {
        self.push(false, table, chain, Op::Append, params);
    }
    fn append_v6(&mut self, table: Table, chain: &'static str, params: Vec<String>) {
        self.push(true, table, chain, Op::Append, params);
    }
    fn insert(&mut self, table: Table, chain: &'static str, pos: u32, params: Vec<String>) {
        self.push(false, table, chain, Op::Insert(pos), params.clone());
        self.push(true, table, chain, Op::Insert(pos), params);
    }
    /// A rule for both families with [`VERSIONED`] replaced by `v4` / `v6`.
    fn versioned(
        &mut self,
        v4: &str,
        v6: &str,
        table: Table,
        chain: &'static str,
        params: Vec<String>,
    ) {
        let subst = |with: &str| -> Vec<String> {
            params
                .iter()
                .map(|p| {
                    if p == VERSIONED {
                        with.to_string()
                    } else {
                        p.clone()
                    }
                })
                .collect()
        };
        self.push(false, table, chain, Op::Append, subst(v4));
        self.push(true, table, chain, Op::Append, subst(v6));
    }
}

/// Include ranges of one family (upstream `NetworkRange`).
struct Range {
    wildcard: bool,
    cidrs: Vec<Cidr>,
    has_loopback: bool,
}

fn split_family(r: &IpRanges) -> (Range, Range) {
    let mk = |v4: bool| match r {
        IpRanges::All => Range {
            wildcard: true,
            cidrs: Vec::new(),
            has_loopback: false,
        },
        IpRanges::List(l) => {
            let cidrs: Vec<Cidr> = l.iter().filter(|c| c.is_ipv4() == v4).copied().collect();
            let has_loopback = cidrs.iter().any(Cidr::is_loopback);
            Range {
                wildcard: false,
                cidrs,
                has_loopback,
            }
        }
    };
    (mk(true), mk(false))
}

/// The whole rule set, in upstream's order.
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
        args![
            "-p",
            "tcp",
            "-j",
            "REDIRECT",
            "--to-ports",
            cfg.inbound_capture_port
        ],
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
    for (ids, flag, multiport) in [
        (&cfg.proxy_uids, "--uid-owner", dns),
        (&cfg.proxy_gids, "--gid-owner", false),
    ] {
        for id in ids.iter() {
            let mut p = args!["-o", "lo", "!", "-d", VERSIONED, "-p", "tcp"];
            if multiport {
                p.extend(args![
                    "-m",
                    "multiport",
                    "!",
                    "--dports",
                    format!("53,{tunnel}")
                ]);
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
                        args![
                            "-o", "lo", "-p", "tcp", "!", "--dport", "53", "-m", "owner", "!",
                            flag, id, "-j", "RETURN"
                        ],
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
    for c in cfg
        .outbound_ip_ranges_exclude
        .iter()
        .filter(|c| c.is_ipv4())
    {
        b.append_v4(Table::Nat, ISTIO_OUTPUT, args!["-d", c, "-j", "RETURN"]);
    }
    for c in cfg
        .outbound_ip_ranges_exclude
        .iter()
        .filter(|c| !c.is_ipv4())
    {
        b.append_v6(Table::Nat, ISTIO_OUTPUT, args!["-d", c, "-j", "RETURN"]);
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

fn inbound(b: &mut Builder, cfg: &CaptureConfig, lo4: &str, lo6: &str) {
    if cfg.inbound_ports_include.is_empty() {
        return;
    }
    let tproxy = cfg.mode == InterceptionMode::Tproxy;
    let mark = cfg.tproxy_mark.to_string();
    let table = if tproxy {
        b.append(
            Table::Mangle,
            ISTIO_DIVERT,
            args!["-j", "MARK", "--set-mark", mark],
        );
        b.append(Table::Mangle, ISTIO_DIVERT, args!["-j", "ACCEPT"]);
        b.versioned(
            lo4,
            lo6,
            Table::Mangle,
            ISTIO_TPROXY,
            args![
                "!",
                "-d",
                VERSIONED,
                "-p",
                "tcp",
                "-j",
                "TPROXY",
                "--tproxy-mark",
                format!("{mark}/0xffffffff"),
                "--on-port",
                cfg.inbound_capture_port
            ],
        );
        Table::Mangle
    } else {
        Table::Nat
    };
    b.append(table, PREROUTING, args!["-p", "tcp", "-j", ISTIO_INBOUND]);
    match &cfg.inbound_ports_include {
        Ports::All => {
            for p in &cfg.inbound_ports_exclude {
                b.append(
                    table,
                    ISTIO_INBOUND,
                    args!["-p", "tcp", "--dport", p, "-j", "RETURN"],
                );
            }
            if tproxy {
                b.append(
                    Table::Mangle,
                    ISTIO_INBOUND,
                    args![
                        "-p",
                        "tcp",
                        "-m",
                        "conntrack",
                        "--ctstate",
                        "RELATED,ESTABLISHED",
                        "-j",
                        ISTIO_DIVERT
                    ],
                );
                b.append(
                    Table::Mangle,
                    ISTIO_INBOUND,
                    args!["-p", "tcp", "-j", ISTIO_TPROXY],
                );
            } else {
                b.append(
                    Table::Nat,
                    ISTIO_INBOUND,
                    args!["-p", "tcp", "-j", ISTIO_IN_REDIRECT],
                );
            }
        }
        Ports::List(ports) => {
            for p in ports {
                if tproxy {
                    b.append(
                        Table::Mangle,
                        ISTIO_INBOUND,
                        args![
                            "-p",
                            "tcp",
                            "--dport",
                            p,
                            "-m",
                            "conntrack",
                            "--ctstate",
                            "RELATED,ESTABLISHED",
                            "-j",
                            ISTIO_DIVERT
                        ],
                    );
                    b.append(
                        Table::Mangle,
                        ISTIO_INBOUND,
                        args!["-p", "tcp", "--dport", p, "-j", ISTIO_TPROXY],
                    );
                } else {
                    b.append(
                        Table::Nat,
                        ISTIO_INBOUND,
                        args!["-p", "tcp", "--dport", p, "-j", ISTIO_IN_REDIRECT],
                    );
                }
            }
        }
    }
}

fn dns_rules(b: &mut Builder, cfg: &CaptureConfig) {
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

fn include_ranges(b: &mut Builder, cfg: &CaptureConfig, r: &Range, v6: bool) {
    let append =
        |b: &mut Builder, p: Vec<String>| b.push(v6, Table::Nat, ISTIO_OUTPUT, Op::Append, p);
    let insert =
        |b: &mut Builder, p: Vec<String>| b.push(v6, Table::Nat, PREROUTING, Op::Insert(1), p);
    if r.wildcard {
        append(b, args!["-j", ISTIO_REDIRECT]);
        for x in &cfg.reroute_virtual_interfaces {
            insert(b, args!["-i", x, "-j", ISTIO_REDIRECT]);
        }
    } else {
        for c in &r.cidrs {
            for x in &cfg.reroute_virtual_interfaces {
                insert(b, args!["-i", x, "-d", c, "-j", ISTIO_REDIRECT]);
            }
            append(b, args!["-d", c, "-j", ISTIO_REDIRECT]);
        }
    }
}

fn tproxy_rules(b: &mut Builder, cfg: &CaptureConfig, lo4: &str, lo6: &str) {
    let mark = cfg.tproxy_mark.to_string();
    b.append(
        Table::Mangle,
        PREROUTING,
        args![
            "-p",
            "tcp",
            "-m",
            "mark",
            "--mark",
            mark,
            "-j",
            "CONNMARK",
            "--save-mark"
        ],
    );
    b.append(
        Table::Mangle,
        OUTPUT,
        args!["-p", "tcp", "-o", "lo", "-m", "mark", "--mark", mark, "-j", "RETURN"],
    );
    for (ids, flag) in [
        (&cfg.proxy_uids, "--uid-owner"),
        (&cfg.proxy_gids, "--gid-owner"),
    ] {
        for id in ids.iter() {
            b.versioned(
                lo4,
                lo6,
                Table::Mangle,
                OUTPUT,
                args![
                    "!",
                    "-d",
                    VERSIONED,
                    "-p",
                    "tcp",
                    "-o",
                    "lo",
                    "-m",
                    "owner",
                    flag,
                    id,
                    "-j",
                    "MARK",
                    "--set-mark",
                    OUTBOUND_MARK
                ],
            );
        }
    }
    b.append(
        Table::Mangle,
        OUTPUT,
        args![
            "-p",
            "tcp",
            "-m",
            "connmark",
            "--mark",
            mark,
            "-j",
            "CONNMARK",
            "--restore-mark"
        ],
    );
    b.insert(
        Table::Mangle,
        ISTIO_INBOUND,
        1,
        args!["-p", "tcp", "-m", "mark", "--mark", mark, "-j", "RETURN"],
    );
    b.push(
        false,
        Table::Mangle,
        ISTIO_INBOUND,
        Op::Insert(2),
        args![
            "-p",
            "tcp",
            "-s",
            "127.0.0.6/32",
            "-i",
            "lo",
            "-j",
            "RETURN"
        ],
    );
    b.push(
        true,
        Table::Mangle,
        ISTIO_INBOUND,
        Op::Insert(2),
        args!["-p", "tcp", "-s", "::6/128", "-i", "lo", "-j", "RETURN"],
    );
    b.insert(
        Table::Mangle,
        ISTIO_INBOUND,
        3,
        args![
            "-p",
            "tcp",
            "-i",
            "lo",
            "-m",
            "mark",
            "!",
            "--mark",
            OUTBOUND_MARK,
            "-j",
            "RETURN"
        ],
    );
}

#[cfg(test)]
#[path = "rules_tests.rs"]
mod tests;
