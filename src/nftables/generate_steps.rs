//! Generation steps of [`super::generate::generate`] long enough to stand alone (spec nftables.md §2.2):
//! inbound capture (step 6), DNS (step 13) and the TPROXY marks (step 18).

use super::emit::*;
use super::model::*;
use crate::redirect::annotations::InterceptionMode;
use crate::redirect::capture::CaptureConfig;
use crate::redirect::values::Ports;
use std::net::IpAddr;
use Item::{Counter, Return};
use Proto::{Tcp, Udp};
use Table::{Mangle, Nat, Raw};

pub(super) fn inbound(tx: &mut Tx, cfg: &CaptureConfig, lo4: &dyn Fn(bool) -> Item) {
    if cfg.inbound_ports_include.is_empty() {
        return;
    }
    let l4 = || Item::L4(Tcp);
    let capture = cfg.inbound_capture_port;
    let (table, target) = if cfg.mode == InterceptionMode::Tproxy {
        let mark = cfg.tproxy_mark;
        tx.add(Mangle, ISTIO_DIVERT, vec![Counter, Item::SetMark(mark)]);
        tx.add(Mangle, ISTIO_DIVERT, vec![Counter, Item::Accept]);
        let tp = |v6: bool, a: Item| {
            vec![
                l4(),
                a,
                Item::Tproxy { v6, port: capture },
                Item::SetMark(mark),
                Counter,
                Item::Accept,
            ]
        };
        tx.add(Mangle, ISTIO_TPROXY, tp(false, lo4(true)));
        tx.add6(Mangle, ISTIO_TPROXY, tp(true, lo6(false, true)));
        (Mangle, None)
    } else {
        (Nat, Some(ISTIO_IN_REDIRECT))
    };
    tx.add(
        table,
        PREROUTING,
        vec![l4(), Counter, Item::Jump(ISTIO_INBOUND)],
    );
    let dports: Vec<Option<u16>> = match &cfg.inbound_ports_include {
        Ports::All => {
            for &p in &cfg.inbound_ports_exclude {
                tx.add(
                    table,
                    ISTIO_INBOUND,
                    vec![l4(), tcp_dport(false, p), Counter, Return],
                );
            }
            vec![None]
        }
        Ports::List(ports) => ports.iter().map(|&p| Some(p)).collect(),
    };
    for d in dports {
        // `head`, then the port match of this capture rule (none with `*`), then the jump `to`.
        let rule = |mut head: Vec<Item>, to: &'static str| {
            head.extend(d.map(|p| tcp_dport(false, p)));
            head.extend([Counter, Item::Jump(to)]);
            head
        };
        match target {
            Some(t) => tx.add(Nat, ISTIO_INBOUND, rule(vec![l4()], t)),
            None => {
                let est = Item::CtState(CT_STATE_RELATED | CT_STATE_ESTABLISHED);
                tx.add(Mangle, ISTIO_INBOUND, rule(vec![l4(), est], ISTIO_DIVERT));
                tx.add(Mangle, ISTIO_INBOUND, rule(vec![l4()], ISTIO_TPROXY));
            }
        }
    }
}

