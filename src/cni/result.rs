//! CNI results: `prevResult` parsed with the configuration's version (as libcni does), and printed back in
//! that version with the spec's conversions: 0.3.x/0.4.0 IPs carry `"version":"4"|"6"` from the address
//! family, interfaces below 1.0.0 keep only name/mac/sandbox, empty members are left out, 0.1.0/0.2.0 use the
//! `ip4`/`ip6` shape. Output is what Istio prints (`types.PrintResult`, 4-space indent).

use super::version;
use crate::error::{Error, Result};
use crate::json::{self, Array, Number, Object, Value};
use std::net::IpAddr;

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Interface {
    pub name: String,
    pub mac: String,
    pub mtu: Option<i64>,
    pub sandbox: String,
    pub socket_path: String,
    pub pci_id: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct IpConfig {
    pub interface: Option<i64>,
    /// CIDR notation, host bits kept (`10.0.0.2/24`).
    pub address: String,
    pub gateway: Option<String>,
}

impl IpConfig {
    pub fn addr(&self) -> Option<IpAddr> {
        self.address.split('/').next().and_then(|a| a.parse().ok())
    }
}

/// Routes keep every field in every version (`types.Route` is shared); kept as the raw object, validated.
pub type Route = Object;

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Dns {
    pub nameservers: Vec<String>,
    pub domain: String,
    pub search: Vec<String>,
    pub options: Vec<String>,
}

impl Dns {
    fn is_empty(&self) -> bool {
        self.nameservers.is_empty()
            && self.domain.is_empty()
            && self.search.is_empty()
            && self.options.is_empty()
    }
}

/// A result in the current (1.x) model.
#[derive(Debug, Clone, Default)]
pub struct CniResult {
    pub interfaces: Vec<Interface>,
    pub ips: Vec<IpConfig>,
    pub routes: Vec<Route>,
    pub dns: Dns,
}

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

fn put_str(o: &mut Object, k: &str, v: &str) {
    if !v.is_empty() {
        o.insert(k.to_string(), json::string(v));
    }
}

fn put_list(o: &mut Object, k: &str, v: &[String]) {
    if !v.is_empty() {
        o.insert(
            k.to_string(),
            Value::Array(v.iter().map(|x| json::string(x)).collect()),
        );
    }
}

fn dns_value(d: &Dns) -> Value {
    let mut o = Object::new();
    put_list(&mut o, "nameservers", &d.nameservers);
    put_str(&mut o, "domain", &d.domain);
    put_list(&mut o, "search", &d.search);
    put_list(&mut o, "options", &d.options);
    Value::Object(o)
}

fn num(i: i64) -> Value {
    Value::Number(Number::I64(i))
}

/// The result as JSON in `cni_version` (the configuration's version).
pub fn to_value(r: &CniResult, cni_version: &str) -> Value {
    let mut o = Object::new();
    o.insert("cniVersion".into(), json::string(cni_version));
    if !version::at_least(cni_version, "0.3.0") {
        return to_020(r, o);
    }
    let v1 = version::at_least(cni_version, "1.0.0");
    if !r.interfaces.is_empty() {
        let list: Array = r
            .interfaces
            .iter()
            .map(|i| {
                let mut x = Object::new();
                x.insert("name".into(), json::string(&i.name));
                put_str(&mut x, "mac", &i.mac);
                put_str(&mut x, "sandbox", &i.sandbox);
                if v1 {
                    if let Some(m) = i.mtu {
                        x.insert("mtu".into(), num(m));
                    }
                    put_str(&mut x, "socketPath", &i.socket_path);
                    put_str(&mut x, "pciID", &i.pci_id);
                }
                Value::Object(x)
            })
            .collect();
        o.insert("interfaces".into(), Value::Array(list));
    }
    if !r.ips.is_empty() {
        let list: Array = r
            .ips
            .iter()
            .map(|ip| {
                let mut x = Object::new();
                x.insert("address".into(), json::string(&ip.address));
                if let Some(g) = &ip.gateway {
                    x.insert("gateway".into(), json::string(g));
                }
                if let Some(i) = ip.interface {
                    x.insert("interface".into(), num(i));
                }
                if !v1 {
                    let fam = if matches!(ip.addr(), Some(IpAddr::V6(_))) {
                        "6"
                    } else {
                        "4"
                    };
                    x.insert("version".into(), json::string(fam));
                }
                Value::Object(x)
            })
            .collect();
        o.insert("ips".into(), Value::Array(list));
    }
    if !r.routes.is_empty() {
        o.insert(
            "routes".into(),
            Value::Array(r.routes.iter().map(|x| Value::Object(x.clone())).collect()),
        );
    }
    // 1.x leaves an empty dns out; the 0.3.x/0.4.0 marshaller always writes it.
    if !v1 || !r.dns.is_empty() {
        o.insert("dns".into(), dns_value(&r.dns));
    }
    Value::Object(o)
}

fn to_020(r: &CniResult, mut o: Object) -> Value {
    for (key, v6) in [("ip4", false), ("ip6", true)] {
        if let Some(ip) = r
            .ips
            .iter()
            .find(|ip| matches!(ip.addr(), Some(IpAddr::V6(_))) == v6)
        {
            let mut x = Object::new();
            x.insert("ip".into(), json::string(&ip.address));
            if let Some(g) = &ip.gateway {
                x.insert("gateway".into(), json::string(g));
            }
            let routes: Array = r
                .routes
                .iter()
                .filter(|rt| json::str_of(rt, "dst").map(|d| d.contains(':')) == Some(v6))
                .map(|rt| Value::Object(rt.clone()))
                .collect();
            if !routes.is_empty() {
                x.insert("routes".into(), Value::Array(routes));
            }
            o.insert(key.into(), Value::Object(x));
        }
    }
    o.insert("dns".into(), dns_value(&r.dns));
    Value::Object(o)
}

/// What a chained plugin that changes nothing prints: the prevResult in the configuration's version, or an
/// empty result in that version.
pub fn passthrough(prev: Option<&Value>, cni_version: &str) -> Result<String> {
    let r = match prev {
        Some(p) => parse_prev(p, cni_version)?,
        None => CniResult::default(),
    };
    Ok(json::to_pretty(&to_value(&r, cni_version), "    "))
}

/// The error reply printed on stdout: `{cniVersion, code, msg, details}`.
pub fn error_reply(e: &Error, cni_version: &str) -> String {
    let mut o = Object::new();
    o.insert("cniVersion".into(), json::string(cni_version));
    o.insert(
        "code".into(),
        Value::Number(Number::U64(e.cni_code() as u64)),
    );
    o.insert("msg".into(), json::string(&e.to_string()));
    o.insert("details".into(), json::string(e.headline()));
    json::to_pretty(&Value::Object(o), "    ")
}

#[cfg(test)]
#[path = "result_tests.rs"]
mod tests;
