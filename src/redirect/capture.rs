//! The istio-iptables configuration (upstream `config.Config`, the conformance `capture/config.json`
//! schema), typed. Built either from a pod's [`Redirect`] plus the plugin process environment (the ADD
//! path) or from a conformance/`explain --capture` JSON file ([`CaptureConfig::from_json`], in
//! `capture_json.rs`).

use super::annotations::{InterceptionMode, Redirect};
use super::values::{split_list, unmap, Cidr, Group, IfaceName, IpRanges, IpText, Ports};
use crate::error::{Error, Result};
use std::net::IpAddr;

/// Envoy's outbound listener.
pub const PROXY_PORT: u16 = 15001;
/// Envoy's inbound listener.
pub const INBOUND_CAPTURE_PORT: u16 = 15006;
/// HBONE tunnel port, never captured.
pub const INBOUND_TUNNEL_PORT: u16 = 15008;
/// TPROXY packet mark and the policy-routing table it selects.
pub const TPROXY_MARK: u32 = 1337;
pub const TPROXY_ROUTE_TABLE: u32 = 133;

/// Node environment variables still consulted on the ADD path (upstream `FillConfigFromEnvironment`).
pub const ENV_OWNER_GROUPS: &str = "ISTIO_OUTBOUND_OWNER_GROUPS";
pub const ENV_OWNER_GROUPS_EXCLUDE: &str = "ISTIO_OUTBOUND_OWNER_GROUPS_EXCLUDE";
pub const ENV_LOOPBACK_CIDR: &str = "ISTIO_OUTBOUND_IPV4_LOOPBACK_CIDR";
/// Every node environment variable [`CaptureConfig::from_redirect`] reads (what `plan::NodeEnv` takes).
pub const ENV_VARS: [&str; 3] = [
    ENV_OWNER_GROUPS,
    ENV_OWNER_GROUPS_EXCLUDE,
    ENV_LOOPBACK_CIDR,
];
pub const DEFAULT_LOOPBACK_CIDR: &str = "127.0.0.1/32";

/// Which owner groups have their outbound traffic captured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OwnerGroups {
    /// Include `*`: every group except these.
    AllExcept(Vec<Group>),
    /// Only these groups (an empty list captures nothing: upstream emits an unconditional RETURN).
    Only(Vec<Group>),
}

