//! The rule builder shared by the generation steps: per-family rule lists (IPv6 only when enabled),
//! appends, inserts and "versioned" rules whose address differs per family (upstream `IptablesRuleBuilder`).

use super::capture::CaptureConfig;
use super::restore::{Op, Rule, Table};
use super::values::{Cidr, IpRanges};

// The chains and constants the generation steps (`rules`, `rules_steps`, `rules_dns`) write rules with.
pub const ISTIO_INBOUND: &str = "ISTIO_INBOUND";
pub const ISTIO_REDIRECT: &str = "ISTIO_REDIRECT";
pub const ISTIO_IN_REDIRECT: &str = "ISTIO_IN_REDIRECT";
pub const ISTIO_OUTPUT: &str = "ISTIO_OUTPUT";
pub const ISTIO_OUTPUT_DNS: &str = "ISTIO_OUTPUT_DNS";
pub const ISTIO_DIVERT: &str = "ISTIO_DIVERT";
pub const ISTIO_TPROXY: &str = "ISTIO_TPROXY";
pub const ISTIO_DROP: &str = "ISTIO_DROP";
pub(crate) const PREROUTING: &str = "PREROUTING";
pub(crate) const OUTPUT: &str = "OUTPUT";

/// The agent's DNS listener.
pub(crate) const DNS_PORT: &str = "15053";
/// Mark Envoy's outbound-to-inbound loopback packets carry in TPROXY mode.
pub(crate) const OUTBOUND_MARK: &str = "1338";

/// The rules per family.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuleSet {
    pub v4: Vec<Rule>,
    /// Empty unless IPv6 is enabled.
    pub v6: Vec<Rule>,
}

/// Builds a parameter list; every element is rendered with `Display` (constants or typed values only).
macro_rules! args {
    ($($x:expr),* $(,)?) => { vec![$(($x).to_string()),*] };
}
pub(crate) use args;

/// Stands for the family-specific address in a versioned rule.
pub(crate) const VERSIONED: &str = "\u{0}family-specific\u{0}";

pub(crate) struct Builder {
    pub ipv6: bool,
    pub set: RuleSet,
}

impl Builder {
    pub fn push(
        &mut self,
        v6: bool,
        table: Table,
        chain: &'static str,
        op: Op,
        params: Vec<String>,
    ) {
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
    pub fn append(&mut self, table: Table, chain: &'static str, params: Vec<String>) {
        self.push(false, table, chain, Op::Append, params.clone());
        self.push(true, table, chain, Op::Append, params);
    }
    pub fn insert(&mut self, table: Table, chain: &'static str, pos: u32, params: Vec<String>) {
        self.push(false, table, chain, Op::Insert(pos), params.clone());
        self.push(true, table, chain, Op::Insert(pos), params);
    }
    /// A rule for both families with [`VERSIONED`] replaced by `v4` / `v6`.
    pub fn versioned(
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

/// The proxy's ids with their `-m owner` flag: every uid (`--uid-owner`), then every gid (`--gid-owner`).
pub(crate) fn owner_ids(cfg: &CaptureConfig) -> impl Iterator<Item = (&'static str, u32)> + '_ {
    let uids = cfg.proxy_uids.iter().map(|id| ("--uid-owner", *id));
    uids.chain(cfg.proxy_gids.iter().map(|id| ("--gid-owner", *id)))
}

/// Include ranges of one family (upstream `NetworkRange`).
pub(crate) struct Range {
    pub wildcard: bool,
    pub cidrs: Vec<Cidr>,
    pub has_loopback: bool,
}

pub(crate) fn split_family(r: &IpRanges) -> (Range, Range) {
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
