//! [`CaptureConfig::from_json`]: the conformance `capture/config.json` schema (also `explain --capture`).
//! Strict: unknown keys and wrong types are decode errors naming the field; absent string, boolean and list
//! fields take Go's zero values, but the numeric ones (ports, mark, table) and the loopback range are required.
//! Lists follow istio-iptables' `config.Split` (empty elements are skipped).

use super::annotations::InterceptionMode;
use super::capture::{parse_loopback_cidr, CaptureConfig, OwnerGroups};
use super::values::{parse_id, parse_port, split_list, Cidr, IfaceName, IpRanges, IpText, Ports};
use crate::error::{Error, Result};
use crate::json::{self, Object};

const WHAT: &str = "capture configuration";

const KEYS: &[&str] = &[
    "proxy_port",
    "inbound_capture_port",
    "inbound_tunnel_port",
    "proxy_uid",
    "proxy_gid",
    "inbound_interception_mode",
    "inbound_tproxy_mark",
    "inbound_tproxy_route_table",
    "inbound_ports_include",
    "inbound_ports_exclude",
    "owner_groups_include",
    "owner_groups_exclude",
    "outbound_ports_include",
    "outbound_ports_exclude",
    "outbound_ip_ranges_include",
    "outbound_ip_ranges_exclude",
    "reroute_virtual_interfaces",
    "exclude_interfaces",
    "redirect_dns",
    "drop_invalid",
    "capture_all_dns",
    "enable_ipv6",
    "dns_servers_v4",
    "dns_servers_v6",
    "host_ipv4_loopback_cidr",
];

fn bad(key: &str, reason: impl std::fmt::Display) -> Error {
    Error::Decode(format!("{WHAT}: field {key:?}: {reason}"))
}

/// Field `key` (read by `s`) as a `config.Split` list, each element read by `parse`.
fn list<T>(
    s: &dyn Fn(&str) -> Result<String>,
    key: &str,
    parse: impl Fn(&str) -> Result<T, String>,
) -> Result<Vec<T>> {
    split_list(&s(key)?, parse).map_err(|r| bad(key, r))
}

/// Field `key`, a string that must be present.
fn required(o: &Object, k: &str) -> Result<String> {
    json::opt_string(o, k, WHAT)?.ok_or_else(|| bad(k, "missing"))
}

/// Field `key`, a required string of decimal digits that fits a u32.
fn number(o: &Object, k: &str) -> Result<u32> {
    let v = required(o, k)?;
    if v.is_empty() || !v.bytes().all(|c| c.is_ascii_digit()) {
        return Err(bad(k, format!("{v:?} is not a number")));
    }
    v.parse::<u32>()
        .map_err(|_| bad(k, format!("{v} is out of range")))
}

/// Field `key`, a list of DNS server addresses of one family (IPv6 when `v6`).
fn servers(o: &Object, k: &str, v6: bool) -> Result<Vec<IpText>> {
    json::opt_string_list(o, k, WHAT)?
        .unwrap_or_default()
        .iter()
        .map(|x| {
            let ip = IpText::parse(x).map_err(|r| bad(k, r))?;
            if ip.addr.is_ipv6() != v6 {
                return Err(bad(
                    k,
                    format!("{x:?} is not an IPv{} address", if v6 { 6 } else { 4 }),
                ));
            }
            Ok(ip)
        })
        .collect()
}

