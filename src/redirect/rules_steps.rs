//! Generation steps of [`super::rules::generate`] that are long enough to stand alone: inbound capture
//! (step 6), the included outbound ranges (step 17) and the TPROXY marks (step 18).

use super::annotations::InterceptionMode;
use super::builder::*;
use super::capture::CaptureConfig;
use super::restore::{Op, Table};
use super::values::Ports;

// Each `args!` stays on one or two lines as upstream writes its rules (rustfmt: a token a line).
#[rustfmt::skip::macros(args)]
pub(crate) fn inbound(b: &mut Builder, cfg: &CaptureConfig, lo4: &str, lo6: &str) {
    if cfg.inbound_ports_include.is_empty() {
        return;
    }
    let tproxy = cfg.mode == InterceptionMode::Tproxy;
    let mark = cfg.tproxy_mark.to_string();
    let (tproxy_mark, port) = (format!("{mark}/0xffffffff"), cfg.inbound_capture_port);
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
            args!["!", "-d", VERSIONED, "-p", "tcp",
                  "-j", "TPROXY", "--tproxy-mark", tproxy_mark, "--on-port", port],
        );
        Table::Mangle
    } else {
        Table::Nat
    };
    b.append(table, PREROUTING, args!["-p", "tcp", "-j", ISTIO_INBOUND]);
    // With `*` every port is captured after the excluded ones RETURN; with a list, only those ports (the
    // excludes are then ignored, as upstream). The capture rules differ only by the `--dport P` match.
    let dports: Vec<Vec<String>> = match &cfg.inbound_ports_include {
        Ports::All => {
            for p in &cfg.inbound_ports_exclude {
                b.append(
                    table,
                    ISTIO_INBOUND,
                    args!["-p", "tcp", "--dport", p, "-j", "RETURN"],
                );
            }
            vec![vec![]]
        }
        Ports::List(ports) => ports.iter().map(|p| args!["--dport", p]).collect(),
    };
    for dport in dports {
        let rule = |tail: Vec<String>| {
            let mut r = args!["-p", "tcp"];
            r.extend(dport.iter().cloned());
            r.extend(tail);
            r
        };
        if tproxy {
            b.append(
                Table::Mangle,
                ISTIO_INBOUND,
                rule(args!["-m", "conntrack", "--ctstate", "RELATED,ESTABLISHED",
                           "-j", ISTIO_DIVERT]),
            );
            b.append(
                Table::Mangle,
                ISTIO_INBOUND,
                rule(args!["-j", ISTIO_TPROXY]),
            );
        } else {
            b.append(
                Table::Nat,
                ISTIO_INBOUND,
                rule(args!["-j", ISTIO_IN_REDIRECT]),
            );
        }
    }
}

pub(crate) fn include_ranges(b: &mut Builder, cfg: &CaptureConfig, r: &Range, v6: bool) {
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

#[rustfmt::skip::macros(args)]
pub(crate) fn tproxy_rules(b: &mut Builder, cfg: &CaptureConfig, lo4: &str, lo6: &str) {
    let mark = cfg.tproxy_mark.to_string();
    b.append(
        Table::Mangle,
        PREROUTING,
        args!["-p", "tcp", "-m", "mark", "--mark", mark, "-j", "CONNMARK", "--save-mark"],
    );
    b.append(
        Table::Mangle,
        OUTPUT,
        args!["-p", "tcp", "-o", "lo", "-m", "mark", "--mark", mark, "-j", "RETURN"],
    );
    for (flag, id) in owner_ids(cfg) {
        b.versioned(
            lo4,
            lo6,
            Table::Mangle,
            OUTPUT,
            args!["!", "-d", VERSIONED, "-p", "tcp", "-o", "lo", "-m", "owner", flag, id,
                  "-j", "MARK", "--set-mark", OUTBOUND_MARK],
        );
    }
    b.append(
        Table::Mangle,
        OUTPUT,
        args!["-p", "tcp", "-m", "connmark", "--mark", mark, "-j", "CONNMARK", "--restore-mark"],
    );
    b.insert(
        Table::Mangle,
        ISTIO_INBOUND,
        1,
        args!["-p", "tcp", "-m", "mark", "--mark", mark, "-j", "RETURN"],
    );
    // Envoy's inbound-passthrough source, per family.
    for (v6, source) in [(false, "127.0.0.6/32"), (true, "::6/128")] {
        let rule = args!["-p", "tcp", "-s", source, "-i", "lo", "-j", "RETURN"];
        b.push(v6, Table::Mangle, ISTIO_INBOUND, Op::Insert(2), rule);
    }
    b.insert(
        Table::Mangle,
        ISTIO_INBOUND,
        3,
        args!["-p", "tcp", "-i", "lo", "-m", "mark", "!", "--mark", OUTBOUND_MARK, "-j", "RETURN"],
    );
}
