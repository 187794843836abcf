//! The nftables generator (upstream `tools/istio-nftables/pkg/capture/run.go` `Run`, spec nftables.md §2.2),
//! fed by the same [`CaptureConfig`] as the iptables generator. It records the operations in upstream's
//! emission order ([`Transaction`]: the knftables script, byte for byte, via [`mod@super::script`]) and the final
//! per-chain rule order (§2.3) that the netlink encoder appends ([`Transaction::ruleset`]).

use super::emit::*;
use super::model::*;
use crate::error::Result;
use crate::redirect::annotations::InterceptionMode;
use crate::redirect::capture::{CaptureConfig, OwnerGroups};
use crate::redirect::values::{Cidr, IpRanges};

pub use super::emit::Op;

/// Everything one run emits, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Transaction {
    pub ops: Vec<Op>,
}

impl Transaction {
    /// The final state (§2.3 "final order algorithm"): per chain, appends push and inserts land at N.
    pub fn ruleset(&self) -> Ruleset {
        let mut tables = Vec::new();
        for t in TABLES {
            let mut chains = Vec::new();
            for &c in t.chains() {
                let mut rules: Vec<Vec<Item>> = Vec::new();
                for op in self.ops.iter().filter(|o| o.table == t && o.chain == c) {
                    match op.insert {
                        Some(n) if n < rules.len() => rules.insert(n, op.items.clone()),
                        _ => rules.push(op.items.clone()),
                    }
                }
                if !rules.is_empty() {
                    chains.push(Chain { name: c, rules });
                }
            }
            if !chains.is_empty() {
                tables.push(TableSet { table: t, chains });
            }
        }
        Ruleset { tables }
    }
}

use super::generate_steps::{dns_rules, inbound, tproxy_rules};
use Item::{Counter, Return};
use Proto::{Tcp, Udp};
use Table::{Mangle, Nat};

