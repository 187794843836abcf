//! Upstream `istio-iptables`' flag set, as the injector passes it to the init container
//! (`pilot-agent istio-iptables …`), and a scanner with pflag's syntax. The table is the union over
//! Istio 1.9 to master (`tools/istio-iptables/pkg/cmd/root.go`, the logging flags `pilot-agent` attaches
//! to every subcommand, and cobra's `--help`): a flag any of those releases knows is accepted, so a pod
//! keeps starting when an Istio upgrade adds one; a flag none knows is refused, as upstream refuses it.
//! A value is checked against the flag's type exactly where pflag checks it (booleans, numbers,
//! durations, Istio's log levels); text flags take anything, as upstream's do.

use std::fmt;

/// The type of a flag's value, as pflag parses it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Any text (pflag `String`).
    Text,
    /// Any text, the flag repeatable (`StringArray`).
    TextList,
    /// `true`/`false` and Go's other spellings; bare means true.
    Bool,
    /// pflag `Uint16`: Go's base-0 syntax (`15002`, `0x3a9a`).
    Uint16,
    /// Go's `time.ParseDuration`.
    Duration,
    /// pflag `Int`: Go's base-0 syntax, 64 bits.
    Int,
    /// klog's level: a base-10 32-bit integer.
    Int32,
    /// Istio's levels, `[scope:]level,...`; a level Istio's logging does not know is refused.
    Levels,
}

/// One upstream flag.
#[derive(Debug)]
pub struct Flag {
    pub long: &'static str,
    pub short: Option<char>,
    pub kind: Kind,
}

const fn f(long: &'static str, short: Option<char>, kind: Kind) -> Flag {
    Flag { long, short, kind }
}

use Kind::*;

/// Every flag of `istio-iptables` in Istio 1.9 to master. Which of them the check reads, and why the others
/// change nothing, is in [`super::options`].
pub const FLAGS: &[Flag] = &[
    // root.go, every release.
    f("envoy-port", Some('p'), Text),
    f("inbound-capture-port", Some('z'), Text),
    f("inbound-tunnel-port", Some('e'), Text),
    f("proxy-uid", Some('u'), Text),
    f("proxy-gid", Some('g'), Text),
    f("istio-inbound-interception-mode", Some('m'), Text),
    f("istio-inbound-ports", Some('b'), Text),
    f("istio-local-exclude-ports", Some('d'), Text),
    f("istio-service-cidr", Some('i'), Text),
    f("istio-service-exclude-cidr", Some('x'), Text),
    f("istio-outbound-ports", Some('q'), Text),
    f("istio-local-outbound-ports-exclude", Some('o'), Text),
    f("kube-virt-interfaces", Some('k'), Text),
    f("istio-inbound-tproxy-mark", Some('t'), Text),
    f("istio-inbound-tproxy-route-table", Some('r'), Text),
    f("dry-run", Some('n'), Bool),
    f("iptables-probe-port", None, Uint16),
    f("probe-timeout", None, Duration),
    f("skip-rule-apply", None, Bool),
    f("run-validation", None, Bool),
    f("redirect-dns", None, Bool),
    // Added over the releases (still in master).
    f("capture-all-dns", None, Bool),
    f("network-namespace", None, Text),
    f("cni-mode", None, Bool),
    f("istio-exclude-interfaces", Some('c'), Text),
    f("drop-invalid", None, Bool),
    f("dual-stack", None, Bool),
    f("reconcile", None, Bool),
    f("cleanup-only", None, Bool),
    f("force-apply", None, Bool),
    f("native-nftables", None, Bool),
    f("force-iptables-binary", None, Text),
    // Gone from master: `-f` to 1.23, `--iptables-trace-logging` 1.12 to 1.25, `--output-paths` 1.11 to
    // 1.17, `--host-nsenter-exec` 1.16 to 1.19, `--iptables-version` 1.20 and 1.21.
    f("restore-format", Some('f'), Bool),
    f("iptables-trace-logging", None, Bool),
    f("output-paths", None, Text),
    f("host-nsenter-exec", None, Bool),
    f("iptables-version", None, Text),
    // pilot-agent's logging flags (`log_rotate*` to 1.23) and klog's `--vklog` (1.15 on).
    f("log_output_level", None, Levels),
    f("log_stacktrace_level", None, Levels),
    f("log_caller", None, Text),
    f("log_target", None, TextList),
    f("log_as_json", None, Bool),
    f("log_rotate", None, Text),
    f("log_rotate_max_age", None, Int),
    f("log_rotate_max_backups", None, Int),
    f("log_rotate_max_size", None, Int),
    f("vklog", None, Int32),
];