impl OwnerGroups {
    /// Upstream `ParseInterceptFilter(include, exclude)`: the exclude list only matters with include `*`.
    pub fn parse(include: &str, exclude: &str) -> Result<OwnerGroups, String> {
        if include == "*" {
            Ok(OwnerGroups::AllExcept(
                split_list(exclude, Group::parse).map_err(|r| format!("exclude list: {r}"))?,
            ))
        } else {
            Ok(OwnerGroups::Only(
                split_list(include, Group::parse).map_err(|r| format!("include list: {r}"))?,
            ))
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaptureConfig {
    pub proxy_port: u16,
    pub inbound_capture_port: u16,
    pub inbound_tunnel_port: u16,
    pub proxy_uids: Vec<u32>,
    pub proxy_gids: Vec<u32>,
    pub mode: InterceptionMode,
    pub tproxy_mark: u32,
    pub tproxy_route_table: u32,
    pub inbound_ports_include: Ports,
    pub inbound_ports_exclude: Vec<u16>,
    pub owner_groups: OwnerGroups,
    pub outbound_ports_include: Vec<u16>,
    pub outbound_ports_exclude: Vec<u16>,
    pub outbound_ip_ranges_include: IpRanges,
    pub outbound_ip_ranges_exclude: Vec<Cidr>,
    pub reroute_virtual_interfaces: Vec<IfaceName>,
    pub exclude_interfaces: Vec<IfaceName>,
    pub redirect_dns: bool,
    pub drop_invalid: bool,
    pub capture_all_dns: bool,
    pub enable_ipv6: bool,
    pub dns_servers_v4: Vec<IpText>,
    pub dns_servers_v6: Vec<IpText>,
    pub host_ipv4_loopback_cidr: Cidr,
}

/// TPROXY needs policy routing next to the rules: `ip rule add fwmark <mark> lookup <table>` and
/// `ip route add local default dev lo table <table>`, for IPv4 and, when enabled, IPv6.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TproxyRoute {
    pub mark: u32,
    pub table: u32,
    pub ipv6: bool,
}

/// Parses the node's IPv4 loopback range: an IPv4 loopback address with a /8 to /32 mask (upstream
/// `ValidateIPv4LoopbackCidr`, which its CNI path skips). The range is RETURNed from ISTIO_OUTPUT, so a
/// shorter mask (`127.0.0.1/1`) would let traffic to ordinary addresses bypass the proxy.
pub fn parse_loopback_cidr(s: &str) -> Result<Cidr, String> {
    let c = Cidr::parse(s)?;
    if !c.is_ipv4() || !c.is_loopback() || c.net().prefix_len() < 8 {
        return Err(format!(
            "{s:?} is not an IPv4 loopback range with a /8 to /32 mask"
        ));
    }
    Ok(c)
}

impl CaptureConfig {
    /// The ADD path: the pod's redirect, the plugin process environment (`env`), and whether the pod's
    /// netns has IPv6 ([`enable_ipv6`]).
    pub fn from_redirect(
        r: &Redirect,
        env: &dyn Fn(&str) -> Option<String>,
        enable_ipv6: bool,
    ) -> Result<CaptureConfig> {
        let include = env(ENV_OWNER_GROUPS).unwrap_or_else(|| "*".to_string());
        let exclude = env(ENV_OWNER_GROUPS_EXCLUDE).unwrap_or_default();
        let owner_groups = OwnerGroups::parse(&include, &exclude).map_err(|reason| {
            let var = if reason.starts_with("exclude") {
                ENV_OWNER_GROUPS_EXCLUDE
            } else {
                ENV_OWNER_GROUPS
            };
            Error::env(var, reason)
        })?;
        if owner_groups == OwnerGroups::Only(Vec::new()) {
            log::warn!(
                "{ENV_OWNER_GROUPS} is set but empty: no outbound traffic will be captured (as upstream)"
            );
        }
        let loopback = match env(ENV_LOOPBACK_CIDR) {
            Some(v) => parse_loopback_cidr(&v).map_err(|r| Error::env(ENV_LOOPBACK_CIDR, r))?,
            None => parse_loopback_cidr(DEFAULT_LOOPBACK_CIDR).map_err(Error::other)?,
        };
        Ok(CaptureConfig {
            proxy_port: PROXY_PORT,
            inbound_capture_port: INBOUND_CAPTURE_PORT,
            inbound_tunnel_port: INBOUND_TUNNEL_PORT,
            proxy_uids: vec![r.uid],
            proxy_gids: vec![r.gid],
            mode: r.mode,
            tproxy_mark: TPROXY_MARK,
            tproxy_route_table: TPROXY_ROUTE_TABLE,
            inbound_ports_include: r.include_inbound_ports.clone(),
            inbound_ports_exclude: r.exclude_inbound_ports.clone(),
            owner_groups,
            outbound_ports_include: r.include_outbound_ports.clone(),
            outbound_ports_exclude: r.exclude_outbound_ports.clone(),
            outbound_ip_ranges_include: r.include_ip_ranges.clone(),
            outbound_ip_ranges_exclude: r.exclude_ip_ranges.clone(),
            reroute_virtual_interfaces: r.reroute_virtual_interfaces.clone(),
            exclude_interfaces: r.exclude_interfaces.clone(),
            redirect_dns: r.dns_redirect,
            drop_invalid: r.invalid_drop,
            capture_all_dns: r.dns_redirect,
            enable_ipv6,
            dns_servers_v4: Vec::new(),
            dns_servers_v6: Vec::new(),
            host_ipv4_loopback_cidr: loopback,
        })
    }

    /// Whether DNS is redirected: asked for, with DNS servers or capture-all (without either, upstream only
    /// logs a warning and captures no DNS).
    pub fn dns_captured(&self) -> bool {
        let servers = !self.dns_servers_v4.is_empty() || !self.dns_servers_v6.is_empty();
        self.redirect_dns && (self.capture_all_dns || servers)
    }

    /// The policy routing TPROXY needs after the rules are applied (upstream `tproxy.Run`): only in TPROXY
    /// mode with a non-empty inbound include.
    pub fn tproxy_route(&self) -> Option<TproxyRoute> {
        if self.mode == InterceptionMode::Tproxy && !self.inbound_ports_include.is_empty() {
            Some(TproxyRoute {
                mark: self.tproxy_mark,
                table: self.tproxy_route_table,
                ipv6: self.enable_ipv6,
            })
        } else {
            None
        }
    }
}

/// Go's `IsLinkLocalUnicast || IsLinkLocalMulticast` on an unmapped address.
fn is_link_local(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            v4.is_link_local() || (o[0] == 224 && o[1] == 0 && o[2] == 0)
        }
        IpAddr::V6(v6) => {
            let s = v6.segments();
            (s[0] & 0xffc0) == 0xfe80 || (s[0] & 0xff0f) == 0xff02
        }
    }
}

