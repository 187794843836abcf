//! Which chain names iptables' own text can carry (pure). Our reader turns the kernel's tables into
//! `iptables-save` text and reads that text again ([`crate::iptables::save`]): one rule a line, words split
//! at whitespace, a rule's target its last `-j`. The kernel takes names iptables never writes (nf_tables up
//! to 255 bytes with `nft`, spaces and newlines included; x_tables 29 bytes through the socket options), and
//! such a name rewrites that text: a chain named `OUTPUT -j ISTIO_OUTPUT` holding an empty rule prints as
//! our jump, `jump "Z -j ACCEPT"` reads as ACCEPT, a chain named `CT` makes `-j CT --notrack` read as a
//! jump to it. Other names reach the text inside a rule (a set's name in a native lookup: `x\n-A Y` moves
//! the rest of the rule, its notrack too, into a chain `Y` nothing hooks). So a table holding such a name
//! is not read at all: [`refused`] names each such chain or rule, CHECK reports it, and a re-ADD fails
//! instead of converging on (or calling "in place") rules it cannot see.

use super::rule::{Table, Target};
use super::spec::render;
use crate::netfilter::Family;

/// iptables' longest chain name: under `XT_EXTENSION_MAXNAMELEN` (29) bytes.
pub const MAX_LEN: usize = 28;

/// Targets iptables knows by name (the verdicts and the extensions of iptables 1.8): iptables refuses a
/// chain of that name (it "may not clash with target name"), and in the text it would read as the target.
const TARGETS: [&str; 45] = [
    "ACCEPT",
    "DROP",
    "RETURN",
    "QUEUE",
    "CONTINUE",
    "AUDIT",
    "CHECKSUM",
    "CLASSIFY",
    "CLUSTERIP",
    "CONNMARK",
    "CONNSECMARK",
    "CT",
    "DNAT",
    "DNPT",
    "DSCP",
    "ECN",
    "HL",
    "HMARK",
    "IDLETIMER",
    "LED",
    "LOG",
    "MARK",
    "MASQUERADE",
    "NAT",
    "NETMAP",
    "NFLOG",
    "NFQUEUE",
    "NOTRACK",
    "RATEEST",
    "REDIRECT",
    "REJECT",
    "SECMARK",
    "SET",
    "SNAT",
    "SNPT",
    "SYNPROXY",
    "TCPMSS",
    "TCPOPTSTRIP",
    "TEE",
    "TOS",
    "TPROXY",
    "TRACE",
    "TTL",
    "ULOG",
    "ERROR",
];

/// Why iptables would refuse `name` as a chain name, if it would: empty, longer than [`MAX_LEN`] bytes,
/// starting with `-` or `!`, a target's name, or holding anything but printable ASCII other than a space
/// (whitespace and control characters split or end a line of the text; iptables takes other bytes, we do
/// not: a name that is not UTF-8 reaches us changed, and Unicode spaces split words too).
pub fn problem(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        Some("empty")
    } else if name.len() > MAX_LEN {
        Some("longer than 28 bytes")
    } else if !name.bytes().all(|b| b.is_ascii_graphic()) {
        Some("holds whitespace, a control character or a byte outside printable ASCII")
    } else if name.starts_with(['-', '!']) {
        Some("starts with - or !")
    } else if TARGETS.contains(&name) {
        Some("the name of a target")
    } else {
        None
    }
}

/// Why a rule's text as `iptables-save` prints it ([`render`]) would not read back as the rule: a control
/// character (a newline starts another line), or `-j`/`-g` words (split as the reader splits them) other
/// than its one target's.
pub fn rule_problem(text: &str, has_target: bool) -> Option<&'static str> {
    if text.chars().any(char::is_control) {
        return Some("a control character");
    }
    (jump_words(text) != usize::from(has_target))
        .then_some("a -j or -g word that is not its target")
}

/// How many `-j`/`-g` words a rule's text holds, split on whitespace as the text's reader
/// ([`crate::iptables::save::target`]) splits it.
pub fn jump_words(text: &str) -> usize {
    text.split_whitespace()
        .filter(|w| *w == "-j" || *w == "-g")
        .count()
}

