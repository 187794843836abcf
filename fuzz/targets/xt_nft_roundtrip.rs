//! iptables-nft's rule codec (`iptables::nft`): any bytes read as a rule's `NFTA_RULE_EXPRESSIONS` decode to
//! a rule, never a panic, and a decoded rule we can encode encodes and decodes to itself; a rule built from
//! the bytes (selector byte odd) encodes as iptables-nft 1.8.7 would and decodes to the same rule.
//! The body of the cargo-fuzz target of the same name (fuzz/fuzz_targets/), also run on stable by
//! tests/fuzz (seeds and mutations).

use istio_cni::iptables::nft::{decode_rule, encode_rule, xexpr};
use istio_cni::netfilter::Family;
use istio_cni::nftables::encode::Attrs;
use istio_cni::xtables::rule::*;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

pub fn run(data: &[u8]) {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let family = if sel & 2 == 0 { Family::V4 } else { Family::V6 };
    let rule = if sel & 1 == 0 {
        let Ok(exprs) = xexpr::decode(rest) else {
            return;
        };
        decode_rule::decode(family, &exprs)
    } else {
        build(family, &mut Bytes(rest))
    };
    let Ok(exprs) = encode_rule::encode(family, &rule) else {
        // Only what the reader could not name (or a built rule iptables cannot write) is refused.
        return;
    };
    let mut a = Attrs::default();
    xexpr::encode(&exprs, &mut a);
    let again = xexpr::decode(&a.buf[4..]).expect("our own expressions parse");
    assert_eq!(again, exprs);
    assert_eq!(decode_rule::decode(family, &again), rule);
}

struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn u8(&mut self) -> u8 {
        let Some((&b, rest)) = self.0.split_first() else {
            return 0;
        };
        self.0 = rest;
        b
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }
    fn flag(&mut self) -> bool {
        self.u8() & 1 == 1
    }
    fn name(&mut self) -> String {
        let n = 1 + self.u8() as usize % 15;
        let mut s: String = (0..n)
            .map(|_| b"abcdefghijklmnopqrstuvwxyz0123456789-._"[self.u8() as usize % 39] as char)
            .collect();
        if n > 1 && self.flag() {
            s.pop();
            s.push('+');
        }
        s
    }
    fn net(&mut self, family: Family) -> ipnet::IpNet {
        let addr = match family {
            Family::V4 => IpAddr::V4(Ipv4Addr::from(self.u32())),
            Family::V6 => {
                let mut b = [0u8; 16];
                b.iter_mut().for_each(|x| *x = self.u8());
                IpAddr::V6(Ipv6Addr::from(b))
            }
        };
        let max = if family == Family::V4 { 32 } else { 128 };
        let prefix = 1 + self.u8() % max;
        ipnet::IpNet::new(addr, prefix)
            .expect("prefix in range")
            .trunc()
    }
}

fn build(family: Family, b: &mut Bytes) -> Rule {
    let mut r = Rule::any();
    let f = b.u8();
    if f & 1 != 0 {
        r.src = Some(Neg {
            inv: b.flag(),
            value: b.net(family),
        });
    }
    if f & 2 != 0 {
        r.dst = Some(Neg {
            inv: b.flag(),
            value: b.net(family),
        });
    }
    if f & 4 != 0 {
        r.iif = Some(Neg {
            inv: b.flag(),
            value: b.name(),
        });
    }
    if f & 8 != 0 {
        r.oif = Some(Neg {
            inv: b.flag(),
            value: b.name(),
        });
    }
    r.proto = match (f >> 4) & 3 {
        0 => None,
        1 => Some(TCP),
        2 => Some(UDP),
        _ => Some(b.u8().max(1)),
    };
    for _ in 0..b.u8() % 4 {
        let m = match b.u8() % 6 {
            0 if matches!(r.proto, Some(TCP | UDP)) => Match::Port {
                dir: if b.flag() { PortDir::Src } else { PortDir::Dst },
                port: b.u16(),
                inv: b.flag(),
            },
            1 => Match::Multiport {
                ports: (0..1 + b.u8() % 15).map(|_| b.u16()).collect(),
                inv: b.flag(),
            },
            2 => Match::Owner {
                kind: if b.flag() {
                    OwnerKind::Uid
                } else {
                    OwnerKind::Gid
                },
                id: b.u32(),
                inv: b.flag(),
            },
            3 => Match::Mark {
                mark: b.u32(),
                mask: b.u32(),
                inv: b.flag(),
            },
            4 => Match::Connmark {
                mark: b.u32(),
                mask: b.u32(),
                inv: b.flag(),
            },
            _ => Match::Conntrack {
                states: b.u16() as u32,
            },
        };
        r.matches.push(m);
    }
    r.target = match b.u8() % 11 {
        0 => Target::None,
        1 => Target::Accept,
        2 => Target::Drop,
        3 => Target::Return,
        4 => Target::Jump(b.name().replace('+', "_")),
        5 => Target::Redirect { port: b.u16() },
        6 => Target::Mark {
            mark: b.u32(),
            mask: b.u32(),
        },
        7 => Target::Connmark {
            mode: if b.flag() {
                ConnmarkMode::Save
            } else {
                ConnmarkMode::Restore
            },
            nfmask: b.u32(),
            ctmask: b.u32(),
        },
        8 => Target::Tproxy {
            port: b.u16(),
            mark: b.u32(),
            mask: b.u32(),
        },
        _ => Target::Ct { zone: b.u16() },
    };
    r
}
