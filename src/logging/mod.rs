//! Logging: `env_logger` on stderr, never stdout (stdout carries only CNI results). The level comes from
//! `RUST_LOG` when set, else from the caller (the plugin's `plugin_log_level`, the installer's settings).
//!
//! Lines read like upstream's ([`mod@line`]): `<time>\t<level>\t<scope>\t<msg>`, or with `--log_as_json`
//! Istio's JSON. The installer honours Istio's scoped levels (`--log_output_level=default:debug,cni-plugin:info`,
//! [`levels`]) per scope — `default`, `install`, `repair` and `cni-plugin` (the plugin's relayed lines).
//!
//! The plugin sends each of its records to the installer's relay socket as one JSON datagram
//! `{"level":"info","msg":"..."}` (the fields upstream's plugin sends to its UDS log server), an ADD's
//! last line in the datagram of the ADD's record ([`log_with_record`]); the installer re-logs it under the
//! `cni-plugin` scope ([`relayed`]). A full socket queue (a burst of plugins: the kernel queues
//! `net.unix.max_dgram_qlen` datagrams, 10 by default) is waited out, at most [`FULL_WAIT`] per process.
//! It also appends its info, warn and error lines, as Istio's JSON, to `<run_dir>/istio-cni.log`
//! ([`rolling`], attached with the relay).

pub mod levels;
pub mod line;
pub mod rolling;

pub use levels::{nearest_level, Scopes};
use log::{Level, LevelFilter};
use std::io::Write;
use std::os::fd::AsFd;
use std::os::unix::net::UnixDatagram;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime};

/// Log target of relayed plugin lines in the installer (the `cni-plugin` scope).
pub const PLUGIN_TARGET: &str = "cni-plugin";

/// The relay socket, once [`attach_relay`] found one.
static RELAY: OnceLock<UnixDatagram> = OnceLock::new();
/// The line being logged goes to the relay with a record ([`log_with_record`]), not on its own.
static HELD: AtomicBool = AtomicBool::new(false);
/// How long this process waited in all for room in the relay socket's queue, in microseconds.
static WAITED_US: AtomicU64 = AtomicU64::new(0);
/// The longest a process waits in all for room in a full relay queue: a relay that drains makes room
/// within milliseconds even on a loaded node, one that stopped reading costs each ADD at most this.
pub const FULL_WAIT: Duration = Duration::from_millis(200);

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

/// Whether a record is the HTTP client's wire dump: ureq's trace level writes every request and response
/// head and body as it is sent or read, unredacted ("TRACE - wire level debug. NOT REDACTED!"), so the
/// API server's `Authorization: Bearer` token with it. Never written, whatever the level (`RUST_LOG=trace`
/// reaches the plugin from the runtime's own environment); ureq's debug level redacts and is kept.
pub fn is_wire_dump(target: &str, level: Level) -> bool {
    let of = |krate: &str| {
        target == krate
            || target
                .strip_prefix(krate)
                .is_some_and(|r| r.starts_with("::"))
    };
    level == Level::Trace && (of("ureq") || of("ureq_proto"))
}