/// One line per chain name in `tables` (a chain's own, or a jump's target) that iptables would refuse,
/// and per rule whose text would not read back ([`rule_problem`]), named as `tool` (`iptables-nft (IPv4)`)
/// lists the table, names and text printable-escaped.
pub fn refused(tool: &str, family: Family, tables: &[Table]) -> Vec<String> {
    let mut out = Vec::new();
    for t in tables {
        for c in &t.chains {
            for (i, r) in c.rules.iter().enumerate() {
                // A jump to a refused name is named once, with the name, below.
                if matches!(&r.target, Target::Jump(to) if problem(to).is_some()) {
                    continue;
                }
                let text = render(family, r);
                if let Some(why) = rule_problem(&text, r.target != Target::None) {
                    out.push(format!(
                        "{tool} -t {} {} rule {}: a rule iptables-save text cannot carry ({why}): {text:?}; \
                         the table cannot be read as iptables-save text",
                        t.name,
                        c.name.escape_debug(),
                        i + 1
                    ));
                }
            }
        }
        let jumps = t
            .chains
            .iter()
            .flat_map(|c| &c.rules)
            .filter_map(|r| match &r.target {
                Target::Jump(c) => Some(c),
                _ => None,
            });
        let names = t.chains.iter().map(|c| &c.name).chain(jumps);
        let mut seen = std::collections::BTreeSet::new();
        for n in names {
            if let Some(why) = problem(n) {
                if seen.insert(n) {
                    out.push(format!(
                        "{tool} -t {} chain {n:?}: a chain name iptables refuses ({why}); \
                         the table cannot be read as iptables-save text",
                        t.name
                    ));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xtables::rule::{Chain, Match, Rule};

    #[test]
    fn iptables_names_pass_others_are_refused() {
        for ok in [
            "OUTPUT",
            "ISTIO_OUTPUT",
            "KUBE-SVC-ABCDEFGHIJKLMNOP",
            "a",
            &"x".repeat(28),
            "Z_1.2:3/x",
        ] {
            assert_eq!(problem(ok), None, "{ok:?}");
        }
        for bad in [
            "",
            &"x".repeat(29),
            "OUTPUT -j ISTIO_OUTPUT",
            "\n-A OUTPUT -j ISTIO_OUTPUT\n",
            "Z\t",
            "a\u{7f}",
            "a\u{a0}b",
            "caf\u{e9}",
            "\u{fffd}",
            "-j",
            "!x",
            "ACCEPT",
            "CT",
            "RETURN",
        ] {
            assert!(problem(bad).is_some(), "{bad:?}");
        }
    }

    #[test]
    fn refused_names_chains_and_jump_targets_once_escaped() {
        let jump = |c: &str| Rule {
            target: Target::Jump(c.into()),
            ..Rule::any()
        };
        let tables = vec![
            Table {
                name: "raw".into(),
                chains: vec![
                    Chain {
                        name: "OUTPUT".into(),
                        rules: vec![jump("Z -j ACCEPT"), jump("FINE")],
                    },
                    Chain {
                        name: "FINE".into(),
                        rules: vec![],
                    },
                    Chain {
                        name: "Z -j ACCEPT".into(),
                        rules: vec![],
                    },
                ],
            },
            Table {
                name: "nat".into(),
                chains: vec![Chain {
                    name: "\n-A OUTPUT -j ISTIO_OUTPUT\n".into(),
                    rules: vec![Rule::any()],
                }],
            },
        ];
        assert_eq!(
            refused("iptables-nft (IPv4)", Family::V4, &tables),
            vec![
                "iptables-nft (IPv4) -t raw chain \"Z -j ACCEPT\": a chain name iptables refuses (holds \
                 whitespace, a control character or a byte outside printable ASCII); the table cannot be \
                 read as iptables-save text",
                "iptables-nft (IPv4) -t nat chain \"\\n-A OUTPUT -j ISTIO_OUTPUT\\n\": a chain name iptables \
                 refuses (holds whitespace, a control character or a byte outside printable ASCII); the \
                 table cannot be read as iptables-save text",
            ]
        );
        // A jump to a chain the table does not list is named too.
        let t = Table {
            name: "nat".into(),
            chains: vec![Chain {
                name: "OUTPUT".into(),
                rules: vec![jump("")],
            }],
        };
        assert_eq!(refused("x", Family::V4, &[t]).len(), 1);
    }

    #[test]
    fn rules_whose_text_would_not_read_back_are_named() {
        assert_eq!(rule_problem("-p tcp -j ISTIO_OUTPUT", true), None);
        assert_eq!(rule_problem("-o lo", false), None);
        assert_eq!(rule_problem("-j CT --notrack", true), None);
        assert!(rule_problem("nft expression [ lookup set x\n-A Y ] -j ?x", true).is_some());
        assert!(rule_problem("nft expression [ lookup set x -j ACCEPT ]", false).is_some());
        assert!(rule_problem("a -j X -j Y", true).is_some());
        let rule = |m: &str| Rule {
            matches: vec![Match::Other(m.into())],
            ..Rule::any()
        };
        let t = Table {
            name: "raw".into(),
            chains: vec![Chain {
                name: "OUTPUT".into(),
                rules: vec![rule("fine"), rule("set x\n-A Y")],
            }],
        };
        assert_eq!(
            refused("iptables-nft (IPv4)", Family::V4, &[t]),
            vec![
                "iptables-nft (IPv4) -t raw OUTPUT rule 2: a rule iptables-save text cannot carry (a control \
                 character): \"set x\\n-A Y\"; the table cannot be read as iptables-save text"
            ]
        );
    }
}
