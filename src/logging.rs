//! Logging: `env_logger` on stderr, never stdout (stdout carries only CNI results). The level comes from
//! `RUST_LOG` when set, else from the caller (the plugin's `plugin_log_level`, the installer's flag).

use log::LevelFilter;
use std::io::Write;
use std::os::unix::net::UnixDatagram;
use std::sync::OnceLock;

/// File name of the installer's log relay socket in the agent run dir.
pub const RELAY_SOCKET: &str = "log.sock";

/// The relay socket, once [`attach_relay`] found one.
static RELAY: OnceLock<UnixDatagram> = OnceLock::new();

/// Writes each formatted record to stderr and, when attached, as one datagram to the installer's relay
/// socket (non-blocking: a full or absent installer drops the line, it never delays ADD).
struct Tee;

impl Write for Tee {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let _ = std::io::stderr().write_all(buf);
        if let Some(sock) = RELAY.get() {
            let line = buf.strip_suffix(b"\n").unwrap_or(buf);
            let _ = sock.send(line);
        }
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

/// Starts logging at `default` unless `RUST_LOG` says otherwise. Safe to call more than once.
pub fn init(default: LevelFilter) {
    let mut b = env_logger::Builder::new();
    b.target(env_logger::Target::Pipe(Box::new(Tee)))
        .format_timestamp_millis()
        .filter_level(LevelFilter::Trace);
    let _ = b.try_init();
    set_level(default);
}

/// Also sends log lines to `<run_dir>/log.sock` when the installer listens there (unix datagram, one line
/// per datagram). Does nothing when the socket is absent.
pub fn attach_relay(run_dir: &str) {
    let path = std::path::Path::new(run_dir).join(RELAY_SOCKET);
    if RELAY.get().is_some() || !path.exists() {
        return;
    }
    if let Ok(sock) = UnixDatagram::unbound() {
        if sock.set_nonblocking(true).is_ok() && sock.connect(&path).is_ok() {
            let _ = RELAY.set(sock);
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

/// Istio's level names (`debug`, `info`, `warn`, `error`, `none`) and Rust's.
pub fn parse_level(s: &str) -> Option<LevelFilter> {
    Some(match s.trim().to_ascii_lowercase().as_str() {
        "trace" => LevelFilter::Trace,
        "debug" => LevelFilter::Debug,
        "info" => LevelFilter::Info,
        "warn" | "warning" => LevelFilter::Warn,
        "error" | "fatal" => LevelFilter::Error,
        "none" | "off" => LevelFilter::Off,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn levels() {
        assert_eq!(super::parse_level("DEBUG"), Some(log::LevelFilter::Debug));
        assert_eq!(super::parse_level("none"), Some(log::LevelFilter::Off));
        assert_eq!(super::parse_level("loud"), None);
    }
}
