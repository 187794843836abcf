//! Typed values that end up in iptables rules. Every parser here accepts only text that can be rendered
//! back as a single, harmless iptables token (digits, an address, a validated name), so nothing taken from
//! a pod annotation, a node environment variable or a configuration file can inject text into the
//! `iptables-restore` input. Errors are plain reasons; callers wrap them with the annotation, variable or
//! field they came from.

use ipnet::IpNet;
use std::fmt;
use std::net::IpAddr;

/// Go's `strconv.ParseBool`, from the one settings toolkit.
pub use crate::settings::go_bool as parse_bool;

/// One port: Go's `strconv.ParseUint(strings.TrimSpace(p), 10, 16)` (digits only, no sign, ≤ 65535).
pub fn parse_port(s: &str) -> Result<u16, String> {
    let t = s.trim();
    if t.is_empty() {
        return Err("empty port in the list".to_string());
    }
    if !t.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{s:?} is not a port number"));
    }
    t.parse::<u16>()
        .map_err(|_| format!("port {t} is out of range (0-65535)"))
}

/// Upstream renders list entries untrimmed into its rule lines, where only spaces and tabs separate tokens: a
/// line break splits the rule and any other whitespace (or control character) stays in the port or interface
/// name. A value holding one is refused, naming it.
pub fn spaces_and_tabs_only(s: &str) -> Result<(), String> {
    let odd = |c: &char| (c.is_whitespace() || c.is_control()) && !matches!(c, ' ' | '\t');
    match s.chars().find(odd) {
        Some(c) => Err(format!(
            "{c:?} in the value: only spaces and tabs may separate the entries (upstream's rules break on it)"
        )),
        None => Ok(()),
    }
}

/// A comma list of ports as the annotations spell it: the whole value is trimmed; `""` (or blanks) is an
/// empty list; every element must be a port (so a trailing comma is an error); a repeated port is kept once,
/// at its first place (upstream renders one rule per repetition).
pub fn parse_port_list(s: &str) -> Result<Vec<u16>, String> {
    let t = s.trim();
    if t.is_empty() {
        return Ok(Vec::new());
    }
    let mut out: Vec<u16> = Vec::new();
    for p in t.split(',') {
        let p = parse_port(p)?;
        if !out.contains(&p) {
            out.push(p);
        }
    }
    Ok(out)
}

/// A comma list as istio-iptables' configuration spells it (`config.Split`: empty elements are skipped,
/// none is trimmed), each element read by `parse`.
pub fn split_list<T>(s: &str, parse: impl Fn(&str) -> Result<T, String>) -> Result<Vec<T>, String> {
    s.split(',').filter(|x| !x.is_empty()).map(parse).collect()
}

/// Which ports an inbound include captures.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ports {
    /// `*`: every port.
    All,
    /// These ports; an empty list captures nothing.
    List(Vec<u16>),
}

impl Ports {
    pub fn is_empty(&self) -> bool {
        matches!(self, Ports::List(l) if l.is_empty())
    }
}

/// An IP prefix as Go's `netip.ParsePrefix` accepts it (host bits allowed and kept: `10.0.0.1/8` renders as
/// `10.0.0.1/8`, like upstream). Rendered from the parsed address, so it is always one clean token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr(IpNet);

impl Cidr {
    pub fn parse(s: &str) -> Result<Cidr, String> {
        let (addr, bits) = s
            .split_once('/')
            .ok_or_else(|| format!("{s:?} is not a CIDR (no '/')"))?;
        if addr.contains('%') {
            return Err(format!("{s:?}: zones are not allowed in a CIDR"));
        }
        let ip: IpAddr = addr
            .parse()
            .map_err(|_| format!("{s:?}: {addr:?} is not an IP address"))?;
        let digits_ok = !bits.is_empty()
            && bits.bytes().all(|b| b.is_ascii_digit())
            && (bits == "0" || !bits.starts_with('0'));
        let max = if ip.is_ipv4() { 32 } else { 128 };
        let len: u8 = match bits.parse::<u8>() {
            Ok(n) if digits_ok && n <= max => n,
            _ => return Err(format!("{s:?}: bad prefix length {bits:?}")),
        };
        IpNet::new(ip, len)
            .map(Cidr)
            .map_err(|_| format!("{s:?}: bad prefix length {bits:?}"))
    }

