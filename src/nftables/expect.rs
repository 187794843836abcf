//! Conntrack expectations, which both modes' redirects trust (pure). A helper makes expectations from
//! what it reads in a connection (FTP's `PORT`); ctnetlink makes them on request, on any connection given
//! a helper, for any destination, with any source wildcarded and `PERMANENT` (not used up by one
//! connection), and with a NAT function. A connection conntrack expected skips our redirect:
//! - TPROXY mode: our mangle inbound chain (as upstream's) sends a packet whose connection is `RELATED` or
//!   `ESTABLISHED` to the divert chain (mark, accept) before the TPROXY rule, so the first packet of an
//!   expected connection is never handed to the proxy: a TCP expectation to the pod's 8080 takes every new
//!   inbound connection to the app past the proxy while no rule changed (measured);
//! - either mode: with a NAT function (`nat-follow-master`, or a NAT helper's) the connection is bound when
//!   conntrack creates it, so no nat chain runs on it, our REDIRECT neither: the same expectation with
//!   `nat-follow-master` takes inbound past REDIRECT mode's 15006 (measured), and one for outbound TCP or
//!   DNS would take it past 15001 or 15053.
//!
//! A pod's namespace normally holds none: the kernel assigns no helper by itself (off by default since 4.7,
//! gone in 6.0), and a rule that does is named as it runs before ours. So every expectation is named (fail
//! closed). Where a node turns automatic helpers on (`net.netfilter.nf_conntrack_helper=1`, kernels before
//! 6.0), a pod's own FTP, SIP or TFTP connections make expectations and CHECK names them too: in TPROXY
//! mode, or with a NAT helper, their connections do skip the proxy; a plain one in REDIRECT mode would
//! not, and is named all the same. The dump request and its decoding go over the nf_tables socket, as
//! [`super::conntrack`]'s.

use super::conntrack::{tuple, Tuple};
use super::decode::{self, be32_or0, get, string, Msg};
use super::encode::message;
use crate::error::{Error, Result};
use crate::netlink::{NLM_F_DUMP, NLM_F_REQUEST};

/// `NFNL_SUBSYS_CTNETLINK_EXP`, `IPCTNL_MSG_EXP_GET`.
const EXP_GET: u16 = (2 << 8) | 1;
const CTA_EXPECT_TUPLE: u16 = 2;
const CTA_EXPECT_HELP_NAME: u16 = 6;
const CTA_EXPECT_FLAGS: u16 = 8;
const CTA_EXPECT_FN: u16 = 11;
/// `NF_CT_EXPECT_PERMANENT`.
const PERMANENT: u32 = 1;

/// An expectation as dumped: what it expects (the source as given, a wildcard reads 0), its helper,
/// flags and NAT function.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expectation {
    pub tuple: Tuple,
    pub helper: Option<String>,
    pub flags: u32,
    pub nat_fn: Option<String>,
}

/// The dump of `family`'s (`AF_INET`, `AF_INET6`) expectations of the socket's namespace.
pub fn dump_request(family: u8, seq: u32) -> Vec<u8> {
    message(EXP_GET, NLM_F_REQUEST | NLM_F_DUMP, seq, family, 0, &[])
}

/// An expectation of a dump.
pub fn expectation(m: &Msg) -> Result<Expectation> {
    let a = decode::nft_attrs(m)?;
    let t = get(&a, CTA_EXPECT_TUPLE)
        .ok_or_else(|| Error::other("malformed conntrack expectation: no tuple"))?;
    let flags = be32_or0(&a, CTA_EXPECT_FLAGS)?;
    Ok(Expectation {
        tuple: tuple(t)?,
        helper: get(&a, CTA_EXPECT_HELP_NAME).map(string),
        flags,
        nat_fn: get(&a, CTA_EXPECT_FN).map(string),
    })
}

/// How many expectations are named one by one; the rest are counted (the kernel allows thousands).
const NAMED: usize = 8;

/// The protocol's name in a finding.
fn proto_name(p: u8) -> String {
    match p {
        6 => "tcp".into(),
        17 => "udp".into(),
        n => format!("protocol {n}"),
    }
}

