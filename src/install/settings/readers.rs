//! How one installer setting is read (master's viper: `AllowEmptyEnv(true)`) and what makes its text valid:
//! booleans, absolute paths, lists, plain file names. [`super::options::resolve`] reads every setting
//! through these.

use crate::error::{Error, Result};
use crate::settings::{EmptyEnv, Env, Named};
use std::path::PathBuf;

/// An environment-only boolean (`true`/`false`, any case; empty or unset is false).
pub(super) fn env_bool(env: Env<'_>, name: &str) -> Result<bool> {
    match env(name).map(|v| v.trim().to_ascii_lowercase()).as_deref() {
        None | Some("") | Some("false") => Ok(false),
        Some("true") => Ok(true),
        Some(v) => Err(Error::env(name, format!("{v:?} is not true or false"))),
    }
}

/// How the installer reads its settings (master's viper: `AllowEmptyEnv(true)`).
pub(super) fn named(env: Env<'_>) -> Named<'_> {
    Named {
        env,
        empty: EmptyEnv::Value,
    }
}

/// An absolute directory or file setting with a default.
pub(super) fn path(
    r: &Named<'_>,
    flag: &Option<String>,
    var: &str,
    default: &str,
) -> Result<PathBuf> {
    abs_path(var, r.text(flag, var, default))
}

/// An optional absolute path: "" is none.
pub(super) fn opt_path(
    r: &Named<'_>,
    flag: &Option<String>,
    var: &str,
    default: &str,
) -> Result<Option<PathBuf>> {
    let v = r.text(flag, var, default);
    if v.is_empty() {
        return Ok(None);
    }
    abs_path(var, v).map(Some)
}

/// A list setting: split on `sep`, trimmed, empty items dropped.
pub(super) fn list(
    r: &Named<'_>,
    flag: &Option<String>,
    var: &str,
    sep: impl Fn(char) -> bool,
) -> Vec<String> {
    r.text(flag, var, "")
        .split(sep)
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

fn abs_path(name: &str, v: String) -> Result<PathBuf> {
    if !v.starts_with('/') {
        return Err(Error::env(name, format!("{v:?} is not an absolute path")));
    }
    Ok(PathBuf::from(v))
}

pub(super) fn plain_file_name(name: &str, v: &str) -> Result<()> {
    if !crate::fsutil::is_plain_name(v.as_bytes()) {
        return Err(Error::env(name, format!("{v:?} is not a plain file name")));
    }
    Ok(())
}