/// A command line upstream refuses too (pflag's or cobra's error): unknown flag, missing value, value not
/// of the flag's type. The message names the flag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadFlag(pub String);

impl fmt::Display for BadFlag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What the command line gave: every flag's value in order (a bare boolean as `true`), whether help or
/// the version was asked for, and the arguments that are no flag.
#[derive(Debug, Default)]
pub struct Given {
    pub values: Vec<(&'static str, String)>,
    pub help: bool,
    pub version: bool,
    pub positional: Vec<String>,
}

impl Given {
    /// The last value given for `long`.
    pub fn last(&self, long: &str) -> Option<&str> {
        let v = self.values.iter().rev().find(|(n, _)| *n == long);
        v.map(|(_, v)| v.as_str())
    }
}

fn by_long(name: &str) -> Option<&'static Flag> {
    FLAGS.iter().find(|f| f.long == name)
}

/// Go's `strconv.ParseUint(s, 0, bits)` for the prefixes people write (`0x`, `0o`, `0b`, a leading `0`).
fn go_uint(s: &str, max: u64) -> Option<u64> {
    let (digits, radix) = if let Some(h) = s.strip_prefix("0x").or(s.strip_prefix("0X")) {
        (h, 16)
    } else if let Some(o) = s.strip_prefix("0o").or(s.strip_prefix("0O")) {
        (o, 8)
    } else if let Some(b) = s.strip_prefix("0b").or(s.strip_prefix("0B")) {
        (b, 2)
    } else if s.len() > 1 && s.starts_with('0') {
        (&s[1..], 8)
    } else {
        (s, 10)
    };
    if digits.is_empty() || digits.starts_with(['+', '-']) {
        return None;
    }
    u64::from_str_radix(digits, radix)
        .ok()
        .filter(|n| *n <= max)
}

/// A pflag `Uint16` value.
pub fn parse_uint16(s: &str) -> Option<u16> {
    go_uint(s, u16::MAX.into()).and_then(|n| u16::try_from(n).ok())
}

/// Go's `strconv.ParseInt(s, 0, 64)`.
fn go_int(s: &str) -> bool {
    let s = s.strip_prefix(['+', '-']).unwrap_or(s);
    go_uint(s, i64::MAX as u64).is_some()
}

/// Whether `v` is Istio's `[scope:]level,...` with known levels (its `convertScopedLevel`), or empty:
/// `--log_output_level=` (an injector whose `global.logging.level` is "") keeps pilot-agent's defaults.
pub fn levels_ok(v: &str) -> bool {
    v.is_empty()
        || v.split(',').all(|sl| {
            let level = match sl.split(':').collect::<Vec<_>>()[..] {
                [l] | [_, l] => l,
                _ => return false,
            };
            matches!(
                level,
                "debug" | "info" | "warn" | "error" | "fatal" | "none"
            )
        })
}

/// Whether pflag (and, for the levels, Istio's logging) takes `v` for a flag of `kind`.
pub fn value_ok(kind: Kind, v: &str) -> bool {
    match kind {
        Text | TextList => true,
        Bool => crate::settings::go_bool(v).is_some(),
        Uint16 => go_uint(v, u16::MAX.into()).is_some(),
        Duration => crate::settings::go_duration(v).is_some(),
        Int => go_int(v),
        Int32 => v.parse::<i32>().is_ok(),
        Levels => levels_ok(v),
    }
}

