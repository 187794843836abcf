//! A [`Rule`] as `iptables-save` (1.8.7-1.8.11) prints it (pure): `[!] -s [!] -d [!] -i [!] -o -p` first,
//! then the matches in rule order (`-m tcp` named for a port match), then the target with every option
//! the tool prints, marks in hex.

use super::{proto_name, CT_STATES};
use crate::netfilter::Family;
use crate::xtables::rule::*;
use ipnet::IpNet;
use std::net::{Ipv4Addr, Ipv6Addr};

/// An IPv6 address as glibc's `inet_ntop` writes it (`::127.0.0.53` for an IPv4-compatible address,
/// where Rust writes `::7f00:35`).
fn v6_text(a: &Ipv6Addr) -> String {
    let s = a.segments();
    if s[..6] == [0; 6] && s[6] != 0 {
        let [.., a, b, c, d] = a.octets();
        return format!("::{}", Ipv4Addr::new(a, b, c, d));
    }
    a.to_string()
}

fn net_text(n: &IpNet) -> String {
    match n {
        IpNet::V4(n) => n.to_string(),
        IpNet::V6(n) => format!("{}/{}", v6_text(&n.addr()), n.prefix_len()),
    }
}

fn bang(inv: bool) -> &'static str {
    if inv {
        "! "
    } else {
        ""
    }
}

/// Renders a rule as `iptables-save` prints it.
pub fn render(family: Family, r: &Rule) -> String {
    let mut out: Vec<String> = Vec::new();
    for (opt, n) in [("-s", &r.src), ("-d", &r.dst)] {
        if let Some(n) = n {
            out.push(format!("{}{opt} {}", bang(n.inv), net_text(&n.value)));
        }
    }
    for (opt, i) in [("-i", &r.iif), ("-o", &r.oif)] {
        if let Some(i) = i {
            out.push(format!("{}{opt} {}", bang(i.inv), i.value));
        }
    }
    if let Some(p) = r.proto {
        out.push(format!("-p {}", proto_name(p)));
    }
    let proto = proto_name(r.proto.unwrap_or(0));
    out.extend(r.matches.iter().map(|m| match_text(&proto, m)));
    let t = target_text(family, &r.target);
    if !t.is_empty() {
        out.push(t);
    }
    out.join(" ")
}

/// One match as `iptables-save` prints it (`proto`: the rule's `-p`, the module of its ports).
fn match_text(proto: &str, m: &Match) -> String {
    match m {
        Match::Port { dir, port, inv } => {
            let o = if *dir == PortDir::Dst {
                "--dport"
            } else {
                "--sport"
            };
            format!("-m {proto} {}{o} {port}", bang(*inv))
        }
        Match::Multiport { ports, inv } => {
            let p: Vec<String> = ports.iter().map(u16::to_string).collect();
            format!("-m multiport {}--dports {}", bang(*inv), p.join(","))
        }
        Match::Owner { kind, id, inv } => {
            let o = if *kind == OwnerKind::Uid {
                "--uid-owner"
            } else {
                "--gid-owner"
            };
            format!("-m owner {}{o} {id}", bang(*inv))
        }
        Match::Mark { mark, mask, inv } => {
            format!("-m mark {}--mark {}", bang(*inv), hex_mark(*mark, *mask))
        }
        Match::Connmark { mark, mask, inv } => {
            format!(
                "-m connmark {}--mark {}",
                bang(*inv),
                hex_mark(*mark, *mask)
            )
        }
        Match::Conntrack { states } => {
            let names: Vec<&str> = CT_STATES
                .iter()
                .filter(|(b, _)| states & b != 0)
                .map(|(_, n)| *n)
                .collect();
            format!("-m conntrack --ctstate {}", names.join(","))
        }
        Match::Other(t) => t.clone(),
    }
}

/// The target as `iptables-save` prints it (`-j ...`), empty for none.
fn target_text(family: Family, target: &Target) -> String {
    let any = match family {
        Family::V4 => "0.0.0.0",
        Family::V6 => "::",
    };
    match target {
        Target::None => String::new(),
        Target::Accept => "-j ACCEPT".into(),
        Target::Drop => "-j DROP".into(),
        Target::Return => "-j RETURN".into(),
        Target::Jump(c) => format!("-j {c}"),
        Target::Redirect { port } => format!("-j REDIRECT --to-ports {port}"),
        Target::Mark { mark, mask } => format!("-j MARK --set-xmark {mark:#x}/{mask:#x}"),
        Target::Connmark {
            mode,
            nfmask,
            ctmask,
        } => {
            let m = if *mode == ConnmarkMode::Save {
                "--save-mark"
            } else {
                "--restore-mark"
            };
            format!("-j CONNMARK {m} --nfmask {nfmask:#x} --ctmask {ctmask:#x}")
        }
        Target::Tproxy { port, mark, mask } => {
            format!("-j TPROXY --on-port {port} --on-ip {any} --tproxy-mark {mark:#x}/{mask:#x}")
        }
        Target::Ct { zone } => format!("-j CT --zone {zone}"),
        // Always behind `-j`, so whoever reads the text sees a target it does not know (never "no target").
        Target::Other(t) if t.starts_with("-j ") => t.clone(),
        Target::Other(t) => format!("-j ?{t}"),
    }
}

/// `0x539`, or `0x539/0xff` with a mask other than all ones.
fn hex_mark(mark: u32, mask: u32) -> String {
    if mask == u32::MAX {
        format!("{mark:#x}")
    } else {
        format!("{mark:#x}/{mask:#x}")
    }
}
