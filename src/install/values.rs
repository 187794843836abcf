//! Parsers for single setting values, each naming the setting and the bad value in its error.

use crate::error::{Error, Result};
use std::time::Duration;

/// Go's `strconv.ParseBool`.
pub fn parse_bool(name: &str, v: &str) -> Result<bool> {
    match v.trim() {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Ok(false),
        other => Err(Error::env(
            name,
            format!("{other:?} is not a boolean (true or false)"),
        )),
    }
}

/// Go's `strconv.ParseInt(s, 0, 64)` for a non-negative value: `0x`/`0o`/`0b` prefixes, a leading `0`
/// means octal, otherwise decimal; `_` between digits only with a prefix.
pub fn parse_go_int(s: &str) -> Option<u64> {
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

/// A file mode as upstream master reads KUBECONFIG_MODE (an integer flag, Go base 0): `0600`, `0o600`
/// and `0x180` are 0o600, plain `420` is decimal (0o644). A value with bits beyond 0o777 is refused:
/// upstream would silently keep only its low 9 bits (`600` is decimal 600 = 0o1130, so 0o130).
pub fn parse_mode(name: &str, v: &str) -> Result<u32> {
    let m = parse_go_int(v).ok_or_else(|| {
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

/// A duration: `250ms`, `30s`, `2m`, `1h`, or bare seconds.
pub fn parse_duration(name: &str, v: &str) -> Result<Duration> {
    let t = v.trim();
    let bad = || {
        Error::env(
            name,
            format!("{v:?} is not a duration (e.g. 30s, 500ms, 2m)"),
        )
    };
    let (num, unit) = match t.find(|c: char| !c.is_ascii_digit() && c != '.') {
        Some(i) => t.split_at(i),
        None => (t, "s"),
    };
    let n: f64 = num.parse().map_err(|_| bad())?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => return Err(bad()),
    };
    if !secs.is_finite() || !(0.0..=1e9).contains(&secs) {
        return Err(bad());
    }
    Ok(Duration::from_secs_f64(secs))
}

pub fn parse_port(name: &str, v: &str) -> Result<u16> {
    v.trim()
        .parse::<u16>()
        .map_err(|_| Error::env(name, format!("{v:?} is not a port number (0-65535)")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_base_zero_integers() {
        for (s, want) in [
            ("420", Some(420)),
            ("0600", Some(0o600)),
            ("0o600", Some(0o600)),
            ("0O600", Some(0o600)),
            ("0x1a4", Some(0x1a4)),
            ("0X1A4", Some(0x1a4)),
            ("0b110100100", Some(0o644)),
            ("0", Some(0)),
            ("0_600", Some(0o600)),
            ("0x_1a4", Some(0x1a4)),
            ("4_20", None),
            ("0o", None),
            ("08", None),
            ("-384", None),
            ("rw", None),
            ("", None),
        ] {
            assert_eq!(parse_go_int(s), want, "{s:?}");
        }
    }

    #[test]
    fn modes_as_upstream_reads_them() {
        assert_eq!(parse_mode("m", "420").unwrap(), 0o644);
        assert_eq!(parse_mode("m", "0600").unwrap(), 0o600);
        assert_eq!(parse_mode("m", "0o600").unwrap(), 0o600);
        assert_eq!(parse_mode("m", "0x1a4").unwrap(), 0o644);
        assert_eq!(parse_mode("m", "384").unwrap(), 0o600);
        let e = parse_mode("KUBECONFIG_MODE", "600")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("KUBECONFIG_MODE") && e.contains("0o1130") && e.contains("0600"),
            "{e}"
        );
        assert!(parse_mode("m", "rw").is_err());
    }
}