fn checked(flag: &Flag, shown: &str, v: String) -> Result<String, BadFlag> {
    if value_ok(flag.kind, &v) {
        return Ok(v);
    }
    let what = match flag.kind {
        Bool => "a boolean (true or false)",
        Uint16 => "a port (0 to 65535)",
        Duration => "a duration (e.g. 5s, 500ms)",
        Int | Int32 => "an integer",
        Levels => "log levels ([scope:]level,... with debug, info, warn, error, fatal or none)",
        Text | TextList => "text",
    };
    Err(BadFlag(format!("{shown}: {v:?} is not {what}")))
}

/// Scans `args` with pflag's syntax: `--name=v`, `--name v`, `-c v`, `-cv`, `-c=v`, grouped boolean
/// shorthands (`-nf`), a bare boolean as true, `--` ending the flags. As every applet's booleans, a
/// boolean also takes the next argument as its value when that is no flag (`--dry-run false`; pflag
/// would leave `false` as an argument upstream ignores).
pub fn scan(args: &[String]) -> Result<Given, BadFlag> {
    let mut given = Given::default();
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        i += 1;
        if a == "--" {
            given.positional.extend(args[i..].iter().cloned());
            break;
        }
        if a == "-h" || a == "--help" {
            given.help = true;
            continue;
        }
        if a == "--version" {
            given.version = true;
            continue;
        }
        if let Some(l) = a.strip_prefix("--") {
            let (name, inline) = match l.split_once('=') {
                Some((n, v)) => (n, Some(v.to_string())),
                None => (l, None),
            };
            if name.is_empty() || name.starts_with(['-', '=']) {
                return Err(BadFlag(format!("bad flag syntax: {a}")));
            }
            let flag =
                by_long(name).ok_or_else(|| BadFlag(format!("unrecognized argument: --{name}")))?;
            let shown = format!("--{name}");
            let v = value_of(flag, &shown, inline, args, &mut i)?;
            given.values.push((flag.long, v));
        } else if let Some(sh) = a.strip_prefix('-').filter(|s| !s.is_empty()) {
            let mut rest = sh;
            while let Some(c) = rest.chars().next() {
                let flag = FLAGS
                    .iter()
                    .find(|f| f.short == Some(c))
                    .ok_or_else(|| BadFlag(format!("unknown shorthand flag: {c:?} in {a}")))?;
                let tail = &rest[c.len_utf8()..];
                let shown = format!("-{c} (--{})", flag.long);
                // pflag: `-c=v`; a boolean grouped with more shorthands (`-nf`) is true; another flag
                // takes the rest of the word (`-p15001`), else the next argument.
                let (v, next) = if let Some(v) = tail.strip_prefix('=') {
                    (checked(flag, &shown, v.to_string())?, "")
                } else if flag.kind == Bool && !tail.is_empty() {
                    ("true".to_string(), tail)
                } else if !tail.is_empty() {
                    (checked(flag, &shown, tail.to_string())?, "")
                } else {
                    (value_of(flag, &shown, None, args, &mut i)?, "")
                };
                given.values.push((flag.long, v));
                rest = next;
            }
        } else {
            given.positional.push(a.clone());
        }
    }
    Ok(given)
}

/// The value of `flag` given `inline` (after `=` or glued to a shorthand), else taken from `args[*i]`.
fn value_of(
    flag: &Flag,
    shown: &str,
    inline: Option<String>,
    args: &[String],
    i: &mut usize,
) -> Result<String, BadFlag> {
    if let Some(v) = inline {
        return checked(flag, shown, v);
    }
    if flag.kind == Bool {
        return match args.get(*i).filter(|n| !n.starts_with('-')) {
            Some(n) => {
                *i += 1;
                checked(flag, shown, n.clone())
            }
            None => Ok("true".to_string()),
        };
    }
    let v = args
        .get(*i)
        .ok_or_else(|| BadFlag(format!("flag needs an argument: {shown}")))?;
    *i += 1;
    checked(flag, shown, v.clone())
}