/// The order upstream's `getLocalIP` sees a namespace's addresses in (Go's `net.InterfaceAddrs`): by
/// interface, and within an interface every IPv4 address before every IPv6 one (the kernel dumps the families
/// in that order), each family in the kernel's order. Input is `(interface index, address)` in dump order.
pub fn kernel_address_order(addrs: &[(u32, IpAddr)]) -> Vec<IpAddr> {
    let mut v = addrs.to_vec();
    v.sort_by_key(|(index, a)| (*index, a.is_ipv6()));
    v.into_iter().map(|(_, a)| a).collect()
}

/// Whether the pod gets the IPv6 document (upstream `getLocalIP`, plugin.md §4.3): the first address that
/// is neither loopback nor link-local decides; with dual-stack, any such IPv6 address enables it. No usable
/// address is an error.
pub fn enable_ipv6(addrs: &[IpAddr], dual_stack: bool) -> Result<bool> {
    let mut found = false;
    for a in addrs.iter().map(|a| unmap(*a)) {
        if a.is_loopback() || is_link_local(a) || a.is_unspecified() {
            continue;
        }
        if !dual_stack || a.is_ipv6() {
            return Ok(a.is_ipv6());
        }
        found = true;
    }
    if found {
        Ok(false)
    } else {
        Err(Error::other("no valid local IP address found"))
    }
}