fn write_record(buf: &mut dyn Write, r: &log::Record<'_>, json: bool) -> std::io::Result<()> {
    if is_wire_dump(r.target(), r.level()) {
        return Ok(());
    }
    let msg = r.args().to_string();
    if let (Some(sock), false) = (RELAY.get(), HELD.load(Ordering::Relaxed)) {
        send(sock, datagram("{".into(), r.level(), &msg).as_bytes());
    }
    let now = SystemTime::now();
    let json_line = || line::json_line(now, r.level(), line::scope_of(r.target()), &msg);
    let text = if json {
        json_line()
    } else {
        line::text_line(now, r.level(), r.target(), &msg)
    };
    // The plugin's file, when attached: Istio's JSON whatever stderr's format.
    if rolling::attached() && r.level() <= rolling::MIN_LEVEL {
        match json {
            true => rolling::record(r.level(), &text),
            false => rolling::record(r.level(), &json_line()),
        }
    }
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
/// is at most the datagram's size plus `RELAY_SLACK` ([`line::sanitise`]), so a datagram cannot make
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

/// `head` (`{`, or a JSON object without its closing brace and with a comma) with the fields of a relayed
/// line: `"level":..,"msg":..}`.
fn datagram(mut head: String, level: Level, msg: &str) -> String {
    head.push_str("\"level\":");
    crate::json::write_string(&mut head, line::level_name(level));
    head.push_str(",\"msg\":");
    crate::json::write_string(&mut head, msg);
    head.push('}');
    head
}

/// Logs `line` (the plugin's scope) and sends it to the relay socket, if [`attach_relay`] found one, in
/// one datagram with `record` (a JSON object: an ADD's record), so that both arrive or neither. Without a
/// line, or one below the level, the record goes alone.
pub fn log_with_record(level: Level, line: Option<&str>, mut record: String) {
    let line = line.filter(|_| log::log_enabled!(target: PLUGIN_TARGET, level));
    if let Some(l) = line {
        HELD.store(true, Ordering::Relaxed);
        log::log!(target: PLUGIN_TARGET, level, "{l}");
        HELD.store(false, Ordering::Relaxed);
        record.pop();
        record = datagram(record + ",", level, l);
    }
    if let Some(sock) = RELAY.get() {
        send(sock, record.as_bytes());
    }
}

/// Sends one datagram without blocking; while the queue is full, waits for room, at most [`FULL_WAIT`]
/// for the whole process. An absent installer, or one not draining, loses the datagram, never the ADD.
fn send(sock: &UnixDatagram, d: &[u8]) {
    use nix::poll::{poll, PollFd, PollFlags};
    while let Err(e) = sock.send(d) {
        let waited = Duration::from_micros(WAITED_US.load(Ordering::Relaxed));
        let left = FULL_WAIT.saturating_sub(waited).as_millis() as u16;
        if e.kind() != std::io::ErrorKind::WouldBlock || left == 0 {
            return;
        }
        let t = Instant::now();
        let room = poll(&mut [PollFd::new(sock.as_fd(), PollFlags::POLLOUT)], left);
        WAITED_US.fetch_add(t.elapsed().as_micros() as u64 + 1, Ordering::Relaxed);
        if !matches!(room, Ok(n) if n > 0) {
            return;
        }
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
    fn the_http_clients_wire_dump_is_never_written() {
        use super::is_wire_dump;
        for t in [
            "ureq_proto::util",
            "ureq_proto",
            "ureq::unversioned::transport::tcp",
            "ureq",
        ] {
            assert!(is_wire_dump(t, Level::Trace), "{t}");
            assert!(!is_wire_dump(t, Level::Debug), "{t}");
        }
        for t in [
            "ureqx",
            "ureq_protocol::x",
            "istio_cni::kube",
            "cni-plugin",
            "rustls::client",
        ] {
            assert!(!is_wire_dump(t, Level::Trace), "{t}");
        }
    }

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
        let n = super::super::install::node::relay::MAX_LINE;
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
            for (kind, line) in [("JSON", &json), ("text", &text)] {
                let n = line.len();
                assert!(
                    n <= d.len() + 160,
                    "{what}: {kind} line {n} for {}",
                    d.len()
                );
            }
            crate::json::parse_object(&json, "line").unwrap();
            assert!(!msg.chars().any(|c| c.is_control() && c != '\t'), "{what}");
        }
    }

    /// An ADD's one datagram: its record's fields first, as before (an older installer, which reads only
    /// those, still counts it), then the line's.
    #[test]
    fn a_record_and_its_line_in_one_datagram() {
        let record = r#"{"record":"add","seconds":0.002931,"backend":"none","result":"skipped"}"#;
        let d = super::datagram(record.replace('}', ","), Level::Info, "ADD a/b: \"x\"");
        assert_eq!(
            d,
            r#"{"record":"add","seconds":0.002931,"backend":"none","result":"skipped","level":"info","msg":"ADD a/b: \"x\""}"#
        );
        assert_eq!(
            super::parse_relayed(d.as_bytes()),
            (Level::Info, "ADD a/b: \"x\"".to_string())
        );
        assert_eq!(
            super::datagram("{".into(), Level::Warn, "w"),
            r#"{"level":"warn","msg":"w"}"#
        );
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
