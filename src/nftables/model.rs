//! The nftables rule set as data (spec nftables.md §2): tables, chains and rules made of typed items.
//! Every item renders to the knftables text the goldens contain ([`Item`]'s `Display`) and lowers to the
//! kernel expressions of §4.4 ([`super::expr`]). Nothing here is free text: names are constants or
//! validated values, so neither rendering can carry injected text.

use crate::netfilter::{NF_INET_LOCAL_OUT, NF_INET_PRE_ROUTING};
use crate::redirect::values::{Group, IfaceName};
use ipnet::IpNet;
use std::fmt;

/// The three Istio tables (family `inet`), in transaction order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Table {
    Nat,
    Mangle,
    Raw,
}

pub const TABLES: [Table; 3] = [Table::Nat, Table::Mangle, Table::Raw];

impl Table {
    pub fn name(self) -> &'static str {
        match self {
            Table::Nat => "istio-proxy-nat",
            Table::Mangle => "istio-proxy-mangle",
            Table::Raw => "istio-proxy-raw",
        }
    }

    pub fn from_name(n: &str) -> Option<Table> {
        TABLES.into_iter().find(|t| t.name() == n)
    }

    /// The table's chains in creation order (§2.1); the first two are the base chains.
    pub fn chains(self) -> &'static [&'static str] {
        match self {
            Table::Nat => &[
                PREROUTING,
                OUTPUT,
                ISTIO_INBOUND,
                ISTIO_REDIRECT,
                ISTIO_IN_REDIRECT,
                ISTIO_OUTPUT,
                ISTIO_OUTPUT_DNS,
            ],
            Table::Mangle => &[
                PREROUTING,
                OUTPUT,
                ISTIO_DIVERT,
                ISTIO_TPROXY,
                ISTIO_INBOUND,
                ISTIO_DROP,
            ],
            Table::Raw => &[PREROUTING, OUTPUT, ISTIO_INBOUND, ISTIO_OUTPUT_DNS],
        }
    }

    /// The base-chain definition of `chain` in this table, if it is one.
    pub fn hook(self, chain: &str) -> Option<Hook> {
        let (kind, prio) = match (self, chain) {
            (Table::Nat, PREROUTING | OUTPUT) => ("nat", -100),
            (Table::Mangle, PREROUTING) => ("filter", -150),
            (Table::Mangle, OUTPUT) => ("route", -150),
            (Table::Raw, PREROUTING | OUTPUT) => ("filter", -300),
            _ => return None,
        };
        let (hook, hooknum) = if chain == PREROUTING {
            ("prerouting", NF_INET_PRE_ROUTING)
        } else {
            ("output", NF_INET_LOCAL_OUT)
        };
        Some(Hook {
            kind,
            hook,
            hooknum,
            priority: prio,
        })
    }
}

pub const PREROUTING: &str = "prerouting";
pub const OUTPUT: &str = "output";
pub const ISTIO_INBOUND: &str = "istio-inbound";
pub const ISTIO_REDIRECT: &str = "istio-redirect";
pub const ISTIO_IN_REDIRECT: &str = "istio-in-redirect";
pub const ISTIO_OUTPUT: &str = "istio-output";
pub const ISTIO_OUTPUT_DNS: &str = "istio-output-dns";
pub const ISTIO_DIVERT: &str = "istio-divert";
pub const ISTIO_TPROXY: &str = "istio-tproxy";
pub const ISTIO_DROP: &str = "istio-drop";

/// A base chain's definition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hook {
    /// Chain type: `nat`, `filter` or `route`.
    pub kind: &'static str,
    pub hook: &'static str,
    pub hooknum: u32,
    pub priority: i32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proto {
    Tcp,
    Udp,
}

impl Proto {
    pub fn number(self) -> u8 {
        match self {
            Proto::Tcp => 6,
            Proto::Udp => 17,
        }
    }
    fn name(self) -> &'static str {
        match self {
            Proto::Tcp => "tcp",
            Proto::Udp => "udp",
        }
    }
}

/// A socket owner id: a number, or a group name resolved on the host when encoding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owner {
    Id(u32),
    Group(Group),
}

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Owner::Id(n) => write!(f, "{n}"),
            Owner::Group(g) => write!(f, "{g}"),
        }
    }
}

/// `ct state` bits (K nf_conntrack_common.h).
pub const CT_STATE_INVALID: u32 = 1;
pub const CT_STATE_ESTABLISHED: u32 = 2;
pub const CT_STATE_RELATED: u32 = 4;

