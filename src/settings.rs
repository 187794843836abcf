//! The settings toolkit every applet uses: Go's value syntax (`strconv.ParseBool`, `time.ParseDuration`,
//! `strconv.ParseInt(s, 0, 64)`), Go-style command lines rewritten for argh, and the flag > env > default
//! lookup with viper's two rules for an environment variable set to "". Pure; the errors name the
//! setting (flag or variable) and the bad value.

use crate::error::{Error, Result};
use std::time::Duration;

/// Looks up an environment variable.
pub type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

/// The process environment.
pub fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// Go's `strconv.ParseBool`: `1 t T TRUE true True` / `0 f F FALSE false False`, nothing else (no trim).
pub fn go_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// A boolean setting (trimmed, then [`go_bool`]); the error names the setting.
pub fn parse_bool(name: &str, v: &str) -> Result<bool> {
    let t = v.trim();
    go_bool(t).ok_or_else(|| Error::env(name, format!("{t:?} is not a boolean (true or false)")))
}

/// Go's `time.ParseDuration` (units ns, us, µs, ms, s, m, h; fractions; sequences like `1m30s`; a bare
/// `0`), non-negative and at most 1e9 s.
pub fn go_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    let s = s.strip_prefix('+').unwrap_or(s);
    if s == "0" {
        return Some(Duration::ZERO);
    }
    if s.is_empty() || s.starts_with('-') {
        return None;
    }
    let mut rest = s;
    let mut total = 0f64;
    while !rest.is_empty() {
        let n = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let num: f64 = rest[..n].parse().ok()?;
        rest = &rest[n..];
        let u = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..u] {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        rest = &rest[u..];
        total += num * scale;
    }
    if !total.is_finite() || total > 1e9 {
        return None;
    }
    Some(Duration::from_secs_f64(total))
}

/// A duration setting: a Go duration (`250ms`, `30s`, `2m`, `1m30s`), or bare (fractional) seconds.
pub fn parse_duration(name: &str, v: &str) -> Result<Duration> {
    let t = v.trim();
    let bare = !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit() || b == b'.');
    let d = if bare {
        t.parse::<f64>()
            .ok()
            .filter(|s| s.is_finite() && (0.0..=1e9).contains(s))
            .map(Duration::from_secs_f64)
    } else {
        go_duration(t)
    };
    d.ok_or_else(|| {
        Error::env(
            name,
            format!("{v:?} is not a duration (e.g. 30s, 500ms, 2m)"),
        )
    })
}

/// Go's `strconv.ParseInt(s, 0, 64)` for a non-negative value: `0x`/`0o`/`0b` prefixes, a leading `0`
/// means octal, otherwise decimal; `_` between digits only with a prefix.
pub fn go_int(s: &str) -> Option<u64> {
    let s = s.trim();
    let s = s.strip_prefix('+').unwrap_or(s);
    let lower = s.to_ascii_lowercase();
    let (digits, radix) = if let Some(d) = lower.strip_prefix("0x") {
        (d.to_string(), 16)
    } else if let Some(d) = lower.strip_prefix("0o") {
        (d.to_string(), 8)
    } else if let Some(d) = lower.strip_prefix("0b") {
        (d.to_string(), 2)
    } else if lower.len() > 1 && lower.starts_with('0') {
        (lower[1..].to_string(), 8)
    } else {
        if lower.contains('_') {
            return None;
        }
        (lower, 10)
    };
    let digits = if radix != 10 {
        // Underscores only after the prefix or between digits (Go's underscoreOK).
        if digits.ends_with('_') || digits.contains("__") {
            return None;
        }
        digits.replace('_', "")
    } else {
        digits
    };
    if digits.is_empty() || digits.starts_with(['+', '-']) {
        return None;
    }
    u64::from_str_radix(&digits, radix).ok()
}

