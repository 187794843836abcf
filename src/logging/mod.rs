//! Logging: `env_logger` on stderr, never stdout (stdout carries only CNI results). The level comes from
//! `RUST_LOG` when set, else from the caller (the plugin's `plugin_log_level`, the installer's settings).
//!
//! Lines read like upstream's ([`line`]): `<time>\t<level>\t<scope>\t<msg>`, or with `--log_as_json`
//! Istio's JSON. The installer honours Istio's scoped levels (`--log_output_level=default:debug,cni-plugin:info`,
//! [`levels`]) per scope — `default`, `install`, `repair` and `cni-plugin` (the plugin's relayed lines).
//!
//! The plugin sends each of its records to the installer's relay socket as one JSON datagram
//! `{"level":"info","msg":"..."}` (the fields upstream's plugin sends to its UDS log server); the installer
//! re-logs it under the `cni-plugin` scope ([`relayed`]).

pub mod levels;
pub mod line;

pub use levels::{nearest_level, Scopes};
use log::{Level, LevelFilter};
use std::io::Write;
use std::os::unix::net::UnixDatagram;
use std::sync::OnceLock;
use std::time::SystemTime;

/// Log target of relayed plugin lines in the installer (the `cni-plugin` scope).
pub const PLUGIN_TARGET: &str = "cni-plugin";

/// The relay socket, once [`attach_relay`] found one.
static RELAY: OnceLock<UnixDatagram> = OnceLock::new();

/// Per-scope levels and the line format of a process.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Everything without a scope of its own.
    pub default: LevelFilter,
    pub install: Option<LevelFilter>,
    pub repair: Option<LevelFilter>,
    /// Relayed plugin lines.
    pub plugin: LevelFilter,
    pub json: bool,
}

impl Config {
    pub fn plain(default: LevelFilter) -> Config {
        Config {
            default,
            install: None,
            repair: None,
            plugin: LevelFilter::Trace,
            json: false,
        }
    }

    /// The most verbose level any scope wants (the global gate).
    pub fn max(&self) -> LevelFilter {
        [self.install, self.repair, Some(self.plugin)]
            .into_iter()
            .flatten()
            .fold(self.default, std::cmp::max)
    }
}

fn write_record(buf: &mut dyn Write, r: &log::Record<'_>, json: bool) -> std::io::Result<()> {
    let msg = r.args().to_string();
    if let Some(sock) = RELAY.get() {
        // Non-blocking: a full or absent installer drops the line, it never delays ADD.
        let mut d = String::from("{\"level\":");
        crate::json::write_string(&mut d, line::level_name(r.level()));
        d.push_str(",\"msg\":");
        crate::json::write_string(&mut d, &msg);
        d.push('}');
        let _ = sock.send(d.as_bytes());
    }
    let now = SystemTime::now();
    let text = if json {
        line::json_line(now, r.level(), line::scope_of(r.target()), &msg)
    } else {
        line::text_line(now, r.level(), r.target(), &msg)
    };
    writeln!(buf, "{text}")
}

fn builder(json: bool) -> env_logger::Builder {
    let mut b = env_logger::Builder::new();
    b.target(env_logger::Target::Stderr)
        .format(move |buf, r| write_record(buf, r, json));
    b
}

/// Starts logging at `default` unless `RUST_LOG` says otherwise. Safe to call more than once.
pub fn init(default: LevelFilter) {
    let mut b = builder(false);
    b.filter_level(LevelFilter::Trace);
    let _ = b.try_init();
    set_level(default);
}

/// Starts logging with per-scope levels and the chosen line format (the installer). `RUST_LOG`, when
/// set, replaces the levels (not the format).
pub fn init_with(c: &Config) {
    let mut b = builder(c.json);
    match std::env::var("RUST_LOG")
        .ok()
        .filter(|v| !v.trim().is_empty())
    {
        Some(spec) => {
            b.parse_filters(&spec);
        }
        None => {
            b.filter_level(c.default);
            if let Some(l) = c.install {
                b.filter_module("istio_cni::install", l);
            }
            if let Some(l) = c.repair {
                b.filter_module("istio_cni::repair", l);
            }
            b.filter_module(PLUGIN_TARGET, c.plugin);
        }
    }
    let _ = b.try_init();
}

/// Re-logs one datagram from the plugin under the `cni-plugin` scope: our plugin's JSON
/// `{"level":..,"msg":..}`, or a plain text line (logged at info).
pub fn relayed(data: &[u8]) {
    let (level, msg) = parse_relayed(data);
    log::log!(target: PLUGIN_TARGET, level, "{msg}");
}

/// Room a relayed message may take beyond its datagram's size before it is cut (a short message full of
/// quotes is never cut; a 64 KiB one that JSON would double is).
const RELAY_SLACK: usize = 64;

/// The level and (sanitised) message of a relayed datagram. The message as logged (JSON-escaped or not)
/// is at most the datagram's size plus [`RELAY_SLACK`] ([`line::sanitise`]), so a datagram cannot make
/// the installer write more than it was sent.
pub fn parse_relayed(data: &[u8]) -> (Level, String) {
    let text = line::compact_lossy(data);
    let max = data.len() + RELAY_SLACK;
    if text.starts_with('{') {
        if let Ok(o) = crate::json::parse_object(&text, "relayed line") {
            if let Some(msg) = crate::json::str_of(&o, "msg") {
                let level = crate::json::str_of(&o, "level")
                    .and_then(nearest_level)
                    .and_then(|l| l.to_level())
                    .unwrap_or(Level::Info);
                return (level, line::sanitise(msg, max));
            }
        }
    }
    (Level::Info, line::sanitise(&text, max))
}

