//! Bearer tokens: fixed (from a kubeconfig `token`) or read from a file that the kubelet rotates (the
//! service-account token; a kubeconfig `tokenFile` is refused by `config`). A file token is re-checked
//! (metadata first, content only on change) at most every [`RECHECK`], and immediately after a 401; a
//! failed or empty read keeps the last good token.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::error::{Error, IoContext, Result};
use crate::fsutil::Stamp;

/// How often a token file is looked at, at most.
pub const RECHECK: Duration = Duration::from_secs(2);

#[derive(Clone)]
pub struct TokenSource(Arc<Inner>);

enum Inner {
    Fixed(String),
    File { path: PathBuf, state: Mutex<State> },
}

struct State {
    token: String,
    checked: Instant,
    stamp: Stamp,
}

impl fmt::Debug for TokenSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &*self.0 {
            Inner::Fixed(_) => f.write_str("TokenSource::Fixed(<redacted>)"),
            Inner::File { path, .. } => write!(f, "TokenSource::File({})", path.display()),
        }
    }
}

fn stamp(path: &Path) -> std::io::Result<Stamp> {
    Ok(Stamp::of(&std::fs::metadata(path)?))
}

fn read_token(path: &Path) -> std::io::Result<String> {
    let t = std::fs::read_to_string(path)?;
    Ok(t.trim().to_string())
}

impl TokenSource {
    pub fn fixed(token: String) -> TokenSource {
        TokenSource(Arc::new(Inner::Fixed(token)))
    }

    /// Reads the token file now; it must exist and be non-empty. `field` and `origin` name it in errors.
    pub fn file(path: PathBuf, field: &str, origin: &str) -> Result<TokenSource> {
        let what = || format!("{origin}: {field}: read {}", path.display());
        let st = stamp(&path).io_context(what)?;
        let token = read_token(&path).io_context(what)?;
        if token.is_empty() {
            return Err(Error::config(format!(
                "{origin}: {field}: {} is empty",
                path.display()
            )));
        }
        Ok(TokenSource(Arc::new(Inner::File {
            path,
            state: Mutex::new(State {
                token,
                checked: Instant::now(),
                stamp: st,
            }),
        })))
    }

    /// The current token, re-checking the file if [`RECHECK`] has passed.
    pub fn get(&self) -> String {
        self.current(false).0
    }

    /// Re-reads the file now (after a 401); true if the token changed.
    pub fn refresh(&self) -> bool {
        self.current(true).1
    }

    fn current(&self, force: bool) -> (String, bool) {
        let (path, state) = match &*self.0 {
            Inner::Fixed(t) => return (t.clone(), false),
            Inner::File { path, state } => (path, state),
        };
        let mut st = state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if !force && st.checked.elapsed() < RECHECK {
            return (st.token.clone(), false);
        }
        st.checked = Instant::now();
        // The content is read only when the metadata changed (or after a 401).
        let read = stamp(path).and_then(|s| match s == st.stamp && !force {
            true => Ok(None),
            false => Ok(Some((s, read_token(path)?))),
        });
        match read {
            Ok(None) => (st.token.clone(), false),
            Ok(Some((new_stamp, t))) if !t.is_empty() => {
                st.stamp = new_stamp;
                let changed = t != st.token;
                if changed {
                    log::info!("token file {}: token rotated", path.display());
                    st.token = t;
                }
                (st.token.clone(), changed)
            }
            Ok(_) => {
                log::warn!(
                    "token file {} is empty; keeping the last token",
                    path.display()
                );
                (st.token.clone(), false)
            }
            Err(e) => {
                log::warn!("token file {}: {e}; keeping the last token", path.display());
                (st.token.clone(), false)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_token_refreshes_and_keeps_last_good() {
        let dir = crate::fsutil::test_dir("kube-token");
        let p = dir.join("token");
        std::fs::write(&p, "one\n").unwrap();
        let t = TokenSource::file(p.clone(), "tokenFile", "test").unwrap();
        assert_eq!(t.get(), "one");
        std::fs::write(&p, "two").unwrap();
        assert!(t.refresh());
        assert_eq!(t.get(), "two");
        std::fs::write(&p, "").unwrap();
        assert!(!t.refresh());
        assert_eq!(t.get(), "two");
        std::fs::remove_file(&p).unwrap();
        assert!(!t.refresh());
        assert_eq!(t.get(), "two");
        assert!(!format!("{t:?}").contains("two"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn missing_or_empty_token_file_is_refused() {
        let e = TokenSource::file("/nonexistent/token".into(), "tokenFile", "kubeconfig k")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("tokenFile") && e.contains("/nonexistent/token"),
            "{e}"
        );
        let fixed = TokenSource::fixed("abc".into());
        assert_eq!(fixed.get(), "abc");
        assert!(!format!("{fixed:?}").contains("abc"));
    }
}