/// One line per expectation (see the module comment), the first `NAMED` (8) of them, then how many more:
/// `conntrack ({family}): expectation {proto} {src} -> {dst} (helper {h}[, permanent][, {fn}]): …`.
pub fn findings(exps: &[Expectation]) -> Vec<String> {
    let mut out: Vec<String> = exps
        .iter()
        .take(NAMED)
        .map(|e| {
            let fam = if e.tuple.dst.is_ipv4() { "IPv4" } else { "IPv6" };
            let mut how = vec![format!(
                "helper {}",
                e.helper.as_deref().unwrap_or("none")
            )];
            if e.flags & PERMANENT != 0 {
                how.push("permanent".into());
            }
            how.extend(e.nat_fn.clone());
            format!(
                "conntrack ({fam}): expectation {} {} -> {} ({}): a connection it expects skips our \
                 redirect (TPROXY mode lets RELATED packets past the TPROXY rule; a NAT function binds \
                 the connection before any nat chain runs)",
                proto_name(e.tuple.proto),
                e.tuple.src,
                e.tuple.dst,
                how.join(", ")
            )
        })
        .collect();
    if exps.len() > NAMED {
        out.push(format!(
            "conntrack: {} more expectations",
            exps.len() - NAMED
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nftables::conntrack::{AF_INET, IPPROTO_TCP};
    use crate::nftables::encode::Attrs;

    /// An expectation as the kernel dumps it: tuple `proto` 0.0.0.0:0 -> 10.0.0.2:`port`, helper tftp, and
    /// with `flags` a NAT function.
    fn dumped(proto: u8, port: u16, flags: Option<u32>) -> Vec<u8> {
        let mut a = Attrs::default();
        a.nest(CTA_EXPECT_TUPLE, |t| {
            t.nest(1, |i| {
                i.put(1, &[0, 0, 0, 0]).put(2, &[10, 0, 0, 2]);
            });
            t.nest(2, |p| {
                p.put(1, &[proto])
                    .put(2, &0u16.to_be_bytes())
                    .put(3, &port.to_be_bytes());
            });
        });
        a.put(CTA_EXPECT_HELP_NAME, b"tftp\0");
        if let Some(f) = flags {
            a.be32(CTA_EXPECT_FLAGS, f);
            a.put(CTA_EXPECT_FN, b"nat-follow-master\0");
        }
        message(EXP_GET, 0x2, 7, AF_INET, 0, &a.buf)
    }

    fn read(buf: &[u8]) -> Result<Expectation> {
        expectation(&decode::messages(buf)?[0])
    }

    /// Every expectation is named with its protocol, destination, helper, permanence and NAT function;
    /// past `NAMED` they are counted.
    #[test]
    fn every_expectation_is_named() {
        let perm = read(&dumped(IPPROTO_TCP, 8080, Some(1))).unwrap();
        assert_eq!(perm.tuple.dst, "10.0.0.2:8080".parse().unwrap());
        assert_eq!(perm.helper.as_deref(), Some("tftp"));
        assert_eq!(perm.nat_fn.as_deref(), Some("nat-follow-master"));
        let once = read(&dumped(IPPROTO_TCP, 20, None)).unwrap();
        assert_eq!(once.nat_fn, None);
        let udp = read(&dumped(17, 53, Some(0))).unwrap();
        let f = findings(&[perm, once, udp]);
        let heads = [
            "conntrack (IPv4): expectation tcp 0.0.0.0:0 -> 10.0.0.2:8080 (helper tftp, permanent, nat-follow-master): ",
            "conntrack (IPv4): expectation tcp 0.0.0.0:0 -> 10.0.0.2:20 (helper tftp): ",
            "conntrack (IPv4): expectation udp 0.0.0.0:0 -> 10.0.0.2:53 (helper tftp, nat-follow-master): ",
        ];
        assert_eq!(f.len(), heads.len(), "{f:?}");
        for (line, head) in f.iter().zip(heads) {
            assert!(line.starts_with(head), "{line}");
        }
        let many: Vec<Expectation> = (0..10)
            .map(|i| read(&dumped(IPPROTO_TCP, 9000 + i, None)).unwrap())
            .collect();
        let f = findings(&many);
        assert_eq!(f.len(), NAMED + 1);
        assert_eq!(f[NAMED], "conntrack: 2 more expectations");
        let req = dump_request(10, 3);
        let m = &decode::messages(&req).unwrap()[0];
        assert_eq!((m.kind, m.flags, m.body[0]), (0x201, 0x301, 10));
    }

    #[test]
    fn an_expectation_without_a_tuple_is_an_error_not_a_panic() {
        let empty = message(EXP_GET, 0x2, 1, AF_INET, 0, &[]);
        assert!(read(&empty).is_err());
    }
}
