//! The payloads of the matches and targets our rules use, as `iptables-legacy` 1.8.7-1.8.11 writes them
//! into an `ipt_entry` (pure; research in issue 40 §3.2): `xt_entry_match` / `xt_entry_target` = a 32-byte
//! header (u16 size, `name[29]`, revision) and the extension's info struct padded to 8 bytes. Host byte
//! order except where the struct says big-endian (NAT and TPROXY ports). Anything else decodes to
//! [`Match::Other`] / [`Target::Other`] naming the extension and its revision.

use crate::error::{Error, Result};
use crate::netfilter::Family;
use crate::xtables::rule::{ConnmarkMode, Match, OwnerKind, PortDir, Target, TCP, UDP};

/// `xt_entry_match` / `xt_entry_target` header.
pub const EXT_HEADER: usize = 32;
/// Longest extension name (`XT_EXTENSION_MAXNAMELEN` - 1).
const NAME_MAX: usize = 28;
/// `xt_standard_target`: the header and an i32 verdict, padded.
pub const STANDARD_SIZE: usize = 40;
/// `xt_error_target`: the header and `errorname[30]`, padded.
pub const ERROR_SIZE: usize = 64;

/// `XT_ALIGN`: 8 bytes on 64-bit.
pub fn align(n: usize) -> usize {
    (n + 7) & !7
}

/// One extension: header + `payload` padded with zeros.
pub fn ext(name: &str, rev: u8, payload: &[u8]) -> Vec<u8> {
    let size = EXT_HEADER + align(payload.len());
    let mut v = vec![0u8; size];
    v[..2].copy_from_slice(&(size as u16).to_ne_bytes());
    let n = name.len().min(NAME_MAX);
    v[2..2 + n].copy_from_slice(&name.as_bytes()[..n]);
    v[31] = rev;
    v[EXT_HEADER..EXT_HEADER + payload.len()].copy_from_slice(payload);
    v
}

/// A standard target with `verdict` (negative: `-NF_x - 1`; positive: an offset, filled in by the
/// layout).
pub fn standard(verdict: i32) -> Vec<u8> {
    ext("", 0, &verdict.to_ne_bytes())
}

/// An `ERROR` target naming a user chain (or `ERROR` at the end of the table).
pub fn error(name: &str) -> Vec<u8> {
    let mut p = [0u8; ERROR_SIZE - EXT_HEADER];
    let n = name.len().min(p.len() - 1);
    p[..n].copy_from_slice(&name.as_bytes()[..n]);
    ext("ERROR", 0, &p)
}

pub const VERDICT_ACCEPT: i32 = -2;
pub const VERDICT_DROP: i32 = -1;
pub const VERDICT_RETURN: i32 = -5;

fn u16_ne(b: &[u8], i: usize) -> u16 {
    u16::from_ne_bytes([b[i], b[i + 1]])
}
fn u32_ne(b: &[u8], i: usize) -> u32 {
    u32::from_ne_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
}
fn u16_be(b: &[u8], i: usize) -> u16 {
    u16::from_be_bytes([b[i], b[i + 1]])
}

/// The extension name `-m tcp|udp` takes from the rule's `-p`.
fn port_match_name(proto: Option<u8>) -> Result<&'static str> {
    match proto {
        Some(TCP) => Ok("tcp"),
        Some(UDP) => Ok("udp"),
        _ => Err(Error::Rules(
            "a --sport/--dport match needs -p tcp or -p udp".into(),
        )),
    }
}

/// `xt_entry_match` for `m` in a rule whose `-p` is `proto`.
pub fn encode_match(m: &Match, proto: Option<u8>) -> Result<Vec<u8>> {
    Ok(match m {
        Match::Port { dir, port, inv } => {
            let name = port_match_name(proto)?;
            // xt_tcp {spts[2], dpts[2], option, flg_mask, flg_cmp, invflags}; xt_udp {spts, dpts, invflags}.
            let mut p = [0u8; 12];
            let (mine, other, bit) = match dir {
                PortDir::Src => (0, 4, 0x01u8),
                PortDir::Dst => (4, 0, 0x02u8),
            };
            p[mine..mine + 2].copy_from_slice(&port.to_ne_bytes());
            p[mine + 2..mine + 4].copy_from_slice(&port.to_ne_bytes());
            p[other + 2..other + 4].copy_from_slice(&u16::MAX.to_ne_bytes());
            let inv_at = if name == "tcp" { 11 } else { 8 };
            p[inv_at] = if *inv { bit } else { 0 };
            let len = if name == "tcp" { 12 } else { 10 };
            ext(name, 0, &p[..len])
        }
        Match::Multiport { ports, inv } => {
            if ports.is_empty() || ports.len() > 15 {
                return Err(Error::Rules(format!(
                    "-m multiport takes 1 to 15 ports, not {}",
                    ports.len()
                )));
            }
            port_match_name(proto)?;
            let mut p = [0u8; 48];
            p[0] = 1; // XT_MULTIPORT_DESTINATION
            p[1] = ports.len() as u8;
            for (i, port) in ports.iter().enumerate() {
                p[2 + 2 * i..4 + 2 * i].copy_from_slice(&port.to_ne_bytes());
            }
            p[47] = u8::from(*inv);
            ext("multiport", 1, &p)
        }
        Match::Owner { kind, id, inv } => {
            let mut p = [0u8; 20];
            let (at, bit) = match kind {
                OwnerKind::Uid => (0, 1u8),
                OwnerKind::Gid => (8, 2u8),
            };
            p[at..at + 4].copy_from_slice(&id.to_ne_bytes());
            p[at + 4..at + 8].copy_from_slice(&id.to_ne_bytes());
            p[16] = bit;
            p[17] = if *inv { bit } else { 0 };
            ext("owner", 1, &p)
        }
        Match::Mark { mark, mask, inv } => ext("mark", 1, &mark_info(*mark, *mask, *inv)),
        Match::Connmark { mark, mask, inv } => ext("connmark", 1, &mark_info(*mark, *mask, *inv)),
        Match::Conntrack { states } => {
            let states = u16::try_from(*states)
                .map_err(|_| Error::Rules(format!("--ctstate bits {states:#x} out of range")))?;
            let mut p = [0u8; 164];
            p[146..148].copy_from_slice(&1u16.to_ne_bytes()); // XT_CONNTRACK_STATE
            p[150..152].copy_from_slice(&states.to_ne_bytes());
            ext("conntrack", 3, &p)
        }
        Match::Other(text) => {
            return Err(Error::Rules(format!(
                "cannot write a match we only read: {text}"
            )))
        }
    })
}