/// A file mode read as a Go integer (base 0): `0600`, `0o600` and `0x180` are 0o600, plain `420` is
/// decimal (0o644). A value with bits beyond 0o777 is refused: Go code keeping only the low 9 bits would
/// silently turn `600` (decimal 600 = 0o1130) into 0o130.
pub fn parse_mode(name: &str, v: &str) -> Result<u32> {
    let m = go_int(v).ok_or_else(|| {
        Error::env(
            name,
            format!("{v:?} is not a file mode (e.g. 0600, or decimal 384)"),
        )
    })?;
    if m > 0o777 {
        let t = v.trim();
        let hint = if !t.is_empty() && t.bytes().all(|b| (b'0'..=b'7').contains(&b)) {
            format!("0{t}")
        } else {
            "0600".to_string()
        };
        return Err(Error::env(
            name,
            format!(
                "{v:?} is {m} = 0o{m:o} (a leading 0 means octal, none means decimal, as upstream reads it), \
                 not a file mode: did you mean {hint}?"
            ),
        ));
    }
    Ok(m as u32)
}

/// `KUBECONFIG_MODE`: a [`parse_mode`] that lets nobody but the owner (root) write the file. The plugin takes
/// its API server and credentials from the kubeconfig, and the pod it reads there decides whether the pod
/// is redirected; upstream writes any mode it is given.
pub fn parse_kubeconfig_mode(name: &str, v: &str) -> Result<u32> {
    let m = parse_mode(name, v)?;
    if !crate::fsutil::owner_writes_only(m) {
        return Err(Error::env(
            name,
            format!(
                "{v:?} is 0o{m:o}: group or other users could rewrite the plugin's kubeconfig (the API server \
                 it asks whether to redirect a pod, and its token); use 0600 (the default), or 0640/0644 to let \
                 them read it"
            ),
        ));
    }
    Ok(m)
}

/// A port number, 0-65535.
pub fn parse_port(name: &str, v: &str) -> Result<u16> {
    v.trim()
        .parse::<u16>()
        .map_err(|_| Error::env(name, format!("{v:?} is not a port number (0-65535)")))
}

/// The flag spelling of an environment variable: `CNI_NET_DIR` → `--cni-net-dir`.
pub fn flag_name(var: &str) -> String {
    format!("--{}", var.to_ascii_lowercase().replace('_', "-"))
}

/// What a flag is, for [`normalize_args`] (by its name without `--`, after the underscore rewrite).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlagKind {
    /// Takes a value as written (`--name v` or `--name=v`), or is no flag of ours (argh reports it).
    Value,
    /// A boolean setting (an argh option holding the text, so an explicit `false` beats the environment):
    /// bare means true.
    Bool,
    /// A boolean without a setting behind it (an argh switch, e.g. `--once`): present when true.
    Switch,
}

/// How a Go-style command line is rewritten for argh.
#[derive(Clone, Copy)]
pub struct ArgStyle<'a> {
    /// Istio's underscore spellings (`--log_output_level`) become dashes.
    pub dashes_for_underscores: bool,
    /// What each flag is.
    pub kind: &'a dyn Fn(&str) -> FlagKind,
}

/// Go flag syntax → argh: `--name=value` → `--name value`, plus what `style` asks for. A boolean flag
/// ([`FlagKind::Bool`], [`FlagKind::Switch`]) has the same forms in every applet: bare (true),
/// `--name=value`, and `--name value` when the next argument is not a flag (no applet takes positional
/// arguments that could follow one). A switch's value is checked here (Go's `strconv.ParseBool` words), a
/// boolean setting's where it is resolved, naming the flag. `Err` names the flag and the bad value.
pub fn normalize_args(
    args: &[String],
    style: ArgStyle<'_>,
) -> std::result::Result<Vec<String>, String> {
    let mut out = Vec::with_capacity(args.len() + 4);
    let mut it = args.iter().peekable();
    while let Some(a) = it.next() {
        if a == "--" {
            // The end of the flags: the rest goes to argh as written.
            out.push(a.clone());
            out.extend(it.cloned());
            break;
        }
        let Some(rest) = a.strip_prefix("--") else {
            out.push(a.clone());
            continue;
        };
        let (name, value) = match rest.split_once('=') {
            Some((n, v)) => (n, Some(v.to_string())),
            None => (rest, None),
        };
        let name = if style.dashes_for_underscores {
            name.replace('_', "-")
        } else {
            name.to_string()
        };
        let kind = (style.kind)(&name);
        let value = match (kind, value) {
            (FlagKind::Value, v) => v,
            (_, Some(v)) => Some(v),
            (_, None) => it.next_if(|n| !n.starts_with('-')).cloned(),
        };
        match (kind, value) {
            (FlagKind::Switch, Some(v)) => match go_bool(&v) {
                Some(true) => out.push(format!("--{name}")),
                Some(false) => {}
                None => return Err(format!("--{name}: {v:?} is not a boolean (true or false)")),
            },
            (FlagKind::Bool, None) => out.extend([format!("--{name}"), "true".into()]),
            (_, Some(v)) => out.extend([format!("--{name}"), v]),
            (_, None) => out.push(format!("--{name}")),
        }
    }
    Ok(out)
}