    pub fn net(&self) -> IpNet {
        self.0
    }

    pub fn is_ipv4(&self) -> bool {
        self.0.addr().is_ipv4()
    }

    /// Go's `netip.Addr.IsLoopback` (IPv4-mapped addresses are unmapped first).
    pub fn is_loopback(&self) -> bool {
        unmap(self.0.addr()).is_loopback()
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.0.addr(), self.0.prefix_len())
    }
}

/// IPv4-mapped IPv6 addresses as IPv4 (Go's `Addr.Unmap`).
pub fn unmap(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => ip,
        },
        v4 => v4,
    }
}

/// A comma list of CIDRs as the annotations spell it: no trimming, `""` is empty, every element must parse.
pub fn parse_cidr_list(s: &str) -> Result<Vec<Cidr>, String> {
    if s.is_empty() {
        return Ok(Vec::new());
    }
    s.split(',').map(Cidr::parse).collect()
}

/// Outbound IP ranges to capture.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IpRanges {
    /// `*`: everything.
    All,
    /// These prefixes (both families mixed); empty = no final redirect.
    List(Vec<Cidr>),
}

/// An IP address kept with the text it was given in, for rules that upstream renders verbatim (DNS servers:
/// `::127.0.0.53` stays `::127.0.0.53`). The text is safe: it parsed as an address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IpText {
    pub addr: IpAddr,
    text: String,
}

impl IpText {
    pub fn parse(s: &str) -> Result<IpText, String> {
        let addr: IpAddr = s
            .parse()
            .map_err(|_| format!("{s:?} is not an IP address"))?;
        Ok(IpText {
            addr,
            text: s.to_string(),
        })
    }
}

impl fmt::Display for IpText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// A network interface name: non-empty, at most 15 bytes (IFNAMSIZ-1), `^[a-zA-Z][a-zA-Z0-9_.\-]*$`
/// (upstream `ValidateInterfaceNames`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IfaceName(String);