/// One match or statement of a rule, in text order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    /// `meta l4proto tcp`
    L4(Proto),
    /// `iifname X` / `oifname X`
    Iif(IfaceName),
    Oif(IfaceName),
    /// `ip|ip6 saddr|daddr [!=] text`; `net` is the prefix the text stands for.
    Addr {
        saddr: bool,
        neq: bool,
        text: String,
        net: IpNet,
    },
    /// `tcp|udp dport|sport [!=] P`
    Port {
        proto: Proto,
        dport: bool,
        neq: bool,
        port: u16,
    },
    /// `tcp dport != { 53, 15008 }` (an anonymous set).
    PortSet {
        proto: Proto,
        neq: bool,
        ports: Vec<u16>,
    },
    /// `[meta ]skuid|skgid [!=] X`
    Owner {
        gid: bool,
        meta: bool,
        neq: bool,
        id: Owner,
    },
    /// `mark [!=] M`
    Mark {
        neq: bool,
        value: u32,
    },
    /// `ct state invalid` / `ct state related,established` (bit mask)
    CtState(u32),
    /// `ct mark M`
    CtMark(u32),
    Counter,
    Return,
    Accept,
    Drop,
    Jump(&'static str),
    /// `redirect to :P`
    Redirect(u16),
    /// `tproxy ip|ip6 to :P`
    Tproxy {
        v6: bool,
        port: u16,
    },
    /// `meta mark set M`
    SetMark(u32),
    /// `meta mark set ct mark`
    SetMarkFromCt,
    /// `ct mark set mark`
    SetCtMarkFromMark,
    /// `ct zone set Z`
    SetCtZone(u16),
}

fn ne(neq: bool) -> &'static str {
    if neq {
        "!= "
    } else {
        ""
    }
}

impl fmt::Display for Item {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Item::L4(p) => write!(f, "meta l4proto {}", p.name()),
            Item::Iif(x) => write!(f, "iifname {x}"),
            Item::Oif(x) => write!(f, "oifname {x}"),
            Item::Addr {
                saddr,
                neq,
                text,
                net,
            } => {
                let fam = if matches!(net, IpNet::V4(_)) {
                    "ip"
                } else {
                    "ip6"
                };
                let dir = if *saddr { "saddr" } else { "daddr" };
                write!(f, "{fam} {dir} {}{text}", ne(*neq))
            }
            Item::Port {
                proto,
                dport,
                neq,
                port,
            } => {
                let dir = if *dport { "dport" } else { "sport" };
                write!(f, "{} {dir} {}{port}", proto.name(), ne(*neq))
            }
            Item::PortSet { proto, neq, ports } => {
                let l: Vec<String> = ports.iter().map(|p| p.to_string()).collect();
                write!(
                    f,
                    "{} dport {}{{ {} }}",
                    proto.name(),
                    ne(*neq),
                    l.join(", ")
                )
            }
            Item::Owner { gid, meta, neq, id } => {
                let m = if *meta { "meta " } else { "" };
                let k = if *gid { "skgid" } else { "skuid" };
                write!(f, "{m}{k} {}{id}", ne(*neq))
            }
            Item::Mark { neq, value } => write!(f, "mark {}{value}", ne(*neq)),
            Item::CtState(mask) => {
                let mut names = Vec::new();
                if mask & CT_STATE_INVALID != 0 {
                    names.push("invalid");
                }
                if mask & CT_STATE_RELATED != 0 {
                    names.push("related");
                }
                if mask & CT_STATE_ESTABLISHED != 0 {
                    names.push("established");
                }
                write!(f, "ct state {}", names.join(","))
            }
            Item::CtMark(m) => write!(f, "ct mark {m}"),
            Item::Counter => f.write_str("counter"),
            Item::Return => f.write_str("return"),
            Item::Accept => f.write_str("accept"),
            Item::Drop => f.write_str("drop"),
            Item::Jump(c) => write!(f, "jump {c}"),
            Item::Redirect(p) => write!(f, "redirect to :{p}"),
            Item::Tproxy { v6, port } => {
                write!(f, "tproxy {} to :{port}", if *v6 { "ip6" } else { "ip" })
            }
            Item::SetMark(m) => write!(f, "meta mark set {m}"),
            Item::SetMarkFromCt => f.write_str("meta mark set ct mark"),
            Item::SetCtMarkFromMark => f.write_str("ct mark set mark"),
            Item::SetCtZone(z) => write!(f, "ct zone set {z}"),
        }
    }
}

/// A rule's items joined by spaces (knftables `Concat`).
pub fn rule_text(items: &[Item]) -> String {
    let v: Vec<String> = items.iter().map(|i| i.to_string()).collect();
    v.join(" ")
}

/// One chain's final rule list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chain {
    pub name: &'static str,
    pub rules: Vec<Vec<Item>>,
}

/// One table: the chains that have rules, in creation order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableSet {
    pub table: Table,
    pub chains: Vec<Chain>,
}

/// The desired state: the tables that have rules, nat first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ruleset {
    pub tables: Vec<TableSet>,
}
