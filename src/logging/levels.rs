//! Log level words and Istio's scoped form (`--log_output_level=default:debug,cni-plugin:info`).
//!
//! Every word the seed docs, maistra and upstream use is accepted and mapped to the nearest `log` level
//! (`panic`/`fatal` → error, `warning` → warn, `none` → off); an unknown word is reported and ignored,
//! never a reason to refuse to start.

use log::LevelFilter;

/// The nearest level for a level word, or `None` for a word that names no level.
pub fn nearest_level(word: &str) -> Option<LevelFilter> {
    Some(match word.trim().to_ascii_lowercase().as_str() {
        "trace" => LevelFilter::Trace,
        "debug" => LevelFilter::Debug,
        "info" => LevelFilter::Info,
        "warn" | "warning" => LevelFilter::Warn,
        "error" | "err" | "fatal" | "panic" | "dpanic" | "critical" | "crit" => LevelFilter::Error,
        "none" | "off" => LevelFilter::Off,
        _ => return None,
    })
}

/// Our scopes and the Istio scope names that select them.
pub const PLUGIN_SCOPES: &[&str] = &["cni-plugin", "cni", "plugin"];
pub const INSTALL_SCOPES: &[&str] = &["install", "cni-agent", "cni-install", "installer"];
pub const REPAIR_SCOPES: &[&str] = &["repair", "cni-repair"];
pub const DEFAULT_SCOPES: &[&str] = &["default"];

/// Parsed `scope:level` pairs in the order given (a later pair wins; `all` applies to every scope).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Scopes {
    pairs: Vec<(String, LevelFilter)>,
}

impl Scopes {
    /// Parses a comma-separated list of `scope:level` or bare `level` (the `default` scope). Returns
    /// the scopes and one warning per part it could not use.
    pub fn parse(spec: &str) -> (Scopes, Vec<String>) {
        let mut s = Scopes::default();
        let warnings = s.extend(spec);
        (s, warnings)
    }

    /// Adds the pairs of `spec` after the existing ones (so they win); returns the warnings.
    pub fn extend(&mut self, spec: &str) -> Vec<String> {
        let mut warnings = Vec::new();
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (scope, word) = match part.rsplit_once(':') {
                Some((s, w)) => (s.trim().to_ascii_lowercase(), w),
                None => ("default".to_string(), part),
            };
            match nearest_level(word) {
                Some(l) => self.pairs.push((scope, l)),
                None => warnings.push(format!(
                    "log level {part:?}: {word:?} is not a level (debug, info, warn, error, none); ignored"
                )),
            }
        }
        warnings
    }

    /// The level set for any of `names` (or `all`), the last one given winning.
    pub fn level_of(&self, names: &[&str]) -> Option<LevelFilter> {
        self.pairs
            .iter()
            .rev()
            .find(|(s, _)| s == "all" || names.contains(&s.as_str()))
            .map(|(_, l)| *l)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use log::LevelFilter as L;

    #[test]
    fn every_documented_word_maps_to_a_level() {
        for (w, l) in [
            ("panic", L::Error),
            ("fatal", L::Error),
            ("error", L::Error),
            ("warn", L::Warn),
            ("Warning", L::Warn),
            ("info", L::Info),
            ("DEBUG", L::Debug),
            ("trace", L::Trace),
            ("none", L::Off),
        ] {
            assert_eq!(nearest_level(w), Some(l), "{w}");
        }
        assert_eq!(nearest_level("loud"), None);
    }

    #[test]
    fn scoped_form() {
        let (s, w) = Scopes::parse("default:debug,cni:info");
        assert!(w.is_empty());
        assert_eq!(s.level_of(DEFAULT_SCOPES), Some(L::Debug));
        assert_eq!(s.level_of(PLUGIN_SCOPES), Some(L::Info));
        assert_eq!(s.level_of(INSTALL_SCOPES), None);
        let (s, _) = Scopes::parse("warn");
        assert_eq!(s.level_of(DEFAULT_SCOPES), Some(L::Warn));
        assert_eq!(s.level_of(PLUGIN_SCOPES), None);
        let (s, _) = Scopes::parse("all:debug,repair:error");
        assert_eq!(s.level_of(INSTALL_SCOPES), Some(L::Debug));
        assert_eq!(s.level_of(REPAIR_SCOPES), Some(L::Error));
        let (s, w) = Scopes::parse("default:loud, cni-plugin:debug");
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].contains("loud"));
        assert_eq!(s.level_of(DEFAULT_SCOPES), None);
        assert_eq!(s.level_of(PLUGIN_SCOPES), Some(L::Debug));
    }
}
