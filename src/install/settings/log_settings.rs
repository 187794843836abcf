//! The installer's logging settings: its own per-scope levels (`--log_output_level`, LOG_LEVEL), the
//! plugin's level (PLUGIN_LOG_LEVEL) and JSON lines (LOG_AS_JSON).

use super::flags::Flags;
use crate::error::{Error, Result};
use crate::logging::levels::{self, Scopes};
use crate::settings::Named;
use log::LevelFilter;

/// PLUGIN_LOG_LEVEL: a level word the plugin knows, lower-cased.
fn check_plugin_level(name: &str, v: &str) -> Result<String> {
    match crate::logging::nearest_level(v) {
        Some(_) => Ok(v.trim().to_ascii_lowercase()),
        None => Err(Error::env(
            name,
            format!("{v:?} is not a log level (debug, info, warn, error, none)"),
        )),
    }
}

/// The plugin level, the installer's log configuration and warnings about level words we did not know.
///
/// `plugin_log_level` is PLUGIN_LOG_LEVEL (flag or env), else the `cni-plugin` scope of
/// `--log_output_level`, else `info`: a bare or `default:` level is the installer's own (upstream keeps
/// the plugin at `info` with `--log_output_level=debug`). The installer's scopes are
/// `--log_output_level`, then LOG_LEVEL (either form; seed-era and maistra docs set it) on top; unknown
/// words are warnings, never a refusal to start.
pub fn resolve(f: &Flags, r: &Named<'_>) -> Result<(String, crate::logging::Config, Vec<String>)> {
    let mut scopes = Scopes::default();
    let mut warnings = Vec::new();
    if let Some(spec) = &f.log_output_level {
        warnings.extend(scopes.extend(spec));
    }
    if let Some(found) = r.find(&f.log_level, "LOG_LEVEL") {
        for w in scopes.extend(&found.value) {
            warnings.push(format!("{}: {w}", found.source));
        }
    }
    let explicit_plugin = r.typed(&f.plugin_log_level, "PLUGIN_LOG_LEVEL", None, |n, v| {
        check_plugin_level(n, v).map(Some)
    })?;
    let scoped_plugin = scopes.level_of(levels::PLUGIN_SCOPES);
    let plugin_log_level = match (explicit_plugin, scoped_plugin) {
        (Some(l), _) => l,
        (None, Some(l)) => level_word(l).to_string(),
        (None, None) => "info".to_string(),
    };
    let relay_level = scoped_plugin.unwrap_or_else(|| {
        crate::logging::nearest_level(&plugin_log_level).unwrap_or(LevelFilter::Info)
    });
    let log = crate::logging::Config {
        default: scopes
            .level_of(levels::DEFAULT_SCOPES)
            .unwrap_or(LevelFilter::Info),
        install: scopes.level_of(levels::INSTALL_SCOPES),
        repair: scopes.level_of(levels::REPAIR_SCOPES),
        plugin: relay_level,
        json: r.bool(&f.log_as_json, "LOG_AS_JSON", false)?,
    };
    Ok((plugin_log_level, log, warnings))
}

/// The plugin's name for a level (what `plugin_log_level` holds).
fn level_word(l: LevelFilter) -> &'static str {
    match l {
        LevelFilter::Off => "none",
        LevelFilter::Error => "error",
        LevelFilter::Warn => "warn",
        LevelFilter::Info => "info",
        LevelFilter::Debug | LevelFilter::Trace => "debug",
    }
}

#[cfg(test)]
mod tests {
    use crate::install::settings::flags::{normalize_args, Flags};
    use crate::install::settings::options::tests::resolve_with;
    use log::LevelFilter;

    #[test]
    fn scopes_and_equals_args() {
        let a = normalize_args(&[
            "--log_output_level=default:info,cni-plugin:debug".into(),
            "--once".into(),
        ])
        .unwrap();
        assert_eq!(
            a,
            vec![
                "--log-output-level",
                "default:info,cni-plugin:debug",
                "--once"
            ]
        );
        let f = Flags {
            log_output_level: Some("default:info,cni-plugin:debug".into()),
            ..Flags::default()
        };
        assert_eq!(resolve_with(&f, &[]).unwrap().plugin_log_level, "debug");
    }
    #[test]
    fn every_log_level_word_starts() {
        for w in [
            "panic",
            "fatal",
            "error",
            "warn",
            "warning",
            "info",
            "debug",
            "trace",
            "none",
            "default:debug,cni:info",
            "loud",
        ] {
            let s = resolve_with(&Flags::default(), &[("LOG_LEVEL", w)]).unwrap();
            assert_eq!(s.warnings.is_empty(), w != "loud", "{w}: {:?}", s.warnings);
        }
        let level = |w: &str| {
            resolve_with(&Flags::default(), &[("LOG_LEVEL", w)])
                .unwrap()
                .log
        };
        assert_eq!(level("panic").default, LevelFilter::Error);
        assert_eq!(level("warning").default, LevelFilter::Warn);
        assert_eq!(level("none").default, LevelFilter::Off);
        assert_eq!(level("loud").default, LevelFilter::Info);
        let l = level("default:debug,cni:info");
        assert_eq!(
            (l.default, l.plugin),
            (LevelFilter::Debug, LevelFilter::Info)
        );
        let f = Flags {
            log_output_level: Some(
                "default:debug,install:warn,repair:error,cni-plugin:warn".into(),
            ),
            log_as_json: Some("true".into()),
            ..Flags::default()
        };
        let s = resolve_with(&f, &[]).unwrap();
        assert_eq!(
            s.log,
            crate::logging::Config {
                default: LevelFilter::Debug,
                install: Some(LevelFilter::Warn),
                repair: Some(LevelFilter::Error),
                plugin: LevelFilter::Warn,
                json: true,
            }
        );
        assert_eq!(s.plugin_log_level, "warn");
    }
    /// upstream keeps the plugin at `info` when `--log_output_level` is a bare `debug`: only PLUGIN_LOG_LEVEL
    /// (or the `cni-plugin` scope) sets it (differential ambient-enablement-selector-chart-default).
    #[test]
    fn plugin_level_is_not_the_installer_level() {
        let f = Flags {
            log_output_level: Some("debug".into()),
            ..Flags::default()
        };
        let s = resolve_with(&f, &[("LOG_LEVEL", "debug")]).unwrap();
        assert_eq!(s.plugin_log_level, "info");
        assert_eq!(s.log.default, LevelFilter::Debug);
        let f = Flags {
            log_output_level: Some("default:debug".into()),
            ..Flags::default()
        };
        assert_eq!(resolve_with(&f, &[]).unwrap().plugin_log_level, "info");
        let s = resolve_with(&f, &[("PLUGIN_LOG_LEVEL", "debug")]).unwrap();
        assert_eq!(
            (s.plugin_log_level.as_str(), s.log.plugin),
            ("debug", LevelFilter::Debug)
        );
        assert!(resolve_with(&Flags::default(), &[("PLUGIN_LOG_LEVEL", "loud")]).is_err());
    }
}
