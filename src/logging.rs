//! Logging: `env_logger` on stderr, never stdout (stdout carries only CNI results). The level comes from
//! `RUST_LOG` when set, else from the caller (the plugin's `plugin_log_level`, the installer's flag).

use log::LevelFilter;

/// Starts logging at `default` unless `RUST_LOG` says otherwise. Safe to call more than once.
pub fn init(default: LevelFilter) {
    let mut b = env_logger::Builder::new();
    b.target(env_logger::Target::Stderr)
        .format_timestamp_millis()
        .filter_level(LevelFilter::Trace);
    let _ = b.try_init();
    set_level(default);
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
