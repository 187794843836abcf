//! One log line, as upstream's Istio components write it (zap's console encoder configured by
//! `istio.io/pkg/log`): `2026-01-02T03:04:05.123456Z<TAB>info<TAB>install<TAB>msg`, the scope left out for
//! `default`; or with `--log_as_json` the JSON its JSON encoder writes:
//! `{"time":"2026-01-02T03:04:05.123456Z","level":"info","scope":"default","msg":"..."}`.

use log::Level;
use std::time::{SystemTime, UNIX_EPOCH};

/// Our scope for a record target (module path, or `cni-plugin` for relayed plugin lines): the installer's
/// modules `install`, the repair agent's `repair`, the plugin's `cni-plugin`, the rest `default`.
pub fn scope_of(target: &str) -> &'static str {
    if target == super::PLUGIN_TARGET || target.starts_with("istio_cni::plugin") {
        "cni-plugin"
    } else if target.starts_with("istio_cni::install") {
        "install"
    } else if target.starts_with("istio_cni::repair") {
        "repair"
    } else {
        "default"
    }
}

/// zap's level names.
pub fn level_name(l: Level) -> &'static str {
    match l {
        Level::Error => "error",
        Level::Warn => "warn",
        Level::Info => "info",
        Level::Debug | Level::Trace => "debug",
    }
}

/// UTC time as RFC 3339 with microseconds (Istio's time format).
pub fn rfc3339(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    format!("{}.{:06}Z", utc_date_time(d.as_secs()), d.subsec_micros())
}

