//! The kernel's netfilter vocabulary, shared by the three readers of a pod's rules: [`crate::iptables`]
//! (our backend's `iptables-save` dumps), [`crate::xtables`] (legacy x_tables tables read with getsockopt)
//! and [`crate::nftables`] (nf_tables over netlink). IP and protocol families, hook numbers and verdicts
//! as the kernel numbers them, the x_tables built-in chains and which chains are ours, where our redirect
//! runs; [`bypass`] is the one walk for what the kernel runs before it and can take traffic past it, and
//! the one text every reader reports that in (pure).

pub mod bypass;
pub mod owner;

/// What programming a pod's rules did (per family with iptables), for the decision log; both backends'.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Applied,
    AlreadyInPlace,
    Converged,
}

/// An IP family: which `iptables`/`ip6tables` tool set and which legacy tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    V4,
    V6,
}

impl Family {
    pub fn name(self) -> &'static str {
        match self {
            Family::V4 => "IPv4",
            Family::V6 => "IPv6",
        }
    }

    /// Its protocol family (`NFPROTO_IPV4`, `NFPROTO_IPV6`).
    pub fn nfproto(self) -> u8 {
        match self {
            Family::V4 => NFPROTO_IPV4,
            Family::V6 => NFPROTO_IPV6,
        }
    }
}

/// Both families (nftables mode's inet tables redirect both).
pub const FAMILIES: [Family; 2] = [Family::V4, Family::V6];

/// Protocol families (`NFPROTO_*`, `linux/netfilter.h`).
pub const NFPROTO_UNSPEC: u8 = 0;
pub const NFPROTO_INET: u8 = 1;
pub const NFPROTO_IPV4: u8 = 2;
pub const NFPROTO_ARP: u8 = 3;
pub const NFPROTO_NETDEV: u8 = 5;
pub const NFPROTO_BRIDGE: u8 = 7;
pub const NFPROTO_IPV6: u8 = 10;

/// Hook numbers of the ip, ip6 and inet families (`NF_INET_*`, in [`hook_name`]'s order) and of netdev.
pub const NF_INET_PRE_ROUTING: u32 = 0;
pub const NF_INET_LOCAL_IN: u32 = 1;
pub const NF_INET_POST_ROUTING: u32 = 4;
pub const NF_INET_LOCAL_OUT: u32 = 3;
pub const NF_INET_INGRESS: u32 = 5;
pub const NF_NETDEV_INGRESS: u32 = 0;
pub const NF_NETDEV_EGRESS: u32 = 1;

/// Verdicts (`NF_*`); x_tables stores a standard target's as `-verdict - 1` (`RETURN` is `NF_REPEAT`'s).
pub const NF_DROP: i32 = 0;
pub const NF_ACCEPT: i32 = 1;
pub const NF_QUEUE: i32 = 3;
pub const NF_REPEAT: i32 = 4;

/// The hooks our redirect runs at, prerouting (inbound) and output (outbound), with their x_tables chains.
pub const OUR_HOOKS: [(u32, &str); 2] = [
    (NF_INET_PRE_ROUTING, "PREROUTING"),
    (NF_INET_LOCAL_OUT, "OUTPUT"),
];

/// The x_tables built-in chains, by hook number; never declared with `-N`, never deleted.
pub const BUILTIN_CHAINS: [&str; 5] = ["PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"];

pub fn is_builtin(chain: &str) -> bool {
    BUILTIN_CHAINS.contains(&chain)
}

/// Our x_tables chains are named `ISTIO_*` (upstream's names), whichever backend holds them.
pub fn is_our_chain(chain: &str) -> bool {
    chain.starts_with("ISTIO_")
}

pub fn family_name(f: u8) -> &'static str {
    match f {
        NFPROTO_INET => "inet",
        NFPROTO_IPV4 => "ip",
        NFPROTO_IPV6 => "ip6",
        NFPROTO_ARP => "arp",
        NFPROTO_NETDEV => "netdev",
        NFPROTO_BRIDGE => "bridge",
        _ => "?",
    }
}

/// The name nft gives hook `hooknum` of `family`.
pub fn hook_name(family: u8, hooknum: u32) -> &'static str {
    let names: &[&str] = match family {
        NFPROTO_NETDEV => &["ingress", "egress"],
        _ => &[
            "prerouting",
            "input",
            "forward",
            "output",
            "postrouting",
            "ingress",
        ],
    };
    names.get(hooknum as usize).copied().unwrap_or("other")
}

/// One of our base chains (or, in iptables mode, our nat jumps), where the kernel runs it, and how to
/// name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OurHook {
    pub hooknum: u32,
    pub priority: i32,
    pub label: String,
}