impl CaptureConfig {
    pub fn from_json(o: &Object) -> Result<CaptureConfig> {
        if let Some(k) = o.keys().find(|k| !KEYS.contains(&k.as_str())) {
            return Err(Error::Decode(format!("{WHAT}: unknown field {k:?}")));
        }
        let s =
            |k: &str| -> Result<String> { Ok(json::opt_string(o, k, WHAT)?.unwrap_or_default()) };
        let b = |k: &str| -> Result<bool> { Ok(json::opt_bool(o, k, WHAT)?.unwrap_or(false)) };
        let port = |k: &str| -> Result<u16> { parse_port(&required(o, k)?).map_err(|r| bad(k, r)) };

        let mode = match s("inbound_interception_mode")?.as_str() {
            "" | "REDIRECT" => InterceptionMode::Redirect,
            "TPROXY" => InterceptionMode::Tproxy,
            other => {
                return Err(bad(
                    "inbound_interception_mode",
                    format!("{other:?} is not REDIRECT or TPROXY"),
                ))
            }
        };
        let inbound_ports_include = match s("inbound_ports_include")?.as_str() {
            "*" => Ports::All,
            _ => Ports::List(list(&s, "inbound_ports_include", parse_port)?),
        };
        let outbound_ip_ranges_include = match s("outbound_ip_ranges_include")?.as_str() {
            "*" => IpRanges::All,
            _ => IpRanges::List(list(&s, "outbound_ip_ranges_include", Cidr::parse)?),
        };
        if s("outbound_ip_ranges_exclude")? == "*" {
            return Err(bad(
                "outbound_ip_ranges_exclude",
                "invalid value for OUTBOUND_IP_RANGES_EXCLUDE (a wildcard cannot be excluded)",
            ));
        }
        let loopback = required(o, "host_ipv4_loopback_cidr")?;
        Ok(CaptureConfig {
            proxy_port: port("proxy_port")?,
            inbound_capture_port: port("inbound_capture_port")?,
            inbound_tunnel_port: port("inbound_tunnel_port")?,
            proxy_uids: list(&s, "proxy_uid", parse_id)?,
            proxy_gids: list(&s, "proxy_gid", parse_id)?,
            mode,
            tproxy_mark: number(o, "inbound_tproxy_mark")?,
            tproxy_route_table: number(o, "inbound_tproxy_route_table")?,
            inbound_ports_include,
            inbound_ports_exclude: list(&s, "inbound_ports_exclude", parse_port)?,
            owner_groups: OwnerGroups::parse(
                &s("owner_groups_include")?,
                &s("owner_groups_exclude")?,
            )
            .map_err(|r| bad("owner_groups_include/owner_groups_exclude", r))?,
            outbound_ports_include: list(&s, "outbound_ports_include", parse_port)?,
            outbound_ports_exclude: list(&s, "outbound_ports_exclude", parse_port)?,
            outbound_ip_ranges_include,
            outbound_ip_ranges_exclude: list(&s, "outbound_ip_ranges_exclude", Cidr::parse)?,
            reroute_virtual_interfaces: list(&s, "reroute_virtual_interfaces", IfaceName::parse)?,
            exclude_interfaces: list(&s, "exclude_interfaces", IfaceName::parse)?,
            redirect_dns: b("redirect_dns")?,
            drop_invalid: b("drop_invalid")?,
            capture_all_dns: b("capture_all_dns")?,
            enable_ipv6: b("enable_ipv6")?,
            dns_servers_v4: servers(o, "dns_servers_v4", false)?,
            dns_servers_v6: servers(o, "dns_servers_v6", true)?,
            host_ipv4_loopback_cidr: parse_loopback_cidr(&loopback)
                .map_err(|r| bad("host_ipv4_loopback_cidr", r))?,
        })
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// Upstream's `constructTestConfig` base (the rule tests' too).
    pub(in crate::redirect) const BASE: &str = r#"{"proxy_port":"15001","inbound_capture_port":"15006","inbound_tunnel_port":"15008",
        "proxy_uid":"1337","proxy_gid":"1337","inbound_tproxy_mark":"1337","inbound_tproxy_route_table":"133",
        "owner_groups_include":"*","host_ipv4_loopback_cidr":"127.0.0.1/32"}"#;

    fn with(key: &str, value: &str) -> Result<CaptureConfig> {
        let mut o = json::parse_object(BASE, "t").unwrap();
        o.insert(key.to_string(), json::parse(value, "v").unwrap());
        CaptureConfig::from_json(&o)
    }

    #[test]
    fn base_parses() {
        let c = CaptureConfig::from_json(&json::parse_object(BASE, "t").unwrap()).unwrap();
        assert_eq!(c.proxy_uids, vec![1337]);
        assert_eq!(c.inbound_ports_include, Ports::List(vec![]));
        assert_eq!(c.outbound_ip_ranges_include, IpRanges::List(vec![]));
        assert_eq!(c.tproxy_route(), None);
    }

    #[test]
    fn strict_types_and_values() {
        for (k, v, needle) in [
            ("proxy_port", "15001", "proxy_port"),
            ("proxy_port", "\"70000\"", "proxy_port"),
            ("redirect_dns", "\"true\"", "redirect_dns"),
            ("dns_servers_v4", "\"1.1.1.1\"", "dns_servers_v4"),
            ("dns_servers_v4", "[\"::1\"]", "dns_servers_v4"),
            ("dns_servers_v6", "[\"1.1.1.1\"]", "dns_servers_v6"),
            (
                "outbound_ip_ranges_exclude",
                "\"*\"",
                "OUTBOUND_IP_RANGES_EXCLUDE",
            ),
            (
                "outbound_ip_ranges_include",
                "\"10.0.0.0/8 -j ACCEPT\"",
                "outbound_ip_ranges_include",
            ),
            (
                "inbound_interception_mode",
                "\"NONE\"",
                "inbound_interception_mode",
            ),
            (
                "exclude_interfaces",
                "\"eth0 -j ACCEPT\"",
                "exclude_interfaces",
            ),
            ("owner_groups_exclude", "\"a\\nb\"", "owner_groups"),
            ("proxy_uid", "\"root\"", "proxy_uid"),
            (
                "host_ipv4_loopback_cidr",
                "\"10.0.0.1/32\"",
                "host_ipv4_loopback_cidr",
            ),
            ("bogus", "\"\"", "unknown field"),
        ] {
            let e = with(k, v).unwrap_err();
            assert!(e.to_string().contains(needle), "{k}={v}: {e}");
            assert_eq!(e.cni_code(), 6, "{k}");
        }
    }
}
