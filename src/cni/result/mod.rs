//! CNI results: `prevResult` parsed with the configuration's version (as libcni does), and printed back in
//! that version with the spec's conversions: 0.3.x/0.4.0 IPs carry `"version":"4"|"6"` from the address
//! family, interfaces below 1.0.0 keep only name/mac/sandbox, empty members are left out, 0.1.0/0.2.0 use the
//! `ip4`/`ip6` shape. Output is what Istio prints (`types.PrintResult`, 4-space indent).
//!
//! [`parse_prev`] reads a prevResult into the one model below, [`to_value`] writes the model back in a version.

mod parse;
mod print;

pub use parse::parse_prev;
pub use print::to_value;

use crate::error::{Error, Result};
use crate::json::{self, Number, Object, Value};
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
mod tests;