/// The whole transaction for `cfg`, in upstream's emission order.
pub fn generate(cfg: &CaptureConfig) -> Result<Transaction> {
    let mut tx = Tx {
        ipv6: cfg.enable_ipv6,
        ops: Vec::new(),
    };
    let tproxy = cfg.mode == InterceptionMode::Tproxy;
    let lo4 = |neq: bool| cidr(false, neq, &cfg.host_ipv4_loopback_cidr);
    let no_servers = cfg.dns_servers_v4.is_empty() && cfg.dns_servers_v6.is_empty();
    let dns = cfg.redirect_dns && (cfg.capture_all_dns || !no_servers);
    let tun = cfg.inbound_tunnel_port;
    let l4 = || Item::L4(Tcp);

    // 1. Excluded interfaces.
    let tables: &[Table] = if tproxy { &[Nat, Mangle] } else { &[Nat] };
    for &t in tables {
        for x in &cfg.exclude_interfaces {
            tx.add(t, PREROUTING, vec![Item::Iif(x.clone()), Counter, Return]);
            tx.add(t, OUTPUT, vec![Item::Oif(x.clone()), Counter, Return]);
        }
    }
    // 2. Virtual interfaces.
    for x in &cfg.reroute_virtual_interfaces {
        tx.insert(
            Nat,
            PREROUTING,
            0,
            vec![Item::Iif(x.clone()), Counter, Return],
        );
    }
    // 3. Drop invalid (TCP only, unlike iptables).
    if cfg.drop_invalid {
        tx.add(
            Mangle,
            PREROUTING,
            vec![
                l4(),
                Item::CtState(CT_STATE_INVALID),
                Counter,
                Item::Jump(ISTIO_DROP),
            ],
        );
        tx.add(Mangle, ISTIO_DROP, vec![Counter, Item::Drop]);
    }
    // 4, 5.
    tx.add(
        Nat,
        ISTIO_INBOUND,
        vec![l4(), tcp_dport(false, tun), Counter, Return],
    );
    tx.add(
        Nat,
        ISTIO_REDIRECT,
        vec![l4(), Counter, Item::Redirect(cfg.proxy_port)],
    );
    let capture = cfg.inbound_capture_port;
    tx.add(
        Nat,
        ISTIO_IN_REDIRECT,
        vec![l4(), Counter, Item::Redirect(capture)],
    );
    // 6. Inbound.
    inbound(&mut tx, cfg, &lo4);
    // 7, 8.
    tx.add(Nat, OUTPUT, vec![Counter, Item::Jump(ISTIO_OUTPUT)]);
    for &p in &cfg.outbound_ports_exclude {
        tx.add(Nat, ISTIO_OUTPUT, vec![port(Tcp, true, p), Counter, Return]);
        tx.add(Nat, ISTIO_OUTPUT, vec![port(Udp, true, p), Counter, Return]);
    }
    // 9.
    let lo = || Item::Oif(crate::redirect::values::IfaceName::parse("lo").expect("valid name"));
    tx.add(
        Nat,
        ISTIO_OUTPUT,
        vec![lo(), passthrough4(true), Counter, Return],
    );
    tx.add6(Nat, ISTIO_OUTPUT, vec![lo(), six(true), Counter, Return]);
    // 10, 11.
    let loopback_included = match &cfg.outbound_ip_ranges_include {
        IpRanges::All => false,
        IpRanges::List(l) => l.iter().any(Cidr::is_loopback),
    };
    for (gid, ids) in [(false, &cfg.proxy_uids), (true, &cfg.proxy_gids)] {
        for &id in ids.iter() {
            let portm = if dns && !gid {
                Item::PortSet {
                    proto: Tcp,
                    neq: true,
                    ports: vec![53, tun],
                }
            } else {
                tcp_dport(true, tun)
            };
            let o = |neq| owner(gid, false, neq, Owner::Id(id));
            let jump = Item::Jump(ISTIO_IN_REDIRECT);
            let a4 = vec![
                lo(),
                l4(),
                lo4(true),
                portm.clone(),
                o(false),
                Counter,
                jump.clone(),
            ];
            tx.add(Nat, ISTIO_OUTPUT, a4);
            tx.add6(
                Nat,
                ISTIO_OUTPUT,
                vec![lo(), l4(), lo6(false, true), portm, o(false), Counter, jump],
            );
            if !loopback_included {
                let b = if dns {
                    vec![lo(), l4(), tcp_dport(true, 53), o(true), Counter, Return]
                } else {
                    vec![lo(), o(true), Counter, Return]
                };
                tx.add(Nat, ISTIO_OUTPUT, b);
            }
            tx.add(Nat, ISTIO_OUTPUT, vec![o(false), Counter, Return]);
        }
    }
    // 12. Owner groups.
    match &cfg.owner_groups {
        OwnerGroups::AllExcept(groups) => {
            for g in groups {
                let o = owner(true, false, false, Owner::Group(g.clone()));
                tx.add(Nat, ISTIO_OUTPUT, vec![o, Counter, Return]);
            }
        }
        OwnerGroups::Only(groups) => {
            let mut r: Vec<Item> = groups
                .iter()
                .map(|g| owner(true, false, true, Owner::Group(g.clone())))
                .collect();
            r.extend([Counter, Return]);
            tx.add(Nat, ISTIO_OUTPUT, r);
        }
    }
    // 13. DNS.
    if dns {
        dns_rules(&mut tx, cfg);
    }
    // 14, 15.
    tx.add(Nat, ISTIO_OUTPUT, vec![lo4(false), Counter, Return]);
    tx.add6(Nat, ISTIO_OUTPUT, vec![lo6(false, false), Counter, Return]);
    for c in cfg
        .outbound_ip_ranges_exclude
        .iter()
        .filter(|c| c.is_ipv4())
    {
        tx.add(
            Nat,
            ISTIO_OUTPUT,
            vec![cidr(false, false, c), Counter, Return],
        );
    }
    for c in cfg
        .outbound_ip_ranges_exclude
        .iter()
        .filter(|c| !c.is_ipv4())
    {
        tx.add6(
            Nat,
            ISTIO_OUTPUT,
            vec![cidr(false, false, c), Counter, Return],
        );
    }
    // 16.
    for &p in &cfg.outbound_ports_include {
        let r = vec![tcp_dport(false, p), Counter, Item::Jump(ISTIO_REDIRECT)];
        tx.add(Nat, ISTIO_OUTPUT, r);
    }
    // 17. Included ranges.
    let redirect = || Item::Jump(ISTIO_REDIRECT);
    match &cfg.outbound_ip_ranges_include {
        IpRanges::All => {
            tx.add(Nat, ISTIO_OUTPUT, vec![Counter, redirect()]);
            for x in &cfg.reroute_virtual_interfaces {
                tx.insert(
                    Nat,
                    PREROUTING,
                    0,
                    vec![Item::Iif(x.clone()), Counter, redirect()],
                );
            }
        }
        IpRanges::List(l) => {
            for v6 in [false, true] {
                if v6 && !cfg.enable_ipv6 {
                    continue;
                }
                for c in l.iter().filter(|c| c.is_ipv4() != v6) {
                    for x in &cfg.reroute_virtual_interfaces {
                        let r = vec![
                            Item::Iif(x.clone()),
                            cidr(false, false, c),
                            Counter,
                            redirect(),
                        ];
                        tx.insert(Nat, PREROUTING, 0, r);
                    }
                    tx.add(
                        Nat,
                        ISTIO_OUTPUT,
                        vec![cidr(false, false, c), Counter, redirect()],
                    );
                }
            }
        }
    }
    // 18. TPROXY marks.
    if tproxy {
        tproxy_rules(&mut tx, cfg, &lo4);
    }
    Ok(Transaction { ops: tx.ops })
}
