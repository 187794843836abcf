//! Rule specs as text (pure), this file the parser, [`render`] the way back, `doc` whole documents: parsing what our generator writes into restore documents (and what
//! `iptables-save` prints, so a dump's lines parse too) into [`Rule`]s and [`TableOps`], and rendering a
//! [`Rule`] back exactly as `iptables-save` 1.8.7-1.8.11 prints it: `[!] -s [!] -d [!] -i [!] -o -p` first,
//! then the matches in rule order (`-m tcp` named for an implicit `--dport`), then the target with every
//! option the tool prints (`--set-xmark V/M`, CONNMARK's masks, TPROXY's `--on-ip`), marks in hex. Only the
//! options of [`super::rule`] are known; anything else is an error naming it (the generator never writes
//! it, so it is a bug, never something to skip).

use super::rule::*;
use crate::error::{Error, Result};
use crate::netfilter::Family;
use ipnet::IpNet;
use std::net::IpAddr;

/// Resolves an owner name (`--gid-owner java`) to its number, as the node's tool would through NSS.
pub type Names<'a> = &'a dyn Fn(OwnerKind, &str) -> Result<u32>;

fn bad(spec: &str, why: String) -> Error {
    Error::Rules(format!("rule spec {spec:?}: {why}"))
}

/// A decimal or `0x` hexadecimal number.
fn number(s: &str) -> Option<u32> {
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u32::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

/// `V` or `V/M` (mask 0xffffffff when absent).
fn mark(s: &str) -> Option<(u32, u32)> {
    match s.split_once('/') {
        Some((v, m)) => Some((number(v)?, number(m)?)),
        None => Some((number(s)?, u32::MAX)),
    }
}

fn port(s: &str) -> Option<u16> {
    s.parse().ok()
}

fn proto_number(s: &str) -> Option<u8> {
    match s {
        "tcp" => Some(TCP),
        "udp" => Some(UDP),
        "icmp" => Some(1),
        "sctp" => Some(132),
        "ipv6-icmp" | "icmpv6" => Some(58),
        n => n.parse().ok(),
    }
}

pub(super) fn proto_name(p: u8) -> String {
    match p {
        TCP => "tcp".into(),
        UDP => "udp".into(),
        1 => "icmp".into(),
        58 => "ipv6-icmp".into(),
        132 => "sctp".into(),
        n => n.to_string(),
    }
}

/// An address with an optional prefix length, masked; a host without one is `/32` or `/128`.
fn net(family: Family, s: &str) -> Option<IpNet> {
    let (a, len) = match s.split_once('/') {
        Some((a, l)) => (a, Some(l.parse::<u8>().ok()?)),
        None => (s, None),
    };
    let addr: IpAddr = a.parse().ok()?;
    let full = match (family, addr) {
        (Family::V4, IpAddr::V4(_)) => 32,
        (Family::V6, IpAddr::V6(_)) => 128,
        _ => return None,
    };
    IpNet::new(addr, len.unwrap_or(full))
        .ok()
        .map(|n| n.trunc())
}

pub(super) const CT_STATES: [(u32, &str); 5] = [
    (CT_INVALID, "INVALID"),
    (CT_NEW, "NEW"),
    (CT_RELATED, "RELATED"),
    (CT_ESTABLISHED, "ESTABLISHED"),
    (CT_UNTRACKED, "UNTRACKED"),
];

/// Parses one rule spec (the text after `-A CHAIN`): the header's options (`header_option`), each `-m`
/// module's (`match_option`), `!` before the option it negates, and the target last (`target`).
pub fn parse_rule(family: Family, spec: &str, names: Names) -> Result<Rule> {
    let toks: Vec<&str> = spec.split_whitespace().collect();
    let mut r = Rule::any();
    // The `-m` whose options follow, and whether the last token was `!`.
    let mut module: Option<&str> = None;
    let mut inv = false;
    let mut i = 0;
    let arg = |i: usize, opt: &str| -> Result<&str> {
        toks.get(i + 1)
            .copied()
            .ok_or_else(|| bad(spec, format!("{opt} needs a value")))
    };
    while i < toks.len() {
        let t = toks[i];
        match t {
            "!" if inv => return Err(bad(spec, "two `!` in a row".into())),
            "!" => {
                inv = true;
                i += 1;
                continue;
            }
            "-m" | "--match" => {
                module = Some(arg(i, t)?);
                i += 2;
                continue;
            }
            "-j" | "--jump" => {
                r.target = target(spec, &toks[i + 1..])?;
                return finish(spec, r, inv);
            }
            _ => {
                let opt = Opt {
                    spec,
                    name: t,
                    value: arg(i, t)?,
                    inv,
                };
                if !header_option(family, &opt, &mut r)? {
                    match_option(&opt, module, names, &mut r)?;
                }
            }
        }
        inv = false;
        i += 2;
    }
    finish(spec, r, inv)
}

/// One option of a rule spec with its value, and whether a `!` came before it.
struct Opt<'a> {
    spec: &'a str,
    name: &'a str,
    value: &'a str,
    inv: bool,
}