/// What an environment variable set to "" means (viper's `AllowEmptyEnv`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EmptyEnv {
    /// viper's default (release-1.9 binaries): "" is unset; the next name, else the default, applies.
    Unset,
    /// `AllowEmptyEnv(true)` (master's installer): "" is a value. Text settings take it; [`typed`]
    /// settings keep their default for a blank value.
    Value,
}

/// A setting's value and where it came from (`--flag` or the variable's name, for error messages).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    pub source: String,
    pub value: String,
    /// A blank value keeps a typed setting's default (from the environment under [`EmptyEnv::Value`]).
    pub blank_is_default: bool,
}

/// flag > env: the explicit flag (`(flag name, value)`), else the first of `vars` that is set (by the
/// `empty` rule).
pub fn pick(
    flag: Option<(String, String)>,
    env: Env<'_>,
    vars: &[&str],
    empty: EmptyEnv,
) -> Option<Found> {
    if let Some((source, value)) = flag {
        return Some(Found {
            source,
            value,
            blank_is_default: false,
        });
    }
    vars.iter().find_map(|var| {
        env(var)
            .filter(|v| empty == EmptyEnv::Value || !v.is_empty())
            .map(|value| Found {
                source: var.to_string(),
                value,
                blank_is_default: empty == EmptyEnv::Value,
            })
    })
}

/// The value of a typed setting: `parse(source, value)`, or `default` when nothing was found or the
/// value is blank where that keeps the default ([`Found::blank_is_default`]). A flag is always parsed.
pub fn typed<T>(
    found: Option<Found>,
    default: T,
    parse: impl Fn(&str, &str) -> Result<T>,
) -> Result<T> {
    match found {
        Some(f) if f.blank_is_default && f.value.trim().is_empty() => Ok(default),
        Some(f) => parse(&f.source, &f.value),
        None => Ok(default),
    }
}

/// Settings named as Istio names them: the flag `--name` and the variable `NAME` (upper-case, `-` → `_`),
/// flag > env > default, env read by `empty`'s rule.
#[derive(Clone, Copy)]
pub struct Named<'a> {
    pub env: Env<'a>,
    pub empty: EmptyEnv,
}

impl Named<'_> {
    /// The explicit flag (its value, if given), else the variable `var`.
    pub fn find(&self, flag: &Option<String>, var: &str) -> Option<Found> {
        let flag = flag.clone().map(|v| (flag_name(var), v));
        pick(flag, self.env, &[var], self.empty)
    }

    /// A text setting.
    pub fn text(&self, flag: &Option<String>, var: &str, default: &str) -> String {
        self.find(flag, var)
            .map_or_else(|| default.to_string(), |f| f.value)
    }

    /// A typed setting (see [`typed`]).
    pub fn typed<T>(
        &self,
        flag: &Option<String>,
        var: &str,
        default: T,
        parse: impl Fn(&str, &str) -> Result<T>,
    ) -> Result<T> {
        typed(self.find(flag, var), default, parse)
    }

    /// A boolean setting.
    pub fn bool(&self, flag: &Option<String>, var: &str, default: bool) -> Result<bool> {
        self.typed(flag, var, default, parse_bool)
    }
}

#[cfg(test)]
#[path = "settings_tests.rs"]
pub(crate) mod tests;
