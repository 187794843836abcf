//! The vocabulary the nftables generator ([`super::generate`]) and its long steps ([`super::generate_steps`])
//! both speak: the transaction being built ([`Tx`]), small constructors for match items, and the constants of
//! upstream's nft/constants. A leaf: it imports only the model, so the two generator files do not import each
//! other.

use super::model::*;
use crate::redirect::values::{Cidr, IfaceName};
use ipnet::IpNet;
use std::net::IpAddr;

/// DNS agent port and the outbound mark (nft/constants).
pub(super) const DNS_PORT: u16 = 15053;
pub(super) const OUTBOUND_MARK: u32 = 1338;

/// One rule operation as emitted: append, or `insert … index N` (after §2.3's conversion).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Op {
    pub table: Table,
    pub chain: &'static str,
    pub insert: Option<usize>,
    pub items: Vec<Item>,
}

pub(super) struct Tx {
    pub(super) ipv6: bool,
    pub(super) ops: Vec<Op>,
}

impl Tx {
    pub(super) fn add(&mut self, t: Table, chain: &'static str, items: Vec<Item>) {
        self.ops.push(Op {
            table: t,
            chain,
            insert: None,
            items,
        });
    }
    pub(super) fn add6(&mut self, t: Table, chain: &'static str, items: Vec<Item>) {
        if self.ipv6 {
            self.add(t, chain, items);
        }
    }
    /// [`Tx::add6`] for an IPv6 rule, else [`Tx::add`].
    pub(super) fn add_in(&mut self, v6: bool, t: Table, chain: &'static str, items: Vec<Item>) {
        if v6 {
            self.add6(t, chain, items);
        } else {
            self.add(t, chain, items);
        }
    }
    /// `insert rule … index n`, turned into an append when the chain has no rule yet or `n` is past its end
    /// (fix #58175), counting this transaction's rules of that chain.
    pub(super) fn insert(&mut self, t: Table, chain: &'static str, n: usize, items: Vec<Item>) {
        let have = self
            .ops
            .iter()
            .filter(|o| o.table == t && o.chain == chain)
            .count();
        let insert = (have != 0 && n < have).then_some(n);
        self.ops.push(Op {
            table: t,
            chain,
            insert,
            items,
        });
    }
}

pub(super) fn addr(saddr: bool, neq: bool, text: String, net: IpNet) -> Item {
    Item::Addr {
        saddr,
        neq,
        text,
        net,
    }
}

pub(super) fn cidr(saddr: bool, neq: bool, c: &Cidr) -> Item {
    addr(saddr, neq, c.to_string(), c.net())
}

pub(super) fn host(saddr: bool, ip: IpAddr, text: String) -> Item {
    let bits = if ip.is_ipv4() { 32 } else { 128 };
    // A host prefix always fits its address family.
    let net = IpNet::new(ip, bits).unwrap_or_else(|_| IpNet::from(ip));
    addr(saddr, false, format!("{text}/{bits}"), net)
}

/// `oif "lo"`, and `iif "lo"`.
pub(super) fn lo() -> Item {
    Item::Oif(IfaceName::parse("lo").expect("valid name"))
}
pub(super) fn iif_lo() -> Item {
    Item::Iif(IfaceName::parse("lo").expect("valid name"))
}

pub(super) fn lo6(saddr: bool, neq: bool) -> Item {
    let ip: IpAddr = IpAddr::V6(std::net::Ipv6Addr::LOCALHOST);
    addr(saddr, neq, "::1/128".into(), IpNet::from(ip))
}

pub(super) fn six(saddr: bool) -> Item {
    let ip = IpAddr::V6(std::net::Ipv6Addr::new(0, 0, 0, 0, 0, 0, 0, 6));
    addr(saddr, false, "::6/128".into(), IpNet::from(ip))
}

pub(super) fn passthrough4(saddr: bool) -> Item {
    let ip = IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 0, 6));
    addr(saddr, false, "127.0.0.6/32".into(), IpNet::from(ip))
}

pub(super) fn tcp_dport(neq: bool, port: u16) -> Item {
    Item::Port {
        proto: Proto::Tcp,
        dport: true,
        neq,
        port,
    }
}

pub(super) fn port(proto: Proto, dport: bool, port: u16) -> Item {
    Item::Port {
        proto,
        dport,
        neq: false,
        port,
    }
}

pub(super) fn owner(gid: bool, meta: bool, neq: bool, id: Owner) -> Item {
    Item::Owner { gid, meta, neq, id }
}