/// A global IPv6 address the pod keeps while [`enable_ipv6`] gives it no IPv6 rules (a dual-stack pod
/// whose proxy has no `ISTIO_DUAL_STACK`, its first address IPv4): its IPv6 traffic bypasses the proxy,
/// as upstream's does. `None` when IPv6 is enabled or the pod has no such address.
pub fn ipv6_left_out(addrs: &[IpAddr], dual_stack: bool) -> Option<IpAddr> {
    if enable_ipv6(addrs, dual_stack).unwrap_or(true) {
        return None;
    }
    addrs
        .iter()
        .map(|a| unmap(*a))
        .find(|a| a.is_ipv6() && !a.is_loopback() && !is_link_local(*a) && !a.is_unspecified())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ipv6_address_left_without_rules_is_named() {
        // Dual-stack pod, IPv4 first, no ISTIO_DUAL_STACK: IPv4 rules only, fd00::2 left out.
        let both = ips(&["127.0.0.1", "::1", "10.0.0.2", "fe80::2", "fd00::2"]);
        assert_eq!(
            ipv6_left_out(&both, false),
            Some("fd00::2".parse().unwrap())
        );
        // With ISTIO_DUAL_STACK (or IPv6 first) it gets IPv6 rules: nothing left out.
        assert_eq!(ipv6_left_out(&both, true), None);
        assert_eq!(ipv6_left_out(&ips(&["fd00::2", "10.0.0.2"]), false), None);
        // IPv4-only, link-local or mapped IPv6 only: nothing to leave out; no address at all: no note
        // (the plan fails on it).
        for none in [
            &["10.0.0.2"][..],
            &["10.0.0.2", "fe80::2", "::ffff:10.0.0.3"][..],
            &[][..],
        ] {
            assert_eq!(ipv6_left_out(&ips(none), false), None, "{none:?}");
        }
    }

    fn ips(s: &[&str]) -> Vec<IpAddr> {
        s.iter().map(|x| x.parse().unwrap()).collect()
    }

    #[test]
    fn ipv6_detection() {
        assert!(!enable_ipv6(&ips(&["10.0.0.2"]), false).unwrap());
        assert!(enable_ipv6(&ips(&["fd00::2"]), false).unwrap());
        // The first usable address decides without dual-stack.
        assert!(!enable_ipv6(
            &ips(&["127.0.0.1", "fe80::1", "10.0.0.2", "fd00::2"]),
            false
        )
        .unwrap());
        assert!(enable_ipv6(&ips(&["::1", "169.254.1.1", "fd00::2", "10.0.0.2"]), false).unwrap());
        // Dual-stack: any global IPv6.
        assert!(enable_ipv6(&ips(&["10.0.0.2", "fd00::2"]), true).unwrap());
        assert!(!enable_ipv6(&ips(&["10.0.0.2"]), true).unwrap());
        assert!(!enable_ipv6(&ips(&["10.0.0.2", "fe80::2"]), true).unwrap());
        // IPv4-mapped counts as IPv4.
        assert!(!enable_ipv6(&ips(&["::ffff:10.0.0.2"]), false).unwrap());
        for none in [&[][..], &["127.0.0.1", "::1", "fe80::1", "169.254.0.9"][..]] {
            let e = enable_ipv6(&ips(none), false).unwrap_err();
            assert_eq!(e.to_string(), "no valid local IP address found");
            assert!(enable_ipv6(&ips(none), true).is_err());
        }
    }

    #[test]
    fn address_order_is_the_kernels() {
        let a = |s: &str| s.parse::<IpAddr>().unwrap();
        // Listed IPv6 first (as a dual-stack prevResult may): the kernel still lists IPv4 first.
        let dump = [
            (2, a("fd00::2")),
            (1, a("::1")),
            (1, a("127.0.0.1")),
            (2, a("10.0.0.2")),
        ];
        assert_eq!(
            kernel_address_order(&dump),
            vec![a("127.0.0.1"), a("::1"), a("10.0.0.2"), a("fd00::2")]
        );
        assert!(!enable_ipv6(&kernel_address_order(&dump), false).unwrap());
        // An interface with only IPv6 that comes first decides IPv6.
        let dump = [(3, a("10.0.0.2")), (2, a("fd00::2"))];
        assert!(enable_ipv6(&kernel_address_order(&dump), false).unwrap());
    }

    #[test]
    fn owner_groups() {
        assert_eq!(
            OwnerGroups::parse("*", "").unwrap(),
            OwnerGroups::AllExcept(vec![])
        );
        assert_eq!(
            OwnerGroups::parse("java,202", "ignored").unwrap(),
            OwnerGroups::Only(vec![
                Group::parse("java").unwrap(),
                Group::parse("202").unwrap()
            ])
        );
        assert!(OwnerGroups::parse("*", "a b").is_err());
        assert!(OwnerGroups::parse("java -j ACCEPT", "").is_err());
    }

    #[test]
    fn loopback_cidr() {
        assert!(parse_loopback_cidr("127.0.0.1/32").is_ok());
        assert!(parse_loopback_cidr("127.0.0.0/8").is_ok());
        assert!(parse_loopback_cidr("10.0.0.1/32").is_err());
        assert!(parse_loopback_cidr("::1/128").is_err());
        assert!(parse_loopback_cidr("127.0.0.1/32 -j ACCEPT").is_err());
        // Upstream's ValidateIPv4LoopbackCidr: /8 to /32. A shorter mask reaches past 127/8, and the range
        // is RETURNed from ISTIO_OUTPUT: `127.0.0.1/1` would let every 0/1 destination bypass the proxy.
        for bad in ["127.0.0.1/0", "127.0.0.1/1", "127.0.0.0/7"] {
            let e = parse_loopback_cidr(bad).unwrap_err();
            assert!(e.contains("/8 to /32"), "{bad}: {e}");
            let env = |k: &str| (k == ENV_LOOPBACK_CIDR).then(|| bad.to_string());
            let r = Redirect::from_pod(&crate::redirect::PodInfo::default());
            let e = CaptureConfig::from_redirect(&r.unwrap(), &env, false).unwrap_err();
            assert!(e.to_string().contains(ENV_LOOPBACK_CIDR), "{e}");
        }
    }
}