/// Also sends log records to `<run_dir>/log.sock` when the installer listens there (unix datagram, one
/// record per datagram). Does nothing when the socket is absent.
pub fn attach_relay(run_dir: &str) {
    let path = crate::rundir::RunDir::new(run_dir).log_socket();
    if RELAY.get().is_some() || !path.exists() {
        return;
    }
    if let Ok(sock) = UnixDatagram::unbound() {
        if sock.set_nonblocking(true).is_ok() && sock.connect(&path).is_ok() {
            let _ = RELAY.set(sock);
        }
    }
}

/// Sends one structured record (not a log line, e.g. [`crate::addrecord`]) to the relay socket, if
/// [`attach_relay`] found one. Non-blocking; a full or absent installer drops it.
pub fn relay_record(data: &[u8]) {
    if let Some(sock) = RELAY.get() {
        let _ = sock.send(data);
    }
}

/// Changes the level, unless `RUST_LOG` fixed it.
pub fn set_level(level: LevelFilter) {
    match std::env::var("RUST_LOG").ok().and_then(|v| parse_level(&v)) {
        Some(l) => log::set_max_level(l),
        None => log::set_max_level(level),
    }
}

/// A level word (Istio's, maistra's, Rust's; see [`nearest_level`]), or Istio's scoped form, whose
/// `default` scope (else its first level) counts.
pub fn parse_level(s: &str) -> Option<LevelFilter> {
    if let Some(l) = nearest_level(s) {
        return Some(l);
    }
    let (scopes, _) = Scopes::parse(s);
    scopes.level_of(levels::DEFAULT_SCOPES).or_else(|| {
        s.split(',')
            .find_map(|p| nearest_level(p.rsplit(':').next().unwrap_or(p)))
    })
}

#[cfg(test)]
mod tests {
    use log::{Level, LevelFilter};

    #[test]
    fn levels() {
        assert_eq!(super::parse_level("DEBUG"), Some(LevelFilter::Debug));
        assert_eq!(super::parse_level("none"), Some(LevelFilter::Off));
        assert_eq!(super::parse_level("panic"), Some(LevelFilter::Error));
        assert_eq!(
            super::parse_level("cni:info,default:debug"),
            Some(LevelFilter::Debug)
        );
        assert_eq!(super::parse_level("cni:warn"), Some(LevelFilter::Warn));
        assert_eq!(super::parse_level("loud"), None);
    }

    #[test]
    fn relayed_datagrams() {
        assert_eq!(
            super::parse_relayed(br#"{"level":"debug","msg":"ADD x\u001b"}"#),
            (Level::Debug, "ADD x ".to_string())
        );
        assert_eq!(
            super::parse_relayed(b"ADD pod default/web: redirected\n"),
            (Level::Info, "ADD pod default/web: redirected".to_string())
        );
        assert_eq!(
            super::parse_relayed(b"a\xff\xfe"),
            (Level::Info, "a??".to_string())
        );
        assert_eq!(super::parse_relayed(b"{not json").1, "{not json");
    }

    /// Hostile datagrams of 64 KiB (the most the relay reads): bytes that are not UTF-8, quotes and
    /// backslashes that JSON doubles, tabs, control characters, inside a JSON record or bare.
    fn hostile_datagrams() -> Vec<Vec<u8>> {
        let n = super::super::install::relay::MAX_LINE;
        let fill = |unit: &[u8], head: &[u8], tail: &[u8]| -> Vec<u8> {
            let mut d = head.to_vec();
            while d.len() + unit.len() + tail.len() <= n {
                d.extend_from_slice(unit);
            }
            d.extend_from_slice(tail);
            d
        };
        vec![
            fill(b"\xff", b"", b""),
            fill(b"\"\\\t", b"", b""),
            fill(b"\x01\x1b\x7f", b"", b""),
            fill(b"\xc2\x85", b"", b""), // U+0085, a C1 control
            fill(b"\xff", br#"{"level":"warn","msg":""#, br#""}"#),
            fill(br#"\""#, br#"{"level":"warn","msg":""#, br#""}"#),
            fill(br#"\t"#, br#"{"level":"warn","msg":""#, br#""}"#),
            fill(br#"\ud800"#, br#"{"level":"warn","msg":""#, br#""}"#),
            fill("ü€😀".as_bytes(), b"", b""),
        ]
    }

    /// A relayed line, text or JSON, is at most its datagram plus a small constant (the time, level and
    /// scope of either line, JSON's field names, the truncation marker).
    #[test]
    fn a_relayed_line_is_no_longer_than_its_datagram() {
        use super::line::{json_line, text_line};
        let t = std::time::UNIX_EPOCH;
        for d in hostile_datagrams() {
            let (level, msg) = super::parse_relayed(&d);
            let json = json_line(t, level, "cni-plugin", &msg);
            let text = text_line(t, level, super::PLUGIN_TARGET, &msg);
            let what = String::from_utf8_lossy(&d[..40]).to_string();
            assert!(
                json.len() <= d.len() + 160,
                "{what}: JSON line {} for {}",
                json.len(),
                d.len()
            );
            assert!(
                text.len() <= d.len() + 160,
                "{what}: text line {} for {}",
                text.len(),
                d.len()
            );
            crate::json::parse_object(&json, "line").unwrap();
            assert!(!msg.chars().any(|c| c.is_control() && c != '\t'), "{what}");
        }
    }

    #[test]
    fn the_gate_is_the_most_verbose_scope() {
        let mut c = super::Config::plain(LevelFilter::Warn);
        c.plugin = LevelFilter::Info;
        assert_eq!(c.max(), LevelFilter::Info);
        c.install = Some(LevelFilter::Debug);
        assert_eq!(c.max(), LevelFilter::Debug);
    }
}