/// `xt_mark_mtinfo1` / `xt_connmark_mtinfo1`: mark, mask, invert.
fn mark_info(mark: u32, mask: u32, inv: bool) -> [u8; 12] {
    let mut p = [0u8; 12];
    p[..4].copy_from_slice(&mark.to_ne_bytes());
    p[4..8].copy_from_slice(&mask.to_ne_bytes());
    p[8] = u8::from(inv);
    p
}

/// The match an extension's payload describes (its `-p` is `proto`); anything we do not model is
/// [`Match::Other`]. Whether the bytes are exactly ours is checked by re-encoding.
pub fn decode_match(name: &str, rev: u8, d: &[u8]) -> Match {
    let other = || Match::Other(format!("-m {name} (revision {rev})"));
    match (name, rev, d.len()) {
        ("tcp", 0, 16) | ("udp", 0, 16) => {
            let inv = if name == "tcp" { d[11] } else { d[8] };
            let (sp, dp) = ((u16_ne(d, 0), u16_ne(d, 2)), (u16_ne(d, 4), u16_ne(d, 6)));
            let any = (0, u16::MAX);
            if sp == any && dp.0 == dp.1 && inv & !0x02 == 0 {
                Match::Port {
                    dir: PortDir::Dst,
                    port: dp.0,
                    inv: inv == 0x02,
                }
            } else if dp == any && sp.0 == sp.1 && inv & !0x01 == 0 {
                Match::Port {
                    dir: PortDir::Src,
                    port: sp.0,
                    inv: inv == 0x01,
                }
            } else {
                other()
            }
        }
        ("multiport", 1, 48) if d[0] == 1 && (1..=15).contains(&d[1]) => Match::Multiport {
            ports: (0..usize::from(d[1]))
                .map(|i| u16_ne(d, 2 + 2 * i))
                .collect(),
            inv: d[47] != 0,
        },
        ("owner", 1, 24) => {
            let (kind, at) = match d[16] {
                1 => (OwnerKind::Uid, 0),
                2 => (OwnerKind::Gid, 8),
                _ => return other(),
            };
            Match::Owner {
                kind,
                id: u32_ne(d, at),
                inv: d[17] != 0,
            }
        }
        ("mark", 1, 16) => Match::Mark {
            mark: u32_ne(d, 0),
            mask: u32_ne(d, 4),
            inv: d[8] != 0,
        },
        ("connmark", 1, 16) => Match::Connmark {
            mark: u32_ne(d, 0),
            mask: u32_ne(d, 4),
            inv: d[8] != 0,
        },
        ("conntrack", 3, 168) if u16_ne(d, 146) == 1 => Match::Conntrack {
            states: u32::from(u16_ne(d, 150)),
        },
        _ => other(),
    }
}

