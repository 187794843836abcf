//! The model printed back in a version, with the spec's conversions: 0.3.x/0.4.0 IPs carry
//! `"version":"4"|"6"`, interfaces below 1.0.0 keep only name/mac/sandbox, empty members are left out,
//! 0.1.0/0.2.0 use the `ip4`/`ip6` shape.

use super::{CniResult, Dns};
use crate::cni::version;
use crate::json::{self, Array, Number, Object, Value};
use std::net::IpAddr;

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