/// `-s`, `-d`, `-i`, `-o` or `-p` (the `ipt_entry` header's fields) into `r`; whether `o` was one.
fn header_option(family: Family, o: &Opt, r: &mut Rule) -> Result<bool> {
    let (t, v, inv) = (o.name, o.value, o.inv);
    match t {
        "-s" | "--source" | "-d" | "--destination" => {
            let n = net(family, v)
                .ok_or_else(|| bad(o.spec, format!("{t} {v}: not an {} address", family.name())))?;
            let n = (n.prefix_len() > 0 || inv).then_some(Neg { inv, value: n });
            if t.starts_with("-s") || t == "--source" {
                r.src = n;
            } else {
                r.dst = n;
            }
        }
        "-i" | "--in-interface" | "-o" | "--out-interface" => {
            let n = Some(Neg {
                inv,
                value: v.to_string(),
            });
            if t.starts_with("-i") || t == "--in-interface" {
                r.iif = n;
            } else {
                r.oif = n;
            }
        }
        "-p" | "--protocol" => {
            if inv {
                return Err(bad(o.spec, "`! -p` is not supported".into()));
            }
            r.proto = match v {
                "all" | "0" => None,
                _ => Some(
                    proto_number(v).ok_or_else(|| bad(o.spec, format!("unknown protocol {v}")))?,
                ),
            };
        }
        _ => return Ok(false),
    }
    Ok(true)
}

/// An option of the match `module` (the last `-m`, if any) into `r`: ports (`-m tcp`/`udp`, or `-p` alone),
/// multiport, owner, mark, connmark, conntrack state. Anything else is refused, naming it.
fn match_option(o: &Opt, module: Option<&str>, names: Names, r: &mut Rule) -> Result<()> {
    let (spec, t, v, inv) = (o.spec, o.name, o.value, o.inv);
    match t {
        "--dport" | "--destination-port" | "--sport" | "--source-port" => {
            let proto_ok = matches!(r.proto, Some(TCP | UDP));
            let m_ok = module.is_none() || module.and_then(proto_number) == r.proto;
            if !proto_ok || !m_ok {
                return Err(bad(spec, format!("{t} needs -p tcp or -p udp")));
            }
            let dir = if t.contains('d') {
                PortDir::Dst
            } else {
                PortDir::Src
            };
            let port = port(v).ok_or_else(|| bad(spec, format!("{t} {v}: not a port")))?;
            r.matches.push(Match::Port { dir, port, inv });
        }
        "--dports" | "--destination-ports" if module == Some("multiport") => {
            let ports: Option<Vec<u16>> = v.split(',').map(port).collect();
            let ports = ports
                .filter(|p| !p.is_empty() && p.len() <= 15)
                .ok_or_else(|| bad(spec, format!("{t} {v}: 1 to 15 ports, comma-separated")))?;
            r.matches.push(Match::Multiport { ports, inv });
        }
        "--uid-owner" | "--gid-owner" if module == Some("owner") => {
            let kind = if t == "--uid-owner" {
                OwnerKind::Uid
            } else {
                OwnerKind::Gid
            };
            let id = match number(v) {
                Some(n) => n,
                None => names(kind, v)?,
            };
            r.matches.push(Match::Owner { kind, id, inv });
        }
        "--mark" if matches!(module, Some("mark" | "connmark")) => {
            let (mark, mask) = self::mark(v).ok_or_else(|| bad(spec, format!("--mark {v}")))?;
            r.matches.push(if module == Some("mark") {
                Match::Mark { mark, mask, inv }
            } else {
                Match::Connmark { mark, mask, inv }
            });
        }
        "--ctstate" if module == Some("conntrack") && !inv => {
            let mut states = 0;
            for s in v.split(',') {
                let bit = CT_STATES.iter().find(|(_, n)| *n == s).map(|(b, _)| *b);
                states |= bit.ok_or_else(|| bad(spec, format!("unknown --ctstate {s}")))?;
            }
            r.matches.push(Match::Conntrack { states });
        }
        _ => return Err(bad(spec, format!("unsupported option {t}"))),
    }
    Ok(())
}