/// `xt_entry_target` for `t`; a jump or fall-through is a standard target whose verdict the layout
/// fills in.
pub fn encode_target(family: Family, t: &Target) -> Result<Vec<u8>> {
    Ok(match t {
        Target::None | Target::Jump(_) => standard(0),
        Target::Accept => standard(VERDICT_ACCEPT),
        Target::Drop => standard(VERDICT_DROP),
        Target::Return => standard(VERDICT_RETURN),
        Target::Redirect { port } => match family {
            Family::V4 => {
                // nf_nat_ipv4_multi_range_compat: rangesize 1, range {flags, min_ip, max_ip, min, max}.
                let mut p = [0u8; 20];
                p[..4].copy_from_slice(&1u32.to_ne_bytes());
                p[4..8].copy_from_slice(&2u32.to_ne_bytes()); // NF_NAT_RANGE_PROTO_SPECIFIED
                p[16..18].copy_from_slice(&port.to_be_bytes());
                p[18..20].copy_from_slice(&port.to_be_bytes());
                ext("REDIRECT", 0, &p)
            }
            Family::V6 => {
                // nf_nat_range: flags, min_addr, max_addr, min_proto, max_proto.
                let mut p = [0u8; 40];
                p[..4].copy_from_slice(&2u32.to_ne_bytes());
                p[36..38].copy_from_slice(&port.to_be_bytes());
                p[38..40].copy_from_slice(&port.to_be_bytes());
                ext("REDIRECT", 0, &p)
            }
        },
        Target::Mark { mark, mask } => {
            let mut p = [0u8; 8];
            p[..4].copy_from_slice(&mark.to_ne_bytes());
            p[4..].copy_from_slice(&mask.to_ne_bytes());
            ext("MARK", 2, &p)
        }
        Target::Connmark {
            mode,
            nfmask,
            ctmask,
        } => {
            // xt_connmark_tginfo2: ctmark, ctmask, nfmask, shift_dir, shift_bits, mode.
            let mut p = [0u8; 16];
            p[4..8].copy_from_slice(&ctmask.to_ne_bytes());
            p[8..12].copy_from_slice(&nfmask.to_ne_bytes());
            p[14] = match mode {
                ConnmarkMode::Save => 1,
                ConnmarkMode::Restore => 2,
            };
            ext("CONNMARK", 2, &p)
        }
        Target::Tproxy { port, mark, mask } => {
            // xt_tproxy_target_info_v1: mark_mask, mark_value, laddr (unspecified), lport (be16).
            let mut p = [0u8; 28];
            p[..4].copy_from_slice(&mask.to_ne_bytes());
            p[4..8].copy_from_slice(&mark.to_ne_bytes());
            p[24..26].copy_from_slice(&port.to_be_bytes());
            ext("TPROXY", 1, &p)
        }
        Target::Ct { zone } => {
            // xt_ct_target_info_v1: flags, zone, events, helper, timeout, and the kernel's pointer.
            let mut p = [0u8; 72];
            p[2..4].copy_from_slice(&zone.to_ne_bytes());
            ext("CT", 2, &p)
        }
        Target::Other(text) => {
            return Err(Error::Rules(format!(
                "cannot write a target we only read: {text}"
            )))
        }
    })
}

/// The target an extension's payload describes. A standard target's jump or fall-through has been
/// resolved by the layout: `link` is it (`None` for a verdict).
pub fn decode_target(
    family: Family,
    name: &str,
    rev: u8,
    d: &[u8],
    link: Option<Target>,
) -> Target {
    let other = || Target::Other(format!("-j {name} (revision {rev})"));
    if name.is_empty() {
        if let Some(t) = link {
            return t;
        }
        let Some(v) = d
            .get(..4)
            .map(|b| i32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
        else {
            return Target::Other("-j (a standard target without a verdict)".into());
        };
        return match v {
            VERDICT_ACCEPT => Target::Accept,
            VERDICT_DROP => Target::Drop,
            VERDICT_RETURN => Target::Return,
            -4 => Target::Other("-j QUEUE".into()),
            _ => Target::Other(format!("-j (standard verdict {v})")),
        };
    }
    match (name, rev, d.len(), family) {
        ("REDIRECT", 0, 24, Family::V4) if u32_ne(d, 0) == 1 && u32_ne(d, 4) == 2 => {
            Target::Redirect {
                port: u16_be(d, 16),
            }
        }
        ("REDIRECT", 0, 40, Family::V6) if u32_ne(d, 0) == 2 => Target::Redirect {
            port: u16_be(d, 36),
        },
        ("MARK", 2, 8, _) => Target::Mark {
            mark: u32_ne(d, 0),
            mask: u32_ne(d, 4),
        },
        ("CONNMARK", 2, 16, _) if d[14] == 1 || d[14] == 2 => Target::Connmark {
            mode: if d[14] == 1 {
                ConnmarkMode::Save
            } else {
                ConnmarkMode::Restore
            },
            nfmask: u32_ne(d, 8),
            ctmask: u32_ne(d, 4),
        },
        // Only the unspecified --on-ip (bytes 8..24) is ours.
        ("TPROXY", 1, 32, _) if zeros(&d[8..24]) => Target::Tproxy {
            port: u16_be(d, 24),
            mark: u32_ne(d, 4),
            mask: u32_ne(d, 0),
        },
        // Only a zone: no flags (--notrack), events, helper or timeout; the last 8 bytes are the kernel's
        // conntrack template pointer.
        ("CT", 2, 72, _) if zeros(&d[0..2]) && zeros(&d[4..64]) => {
            Target::Ct { zone: u16_ne(d, 2) }
        }
        // Not ours, but the bypass CHECK names most: named as iptables-save names it.
        ("CT", 2, 72, _) if u16_ne(d, 0) == 1 && zeros(&d[2..64]) => {
            Target::Other("-j CT --notrack".into())
        }
        _ => other(),
    }
}

fn zeros(b: &[u8]) -> bool {
    b.iter().all(|&x| x == 0)
}
