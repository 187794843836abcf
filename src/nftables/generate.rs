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

/// The whole transaction for `cfg`, in upstream's emission order (the step numbers of §2.2).
pub fn generate(cfg: &CaptureConfig) -> Result<Transaction> {
    let mut tx = Tx {
        ipv6: cfg.enable_ipv6,
        ops: Vec::new(),
    };
    let lo4 = |neq: bool| cidr(false, neq, &cfg.host_ipv4_loopback_cidr);
    bypasses(&mut tx, cfg);
    redirect_chains(&mut tx, cfg);
    // 6. Inbound.
    inbound(&mut tx, cfg, &lo4);
    outbound_owners(&mut tx, cfg, &lo4);
    // 13. DNS.
    if cfg.dns_captured() {
        dns_rules(&mut tx, cfg);
    }
    outbound_ranges(&mut tx, cfg, &lo4);
    // 18. TPROXY marks.
    if cfg.mode == InterceptionMode::Tproxy {
        tproxy_rules(&mut tx, cfg, &lo4);
    }
    Ok(Transaction { ops: tx.ops })
}

/// Steps 1 to 3: excluded and virtual interfaces bypass the capture, conntrack-invalid TCP is dropped.
fn bypasses(tx: &mut Tx, cfg: &CaptureConfig) {
    // 1. Excluded interfaces.
    let tables: &[Table] = if cfg.mode == InterceptionMode::Tproxy {
        &[Nat, Mangle]
    } else {
        &[Nat]
    };
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
                Item::L4(Tcp),
                Item::CtState(CT_STATE_INVALID),
                Counter,
                Item::Jump(ISTIO_DROP),
            ],
        );
        tx.add(Mangle, ISTIO_DROP, vec![Counter, Item::Drop]);
    }
}

/// Steps 4 and 5: the tunnel port returns from inbound capture; the two redirect chains.
fn redirect_chains(tx: &mut Tx, cfg: &CaptureConfig) {
    let l4 = || Item::L4(Tcp);
    let tun = cfg.inbound_tunnel_port;
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
}

/// Steps 7 to 12: the outbound entry, then the returns for excluded ports, the inbound passthrough
/// source, the proxy's uids and gids (step 10, 11: [`proxy_id`]) and the owner groups.
fn outbound_owners(tx: &mut Tx, cfg: &CaptureConfig, lo4: &dyn Fn(bool) -> Item) {
    // 7, 8.
    tx.add(Nat, OUTPUT, vec![Counter, Item::Jump(ISTIO_OUTPUT)]);
    for &p in &cfg.outbound_ports_exclude {
        tx.add(Nat, ISTIO_OUTPUT, vec![port(Tcp, true, p), Counter, Return]);
        tx.add(Nat, ISTIO_OUTPUT, vec![port(Udp, true, p), Counter, Return]);
    }
    // 9.
    tx.add(
        Nat,
        ISTIO_OUTPUT,
        vec![lo(), passthrough4(true), Counter, Return],
    );
    tx.add6(Nat, ISTIO_OUTPUT, vec![lo(), six(true), Counter, Return]);
    // 10, 11.
    for (gid, ids) in [(false, &cfg.proxy_uids), (true, &cfg.proxy_gids)] {
        for &id in ids.iter() {
            proxy_id(tx, cfg, (gid, id), lo4);
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
}

/// Steps 10 and 11 for one proxy uid (`gid` false) or gid: the proxy's own traffic to a local address
/// goes to inbound capture, other local traffic of other owners returns, and the rest of its own returns.
fn proxy_id(tx: &mut Tx, cfg: &CaptureConfig, (gid, id): (bool, u32), lo4: &dyn Fn(bool) -> Item) {
    let tun = cfg.inbound_tunnel_port;
    let l4 = || Item::L4(Tcp);
    let loopback_included = match &cfg.outbound_ip_ranges_include {
        IpRanges::All => false,
        IpRanges::List(l) => l.iter().any(Cidr::is_loopback),
    };
    let dns = cfg.dns_captured();
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

/// Steps 14 to 17: loopback and the excluded ranges return, then the included ports and ranges are
/// redirected (the ranges also from the virtual interfaces).
fn outbound_ranges(tx: &mut Tx, cfg: &CaptureConfig, lo4: &dyn Fn(bool) -> Item) {
    // 14, 15.
    tx.add(Nat, ISTIO_OUTPUT, vec![lo4(false), Counter, Return]);
    tx.add6(Nat, ISTIO_OUTPUT, vec![lo6(false, false), Counter, Return]);
    for v6 in [false, true] {
        let excluded = cfg.outbound_ip_ranges_exclude.iter();
        for c in excluded.filter(|c| c.is_ipv4() != v6) {
            let r = vec![cidr(false, false, c), Counter, Return];
            tx.add_in(v6, Nat, ISTIO_OUTPUT, r);
        }
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
}