fn finish(spec: &str, r: Rule, dangling: bool) -> Result<Rule> {
    if dangling {
        return Err(bad(spec, "`!` at the end".into()));
    }
    Ok(r)
}

/// The `-j` target and its options (`toks` starts at the target's name). Kept whole: the options are
/// gathered once, then one arm per target we write takes its own and refuses the rest, side by side with
/// [`render`]'s arms for the same targets.
fn target(spec: &str, toks: &[&str]) -> Result<Target> {
    let name = *toks
        .first()
        .ok_or_else(|| bad(spec, "-j needs a target".into()))?;
    let mut opts = std::collections::BTreeMap::new();
    let mut it = toks[1..].iter();
    while let Some(o) = it.next() {
        if *o == "!" {
            return Err(bad(spec, "`!` among the target's options".into()));
        }
        let takes = !matches!(*o, "--save-mark" | "--restore-mark");
        let v = if takes { it.next().copied() } else { Some("") };
        let v = v.ok_or_else(|| bad(spec, format!("{o} needs a value")))?;
        if opts.insert(*o, v).is_some() {
            return Err(bad(spec, format!("{o} given twice")));
        }
    }
    let mut take = |k: &str| opts.remove(k);
    let num = |o: Option<&str>, k: &str| -> Result<u32> {
        o.map_or(Ok(u32::MAX), |v| {
            number(v).ok_or_else(|| bad(spec, format!("{k} {v}")))
        })
    };
    let t = match name {
        "ACCEPT" => Target::Accept,
        "DROP" => Target::Drop,
        "RETURN" => Target::Return,
        "REDIRECT" => {
            let v = take("--to-ports").or_else(|| take("--to-port"));
            let port = v
                .and_then(port)
                .ok_or_else(|| bad(spec, "REDIRECT needs --to-ports P".into()))?;
            Target::Redirect { port }
        }
        "MARK" => {
            let (mark, mask) = match (take("--set-mark"), take("--set-xmark")) {
                (Some(v), None) | (None, Some(v)) => self::mark(v),
                _ => None,
            }
            .ok_or_else(|| bad(spec, "MARK needs one of --set-mark, --set-xmark".into()))?;
            Target::Mark { mark, mask }
        }
        "CONNMARK" => {
            let mode = match (take("--save-mark"), take("--restore-mark")) {
                (Some(_), None) => ConnmarkMode::Save,
                (None, Some(_)) => ConnmarkMode::Restore,
                _ => {
                    return Err(bad(
                        spec,
                        "CONNMARK needs --save-mark or --restore-mark".into(),
                    ))
                }
            };
            let nfmask = num(take("--nfmask"), "--nfmask")?;
            let ctmask = num(take("--ctmask"), "--ctmask")?;
            Target::Connmark {
                mode,
                nfmask,
                ctmask,
            }
        }
        "TPROXY" => {
            let port = take("--on-port").and_then(port);
            let port = port.ok_or_else(|| bad(spec, "TPROXY needs --on-port P".into()))?;
            if let Some(ip) = take("--on-ip") {
                let any = ip.parse::<IpAddr>().is_ok_and(|a| a.is_unspecified());
                if !any {
                    return Err(bad(
                        spec,
                        format!("TPROXY --on-ip {ip}: only the unspecified address"),
                    ));
                }
            }
            let (mark, mask) = match take("--tproxy-mark") {
                Some(v) => self::mark(v).ok_or_else(|| bad(spec, format!("--tproxy-mark {v}")))?,
                None => (0, 0),
            };
            Target::Tproxy { port, mark, mask }
        }
        "CT" => {
            let z = take("--zone").and_then(|v| v.parse().ok());
            Target::Ct {
                zone: z.ok_or_else(|| bad(spec, "CT needs --zone Z".into()))?,
            }
        }
        c if !c.starts_with('-') && c.len() < 29 && c.chars().all(|ch| ch.is_ascii_graphic()) => {
            Target::Jump(c.to_string())
        }
        c => return Err(bad(spec, format!("bad target {c}"))),
    };
    if let Some(k) = opts.keys().next() {
        return Err(bad(spec, format!("unsupported option {k} for -j {name}")));
    }
    Ok(t)
}

mod doc;
mod render;

pub use doc::{builtins, parse_doc, save_text};
pub use render::render;

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