impl IfaceName {
    pub fn parse(s: &str) -> Result<IfaceName, String> {
        let b = s.as_bytes();
        if b.is_empty() {
            return Err("empty interface name".to_string());
        }
        if b.len() > 15 {
            return Err(format!("interface name {s:?} is longer than 15 characters"));
        }
        let ok = b[0].is_ascii_alphabetic()
            && b.iter()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'-'));
        if !ok {
            return Err(format!(
                "interface name {s:?} must start with a letter and contain only letters, digits, '_', '.', '-'"
            ));
        }
        Ok(IfaceName(s.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for IfaceName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A comma list of interface names; each element is trimmed; only `""` is an empty list (upstream
/// `ValidateInterfaceNames`: a blank value is one empty name, an error).
pub fn parse_iface_list(s: &str) -> Result<Vec<IfaceName>, String> {
    if s.is_empty() {
        return Ok(Vec::new());
    }
    spaces_and_tabs_only(s)?;
    s.split(',').map(|n| IfaceName::parse(n.trim())).collect()
}

/// A group for `-m owner --gid-owner`: a numeric id or a POSIX-ish group name (letters, digits, `_`, `.`,
/// `-`, not starting with `-`, at most 32 bytes, an optional trailing `$`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group(String);

impl Group {
    pub fn parse(s: &str) -> Result<Group, String> {
        let body = s.strip_suffix('$').unwrap_or(s);
        let ok = !body.is_empty()
            && s.len() <= 32
            && !body.starts_with('-')
            && body
                .bytes()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'-'));
        if ok {
            Ok(Group(s.to_string()))
        } else {
            Err(format!("{s:?} is not a group name or id"))
        }
    }
}

impl fmt::Display for Group {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A numeric owner id (uid/gid).
pub fn parse_id(x: &str) -> Result<u32, String> {
    if !x.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{x:?} is not a numeric id"));
    }
    x.parse::<u32>()
        .map_err(|_| format!("id {x} is out of range"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports() {
        assert_eq!(parse_port_list(" 80, 443 ").unwrap(), vec![80, 443]);
        assert_eq!(parse_port_list("").unwrap(), Vec::<u16>::new());
        assert_eq!(parse_port_list("   ").unwrap(), Vec::<u16>::new());
        // Leading zeros are decimal; repeats are kept once, in first-seen order.
        assert_eq!(parse_port_list("080,443, 80,0443").unwrap(), vec![80, 443]);
        for bad in [
            "70000",
            "-1",
            "+1",
            "1111;2222",
            "80,",
            ",80",
            "80,,81",
            "*",
            "8 0",
            "0x50",
        ] {
            assert!(parse_port_list(bad).is_err(), "{bad}");
        }
        assert_eq!(
            split_list("6000,7000,", parse_port).unwrap(),
            vec![6000, 7000]
        );
    }

    #[test]
    fn cidrs_render_like_go_netip() {
        let c = Cidr::parse("10.0.0.1/8").unwrap();
        assert_eq!(c.to_string(), "10.0.0.1/8");
        assert_eq!(
            Cidr::parse("2001:DB8:0:0::/32").unwrap().to_string(),
            "2001:db8::/32"
        );
        assert_eq!(
            Cidr::parse("::ffff:127.0.0.1/128").unwrap().to_string(),
            "::ffff:127.0.0.1/128"
        );
        assert!(Cidr::parse("::ffff:127.0.0.1/128").unwrap().is_loopback());
        assert!(Cidr::parse("127.0.0.0/8").unwrap().is_loopback());
        assert!(!Cidr::parse("10.0.0.0/8").unwrap().is_loopback());
        for bad in [
            "10.0.0.0",
            "10.0.0.0/33",
            "10.0.0.0/08",
            "10.0.0.0/+8",
            " 10.0.0.0/8",
            "10.0.0.0/8 ",
            "fe80::1%eth0/64",
            "010.0.0.0/8",
            "10.0.0.0/8 -j ACCEPT",
            "*",
            "",
        ] {
            assert!(Cidr::parse(bad).is_err(), "{bad}");
        }
        assert!(parse_cidr_list("1.1.1.1/32, 2.2.2.2/32").is_err());
        assert!(parse_cidr_list("1.1.1.1/32,").is_err());
        assert_eq!(parse_cidr_list("").unwrap(), vec![]);
    }

    #[test]
    fn interface_names() {
        assert_eq!(parse_iface_list("eth0, net1").unwrap().len(), 2);
        assert!(parse_iface_list("").unwrap().is_empty());
        for bad in [
            "eth0,",
            "0eth",
            "eth0 -j ACCEPT",
            "averyveryverylongname",
            "et*h",
            "eth0\nx",
            "eth0;",
        ] {
            assert!(parse_iface_list(bad).is_err(), "{bad:?}");
        }
        assert!(IfaceName::parse("a23456789012345").is_ok());
        // Elements are trimmed of spaces and tabs (as upstream, where iptables-restore and nft separate
        // tokens on them) and rendered trimmed; a line break would split upstream's rule line.
        assert_eq!(parse_iface_list(" eth0\t").unwrap()[0].as_str(), "eth0");
        assert!(parse_iface_list(" eth0\n").is_err());
    }

    #[test]
    fn groups_and_ids() {
        assert_eq!(split_list("java,202", Group::parse).unwrap().len(), 2);
        assert!(split_list("java ftp", Group::parse).is_err());
        assert!(split_list("-j", Group::parse).is_err());
        assert!(split_list("a\nb", Group::parse).is_err());
        assert_eq!(split_list("3,4", parse_id).unwrap(), vec![3, 4]);
        assert!(split_list("root", parse_id).is_err());
        assert!(split_list("4294967296", parse_id).is_err());
    }
}
