//! A `prevResult` read with the configuration's version, as libcni reads it: validated field by field
//! (addresses, CIDRs, routes, DNS), 0.1.0/0.2.0's `ip4`/`ip6` shape mapped to the current model.

use super::{CniResult, Dns, Interface, IpConfig, Route};
use crate::cni::version;
use crate::error::{Error, Result};
use crate::json::{self, Number, Object, Value};
use std::net::IpAddr;

const WHAT: &str = "prevResult";

fn bad(msg: String) -> Error {
    Error::Decode(format!("could not parse prevResult: {msg}"))
}

fn int(v: &Value, field: &str) -> Result<i64> {
    match v {
        Value::Number(Number::U64(u)) if *u <= i64::MAX as u64 => Ok(*u as i64),
        Value::Number(Number::I64(i)) => Ok(*i),
        _ => Err(bad(format!("{field} must be an integer"))),
    }
}

fn strs(o: &Object, key: &str) -> Result<Vec<String>> {
    Ok(json::opt_string_list(o, key, WHAT)?.unwrap_or_default())
}

fn s(o: &Object, key: &str) -> Result<String> {
    Ok(json::opt_string(o, key, WHAT)?.unwrap_or_default())
}

fn objects<'a>(o: &'a Object, key: &str) -> Result<Vec<&'a Object>> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(vec![]),
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| match v {
                Value::Object(x) => Ok(x),
                _ => Err(bad(format!("{key} must be a list of objects"))),
            })
            .collect(),
        Some(_) => Err(bad(format!("{key} must be a list"))),
    }
}

fn check_cidr(field: &str, v: &str) -> Result<()> {
    let ok = match v.split_once('/') {
        Some((a, p)) => {
            let a: Option<IpAddr> = a.parse().ok();
            match (a, p.parse::<u8>()) {
                (Some(IpAddr::V4(_)), Ok(p)) => p <= 32,
                (Some(IpAddr::V6(_)), Ok(p)) => p <= 128,
                _ => false,
            }
        }
        None => false,
    };
    if ok {
        Ok(())
    } else {
        Err(bad(format!(
            "{field} {v:?} is not an address in CIDR notation"
        )))
    }
}

fn check_ip(field: &str, v: &str) -> Result<()> {
    v.parse::<IpAddr>()
        .map(|_| ())
        .map_err(|_| bad(format!("{field} {v:?} is not an IP address")))
}

fn parse_route(r: &Object) -> Result<Route> {
    let dst = s(r, "dst")?;
    check_cidr("route dst", &dst)?;
    if let Some(gw) = json::opt_string(r, "gw", WHAT)? {
        if !gw.is_empty() {
            check_ip("route gw", &gw)?;
        }
    }
    let mut out = Object::new();
    for (k, v) in r.iter() {
        match k.as_str() {
            "dst" | "gw" => {
                if let Value::String(x) = v {
                    if !x.is_empty() {
                        out.insert(k.clone(), v.clone());
                    }
                }
            }
            "mtu" | "advmss" | "priority" if !matches!(v, Value::Null) && int(v, k)? != 0 => {
                out.insert(k.clone(), v.clone());
            }
            // `*int` in libcni: only an absent (or null) one is left out; 0 is a value (scope 0 is
            // RT_SCOPE_UNIVERSE) and passes through.
            "table" | "scope" if !matches!(v, Value::Null) => {
                int(v, k)?;
                out.insert(k.clone(), v.clone());
            }
            _ => {}
        }
    }
    Ok(out)
}

fn parse_dns(o: &Object) -> Result<Dns> {
    match json::obj_of(o, "dns") {
        None => Ok(Dns::default()),
        Some(d) => Ok(Dns {
            nameservers: strs(d, "nameservers")?,
            domain: s(d, "domain")?,
            search: strs(d, "search")?,
            options: strs(d, "options")?,
        }),
    }
}

/// Parses `prevResult` as libcni does: with the *configuration's* version (0.1.0/0.2.0 shape below 0.3.0).
pub fn parse_prev(prev: &Value, conf_version: &str) -> Result<CniResult> {
    let o = match prev {
        Value::Object(o) => o,
        _ => return Err(bad("expected a JSON object".into())),
    };
    if !version::at_least(conf_version, "0.3.0") {
        return parse_020(o);
    }
    let mut r = CniResult {
        dns: parse_dns(o)?,
        ..Default::default()
    };
    for i in objects(o, "interfaces")? {
        let mtu = match i.get("mtu") {
            None | Some(Value::Null) => None,
            Some(v) => Some(int(v, "interface mtu")?).filter(|m| *m != 0),
        };
        r.interfaces.push(Interface {
            name: s(i, "name")?,
            mac: s(i, "mac")?,
            mtu,
            sandbox: s(i, "sandbox")?,
            socket_path: s(i, "socketPath")?,
            pci_id: s(i, "pciID")?,
        });
    }
    for ip in objects(o, "ips")? {
        let address = s(ip, "address")?;
        check_cidr("ips address", &address)?;
        let gateway = json::opt_string(ip, "gateway", WHAT)?.filter(|g| !g.is_empty());
        if let Some(g) = &gateway {
            check_ip("ips gateway", g)?;
        }
        let interface = match ip.get("interface") {
            None | Some(Value::Null) => None,
            Some(v) => Some(int(v, "ips interface")?),
        };
        r.ips.push(IpConfig {
            interface,
            address,
            gateway,
        });
    }
    for rt in objects(o, "routes")? {
        r.routes.push(parse_route(rt)?);
    }
    Ok(r)
}

/// 0.1.0/0.2.0: `{ip4:{ip,gateway,routes}, ip6:{...}, dns}`.
fn parse_020(o: &Object) -> Result<CniResult> {
    if o.contains_key("ips") || o.contains_key("interfaces") {
        return Err(bad(
            "could not convert result to current version: a 0.3+ result for a 0.1.0/0.2.0 configuration".into(),
        ));
    }
    let mut r = CniResult {
        dns: parse_dns(o)?,
        ..Default::default()
    };
    for key in ["ip4", "ip6"] {
        if let Some(ipc) = json::obj_of(o, key) {
            let address = s(ipc, "ip")?;
            check_cidr(&format!("{key}.ip"), &address)?;
            let gateway = json::opt_string(ipc, "gateway", WHAT)?.filter(|g| !g.is_empty());
            if let Some(g) = &gateway {
                check_ip(&format!("{key}.gateway"), g)?;
            }
            r.ips.push(IpConfig {
                interface: None,
                address,
                gateway,
            });
            for rt in objects(ipc, "routes")? {
                r.routes.push(parse_route(rt)?);
            }
        }
    }
    Ok(r)
}
