//! The redirect configuration of one pod (upstream `NewRedirect`, plugin.md §3): annotations with their
//! defaults, validated strictly and in upstream's order, plus the istio-proxy env and securityContext.
//! Every value is parsed into typed data; an invalid value is an [`Error::Annotation`] naming the annotation
//! key and the value.

use super::keys::*;
use super::pod::PodInfo;
use super::values::{
    parse_bool, parse_cidr_list, parse_iface_list, parse_port_list, spaces_and_tabs_only, Cidr,
    IfaceName, IpRanges, Ports,
};
use crate::error::{Error, Result};

/// Ports the injector's health/metrics endpoints use; never captured inbound.
pub const ALWAYS_EXCLUDED_INBOUND: [u16; 3] = [15020, 15021, 15090];
/// Default for excludeOutboundPorts (replaced, not extended, by the annotation).
pub const DEFAULT_EXCLUDED_OUTBOUND: u16 = 15020;
/// UID and GID of the proxy when the securityContext does not say otherwise.
pub const DEFAULT_PROXY_ID: u32 = 1337;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InterceptionMode {
    Redirect,
    Tproxy,
}

/// What one pod's annotations and proxy container ask for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Redirect {
    pub mode: InterceptionMode,
    pub uid: u32,
    pub gid: u32,
    pub include_ip_ranges: IpRanges,
    pub exclude_ip_ranges: Vec<Cidr>,
    pub include_inbound_ports: Ports,
    /// The annotation's ports, then 15020, 15021, 15090, without duplicates (first occurrence kept).
    pub exclude_inbound_ports: Vec<u16>,
    pub include_outbound_ports: Vec<u16>,
    pub exclude_outbound_ports: Vec<u16>,
    pub exclude_interfaces: Vec<IfaceName>,
    pub reroute_virtual_interfaces: Vec<IfaceName>,
    /// `ISTIO_META_DNS_CAPTURE`: capture all DNS (CNI mode never reads resolv.conf).
    pub dns_redirect: bool,
    /// `ISTIO_DUAL_STACK`: changes how IPv6 is detected.
    pub dual_stack: bool,
    /// `INVALID_DROP`: drop conntrack-INVALID packets.
    pub invalid_drop: bool,
}

fn invalid(key: &str, value: &str, reason: impl Into<String>) -> Error {
    Error::Annotation {
        key: key.to_string(),
        value: value.to_string(),
        reason: reason.into(),
    }
}

/// Annotation `key` of `pod` read by `parse` (`None` when absent); a bad value names the key.
fn parsed<T>(
    pod: &PodInfo,
    key: &str,
    parse: impl Fn(&str) -> std::result::Result<T, String>,
) -> Result<Option<T>> {
    let v = pod.annotations.get(key);
    v.map(|v| parse(v).map_err(|r| invalid(key, v, r)))
        .transpose()
}

/// Ports where `*` cannot be rendered as a rule (upstream accepts it and then fails in iptables-restore).
fn port_list(v: &str) -> std::result::Result<Vec<u16>, String> {
    if v.trim() == "*" {
        return Err("a wildcard is not supported here; list the ports".into());
    }
    spaces_and_tabs_only(v)?;
    parse_port_list(v)
}

/// An include port list must not be blank (only "" means none): upstream validates it trimmed, then fails in
/// iptables-restore on the untrimmed `--dport  `; read as empty, it would capture nothing.
fn not_blank(v: &str) -> std::result::Result<(), String> {
    if !v.is_empty() && v.trim().is_empty() {
        return Err(
            "a blank value is not an empty list (upstream fails on it); write \"\" to include no port"
                .into(),
        );
    }
    Ok(())
}

fn proxy_id(v: Option<i64>, what: &str) -> Result<u32> {
    match v {
        None | Some(0) => Ok(DEFAULT_PROXY_ID),
        Some(n) => u32::try_from(n).map_err(|_| {
            Error::Decode(format!(
                "pod: istio-proxy securityContext.{what} {n} is not a valid id"
            ))
        }),
    }
}

/// The inbound ports to capture and those excluded: the annotation's excludes, then 15020, 15021, 15090,
/// without duplicates (first occurrence kept).
fn inbound_ports(pod: &PodInfo) -> Result<(Ports, Vec<u16>)> {
    let ann = |key: &str| pod.annotations.get(key).map(String::as_str);
    // Upstream reads the inbound excludes only when the include is `*`, so an exclude `*` is harmless
    // with an explicit (even empty) include list and cannot be programmed with `*`.
    // The wildcard is exactly "*": upstream validates " * " as a port list, which fails.
    if let Some(v) = ann(EXCLUDE_INBOUND_PORTS).filter(|v| *v != "*" && v.trim() == "*") {
        return Err(invalid(
            EXCLUDE_INBOUND_PORTS,
            v,
            "a wildcard must be exactly \"*\", without spaces",
        ));
    }
    let exclude_wildcard = ann(EXCLUDE_INBOUND_PORTS).filter(|v| *v == "*");
    let mut exclude_inbound_ports = match exclude_wildcard {
        None => parsed(pod, EXCLUDE_INBOUND_PORTS, parse_port_list)?.unwrap_or_default(),
        Some(_) => Vec::new(),
    };
    exclude_inbound_ports.extend(ALWAYS_EXCLUDED_INBOUND);
    let mut seen = Vec::new();
    exclude_inbound_ports.retain(|p| {
        let first = !seen.contains(p);
        seen.push(*p);
        first
    });
    let include_inbound_ports = match ann(INCLUDE_INBOUND_PORTS) {
        None | Some("*") => Ports::All,
        Some(v) => {
            let ports = not_blank(v)
                .and_then(|_| spaces_and_tabs_only(v))
                .and_then(|_| parse_port_list(v));
            Ports::List(ports.map_err(|r| invalid(INCLUDE_INBOUND_PORTS, v, r))?)
        }
    };
    // Upstream renders the excludes (trimmed at the ends) only when the include is `*`.
    if let (Some(v), Ports::All) = (ann(EXCLUDE_INBOUND_PORTS), &include_inbound_ports) {
        spaces_and_tabs_only(v.trim()).map_err(|r| invalid(EXCLUDE_INBOUND_PORTS, v, r))?;
    }
    if let (Some(v), Ports::All) = (exclude_wildcard, &include_inbound_ports) {
        return Err(invalid(
            EXCLUDE_INBOUND_PORTS,
            v,
            "a wildcard cannot be excluded while every inbound port is captured \
             (includeInboundPorts \"*\"); list the ports",
        ));
    }
    Ok((include_inbound_ports, exclude_inbound_ports))
}