pub(super) fn dns_rules(tx: &mut Tx, cfg: &CaptureConfig) {
    let all = cfg.capture_all_dns;
    let redir = Item::Redirect(DNS_PORT);
    tx.add(Raw, OUTPUT, vec![Counter, Item::Jump(ISTIO_OUTPUT_DNS)]);
    tx.add(
        Nat,
        ISTIO_OUTPUT,
        vec![Counter, Item::Jump(ISTIO_OUTPUT_DNS)],
    );
    // (IPv6?, servers) for the per-server rules.
    let per_family = [(false, &cfg.dns_servers_v4), (true, &cfg.dns_servers_v6)];
    if all {
        let r = vec![Item::L4(Tcp), port(Tcp, true, 53), Counter, redir.clone()];
        tx.add(Nat, ISTIO_OUTPUT_DNS, r);
        tx.add(
            Nat,
            ISTIO_OUTPUT_DNS,
            vec![port(Udp, true, 53), Counter, redir],
        );
    } else {
        for proto in [Tcp, Udp] {
            for (v6, servers) in per_family {
                if v6 && !cfg.enable_ipv6 {
                    continue;
                }
                for s in servers {
                    let r = vec![
                        host(false, s.addr, s.to_string()),
                        port(proto, true, 53),
                        Counter,
                        redir.clone(),
                    ];
                    tx.add(Nat, ISTIO_OUTPUT_DNS, r);
                }
            }
        }
    }
    for (gid, ids) in [(false, &cfg.proxy_uids), (true, &cfg.proxy_gids)] {
        for &id in ids.iter() {
            let o = owner(gid, true, false, Owner::Id(id));
            let r = vec![port(Udp, true, 53), o.clone(), Counter, Item::SetCtZone(1)];
            tx.add(Raw, ISTIO_OUTPUT_DNS, r);
            let r = vec![port(Udp, false, DNS_PORT), o, Counter, Item::SetCtZone(2)];
            tx.add(Raw, ISTIO_OUTPUT_DNS, r);
        }
    }
    if all {
        tx.add(Raw, PREROUTING, vec![Counter, Item::Jump(ISTIO_INBOUND)]);
        dns_zones(tx, None);
        return;
    }
    if per_family.iter().any(|(_, s)| !s.is_empty()) {
        tx.add(Raw, PREROUTING, vec![Counter, Item::Jump(ISTIO_INBOUND)]);
    }
    for (v6, servers) in per_family {
        if v6 && !cfg.enable_ipv6 {
            continue;
        }
        for s in servers {
            dns_zones(tx, Some((s.addr, s.to_string())));
        }
    }
}

/// DNS to port 53 (of `server` only, when given) into conntrack zone 2, its answers into zone 1.
fn dns_zones(tx: &mut Tx, server: Option<(IpAddr, String)>) {
    for (out, chain, zone) in [(true, ISTIO_OUTPUT_DNS, 2), (false, ISTIO_INBOUND, 1)] {
        let mut r = vec![port(Udp, out, 53)];
        r.extend(server.clone().map(|(ip, text)| host(!out, ip, text)));
        r.extend([Counter, Item::SetCtZone(zone)]);
        tx.add(Raw, chain, r);
    }
}

pub(super) fn tproxy_rules(tx: &mut Tx, cfg: &CaptureConfig, lo4: &dyn Fn(bool) -> Item) {
    let mark = cfg.tproxy_mark;
    let l4 = || Item::L4(Tcp);
    let m = |neq, value| Item::Mark { neq, value };
    tx.add(
        Mangle,
        PREROUTING,
        vec![l4(), m(false, mark), Counter, Item::SetCtMarkFromMark],
    );
    tx.add(
        Mangle,
        OUTPUT,
        vec![lo(), l4(), m(false, mark), Counter, Return],
    );
    for (gid, ids) in [(false, &cfg.proxy_uids), (true, &cfg.proxy_gids)] {
        for &id in ids.iter() {
            for v6 in [false, true] {
                let a = if v6 { lo6(false, true) } else { lo4(true) };
                let o = owner(gid, false, false, Owner::Id(id));
                let r = vec![lo(), l4(), a, o, Counter, Item::SetMark(OUTBOUND_MARK)];
                tx.add_in(v6, Mangle, OUTPUT, r);
            }
        }
    }
    tx.add(
        Mangle,
        OUTPUT,
        vec![l4(), Item::CtMark(mark), Counter, Item::SetMarkFromCt],
    );
    tx.insert(
        Mangle,
        ISTIO_INBOUND,
        0,
        vec![l4(), m(false, mark), Counter, Return],
    );
    tx.insert(
        Mangle,
        ISTIO_INBOUND,
        1,
        vec![iif_lo(), l4(), passthrough4(true), Counter, Return],
    );
    if tx.ipv6 {
        tx.insert(
            Mangle,
            ISTIO_INBOUND,
            1,
            vec![iif_lo(), l4(), six(true), Counter, Return],
        );
    }
    let r = vec![iif_lo(), l4(), m(true, OUTBOUND_MARK), Counter, Return];
    tx.insert(Mangle, ISTIO_INBOUND, 2, r);
}