/// `YYYY-MM-DDTHH:MM:SS` (UTC, no zone) for a Unix time in seconds.
pub fn utc_date_time(secs: u64) -> String {
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Howard Hinnant's civil_from_days.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// One JSON log line (no newline).
pub fn json_line(time: SystemTime, level: Level, scope: &str, msg: &str) -> String {
    let mut out = String::with_capacity(msg.len() + 80);
    out.push_str("{\"time\":");
    crate::json::write_string_no_html(&mut out, &rfc3339(time));
    out.push_str(",\"level\":");
    crate::json::write_string_no_html(&mut out, level_name(level));
    out.push_str(",\"scope\":");
    crate::json::write_string_no_html(&mut out, scope);
    out.push_str(",\"msg\":");
    crate::json::write_string_no_html(&mut out, msg);
    out.push('}');
    out
}

/// One text line (no newline), as upstream's: `<time>\t<level>\t<scope>\t<msg>`, without the scope
/// for `default` (Istio emits no name for it). Relayed plugin lines are `cni-plugin` lines like any other.
pub fn text_line(time: SystemTime, level: Level, target: &str, msg: &str) -> String {
    match scope_of(target) {
        "default" => format!("{}\t{}\t{msg}", rfc3339(time), level_name(level)),
        scope => format!("{}\t{}\t{scope}\t{msg}", rfc3339(time), level_name(level)),
    }
}

/// Bytes as text, each byte that is not UTF-8 one `?` (not a 3-byte U+FFFD: a relayed line must not grow
/// past its datagram).
pub fn compact_lossy(data: &[u8]) -> String {
    let mut out = String::with_capacity(data.len());
    for chunk in data.utf8_chunks() {
        out.push_str(chunk.valid());
        out.extend(chunk.invalid().iter().map(|_| '?'));
    }
    out
}

/// Makes a relayed message harmless on a terminal and bounded: control characters (but tabs) become
/// spaces, and where the message as written into a JSON line (quotes, backslashes and tabs doubled) would
/// pass `max` bytes, it is cut, with a marker saying how much went, to at most `max` bytes so written.
pub fn sanitise(msg: &str, max: usize) -> String {
    let msg = msg.trim_end_matches(['\n', '\r']);
    let clean = |c: char| if c.is_control() && c != '\t' { ' ' } else { c };
    let cost = |c: char| c.len_utf8() + usize::from(matches!(c, '"' | '\\' | '\t'));
    let total: usize = msg.chars().map(|c| cost(clean(c))).sum();
    let keep = if total <= max {
        total
    } else {
        max.saturating_sub(TRUNCATED_MAX)
    };
    let mut out = String::with_capacity(msg.len().min(max));
    let mut used = 0;
    for (i, c) in msg.char_indices() {
        let c = clean(c);
        used += cost(c);
        if used > keep {
            out.push_str(&format!(" [truncated: {} more bytes]", msg.len() - i));
            break;
        }
        out.push(c);
    }
    out
}

/// Longest truncation marker (` [truncated: <20 digits> more bytes]`).
const TRUNCATED_MAX: usize = 45;

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn times() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000000Z");
        let t = UNIX_EPOCH + Duration::from_micros(1_700_000_000_123_456);
        assert_eq!(rfc3339(t), "2023-11-14T22:13:20.123456Z");
        let leap = UNIX_EPOCH + Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(rfc3339(leap), "2000-02-29T00:00:00.000000Z");
    }

    #[test]
    fn sanitised_messages_are_cut_with_a_marker() {
        assert_eq!(sanitise("a\u{1b}[31mb\r\n", 100), "a [31mb");
        assert_eq!(
            sanitise(r#"say "hi""#, 10),
            r#"say "hi""#,
            "fits once escaped"
        );
        let long = "x".repeat(1000);
        let cut = sanitise(&long, 100);
        assert!(cut.len() <= 100, "{cut}");
        assert!(
            cut.ends_with(" more bytes]") && cut.starts_with("xxx"),
            "{cut}"
        );
        let quotes = "\"".repeat(1000);
        let cut = sanitise(&quotes, 1000);
        assert!(json_line(UNIX_EPOCH, Level::Info, "cni-plugin", &cut).len() <= 1000 + 100);
        assert_eq!(compact_lossy(b"a\xffb\xe2\x82"), "a?b??");
    }

    #[test]
    fn json_lines_use_istios_field_names() {
        let l = json_line(UNIX_EPOCH, Level::Warn, "install", "a \"b\" <c>\n");
        assert_eq!(
            l,
            r#"{"time":"1970-01-01T00:00:00.000000Z","level":"warn","scope":"install","msg":"a \"b\" <c>\n"}"#
        );
        let v = crate::json::parse_object(&l, "line").unwrap();
        for k in ["time", "level", "scope", "msg"] {
            assert!(v.get(k).is_some(), "{k}");
        }
        assert_eq!(scope_of("istio_cni::install::cli"), "install");
        assert_eq!(scope_of(super::super::PLUGIN_TARGET), "cni-plugin");
        assert_eq!(scope_of("istio_cni::kube::client"), "default");
    }

    /// Text lines are upstream's: tab-separated time, lower-case level, scope (none for `default`), message;
    /// no module path, no unmatched bracket.
    #[test]
    fn text_lines_read_like_upstreams() {
        let t = UNIX_EPOCH + Duration::from_micros(1_700_000_000_123_456);
        for (target, level, want) in [
            (
                "istio_cni::install::cli",
                Level::Info,
                "2023-11-14T22:13:20.123456Z\tinfo\tinstall\tconf dir x",
            ),
            (
                "istio_cni::repair::controller",
                Level::Warn,
                "2023-11-14T22:13:20.123456Z\twarn\trepair\tconf dir x",
            ),
            (
                super::super::PLUGIN_TARGET,
                Level::Debug,
                "2023-11-14T22:13:20.123456Z\tdebug\tcni-plugin\tconf dir x",
            ),
            (
                "istio_cni::plugin::add",
                Level::Error,
                "2023-11-14T22:13:20.123456Z\terror\tcni-plugin\tconf dir x",
            ),
            (
                "istio_cni::iptables::backend",
                Level::Trace,
                "2023-11-14T22:13:20.123456Z\tdebug\tconf dir x",
            ),
        ] {
            let l = text_line(t, level, target, "conf dir x");
            assert_eq!(l, want);
            assert!(!l.contains("istio_cni") && !l.contains(']'), "{l}");
        }
    }
}