/// A boolean istio-proxy env var: false when absent or (with a warning) not a boolean.
fn env_flag(pod: &PodInfo, name: &str) -> bool {
    match pod.proxy.as_ref().and_then(|p| p.env.get(name)) {
        None => false,
        Some(v) => parse_bool(v).unwrap_or_else(|| {
            log::warn!(
                "pod {}/{}: istio-proxy env {name}={v:?} is not a boolean; treating it as false",
                pod.namespace,
                pod.name
            );
            false
        }),
    }
}

impl Redirect {
    pub fn from_pod(pod: &PodInfo) -> Result<Redirect> {
        let ann = |key: &str| pod.annotations.get(key).map(String::as_str);

        // Validation order is upstream's: mode, include/exclude CIDRs, exclude/include inbound ports,
        // exclude/include outbound ports, exclude interfaces, reroute (or the deprecated kubevirt key).
        let mode = match ann(INTERCEPTION_MODE) {
            None | Some("REDIRECT") => InterceptionMode::Redirect,
            Some("TPROXY") => InterceptionMode::Tproxy,
            Some(v) => {
                return Err(invalid(
                    INTERCEPTION_MODE,
                    v,
                    "interception mode must be REDIRECT or TPROXY",
                ))
            }
        };
        let include_ip_ranges = match ann(INCLUDE_OUTBOUND_IP_RANGES) {
            None | Some("*") => IpRanges::All,
            Some(v) => IpRanges::List(
                parse_cidr_list(v).map_err(|r| invalid(INCLUDE_OUTBOUND_IP_RANGES, v, r))?,
            ),
        };
        let exclude_ip_ranges = match ann(EXCLUDE_OUTBOUND_IP_RANGES) {
            Some(v) if v.trim() == "*" => {
                return Err(invalid(
                    EXCLUDE_OUTBOUND_IP_RANGES,
                    v,
                    "a wildcard is not allowed in the exclude list",
                ))
            }
            _ => parsed(pod, EXCLUDE_OUTBOUND_IP_RANGES, parse_cidr_list)?.unwrap_or_default(),
        };
        let (include_inbound_ports, exclude_inbound_ports) = inbound_ports(pod)?;
        let exclude_outbound_ports = parsed(pod, EXCLUDE_OUTBOUND_PORTS, port_list)?
            .unwrap_or_else(|| vec![DEFAULT_EXCLUDED_OUTBOUND]);
        let include_outbound_ports = parsed(pod, INCLUDE_OUTBOUND_PORTS, |v| {
            not_blank(v).and_then(|_| port_list(v))
        })?
        .unwrap_or_default();
        let exclude_interfaces =
            parsed(pod, EXCLUDE_INTERFACES, parse_iface_list)?.unwrap_or_default();
        let reroute_virtual_interfaces =
            match parsed(pod, REROUTE_VIRTUAL_INTERFACES, parse_iface_list)? {
                Some(l) => l,
                None => parsed(pod, KUBEVIRT_INTERFACES, parse_iface_list)?.unwrap_or_default(),
            };

        let (uid, gid) = match &pod.proxy {
            Some(p) => (
                proxy_id(p.run_as_user, "runAsUser")?,
                proxy_id(p.run_as_group, "runAsGroup")?,
            ),
            None => (DEFAULT_PROXY_ID, DEFAULT_PROXY_ID),
        };
        let flag = |name: &str| env_flag(pod, name);
        Ok(Redirect {
            mode,
            uid,
            gid,
            include_ip_ranges,
            exclude_ip_ranges,
            include_inbound_ports,
            exclude_inbound_ports,
            include_outbound_ports,
            exclude_outbound_ports,
            exclude_interfaces,
            reroute_virtual_interfaces,
            dns_redirect: flag(DNS_CAPTURE_ENV),
            dual_stack: flag(DUAL_STACK_ENV),
            invalid_drop: flag(INVALID_DROP_ENV),
        })
    }
}

#[cfg(test)]
#[path = "annotations_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "annotations_strict_tests.rs"]
mod strict_tests;
