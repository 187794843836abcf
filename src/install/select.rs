//! Choosing the primary CNI configuration exactly as kubelet/libcni does (installer.md §2.2, §2.3):
//! candidates are files ending exactly in `.conf` or `.conflist`, sorted bytewise, and invalid ones are
//! skipped with a warning. The decision is pure; [`list_candidates`] is the only effect.

use crate::error::{Error, IoContext, Result};
use crate::fsutil;
use std::path::Path;

/// Standalone mode's default file name.
pub const STANDALONE_DEFAULT: &str = "YYY-istio-cni.conf";

/// A candidate file: its name and its content (or the read error).
#[derive(Debug, Clone)]
pub struct Candidate {
    pub name: String,
    pub content: std::result::Result<Vec<u8>, String>,
}

/// The valid configurations in priority order, and the skipped ones with the reason.
#[derive(Debug, Clone, Default)]
pub struct Listing {
    pub valid: Vec<String>,
    pub skipped: Vec<(String, String)>,
}

/// True for names libcni considers: Go's `filepath.Ext(name)` is exactly `.conf` or `.conflist` (the
/// suffix from the last dot, so a file named just `.conf` is a candidate).
pub fn is_candidate_name(name: &str) -> bool {
    matches!(
        name.rfind('.').map(|i| &name[i..]),
        Some(".conf") | Some(".conflist")
    )
}

/// Lists and reads the candidate files of `dir`: names with a candidate extension that are not
/// directories. Each is read with [`fsutil::read_config`]: only regular files (links followed), size
/// checked first, at most the limit + 1 bytes read, so a FIFO, a link to `/dev/zero` or a huge sparse file
/// is an invalid candidate (with the reason) instead of a hang or a memory blow-up. A missing directory
/// lists as empty, as libcni.
pub fn list_candidates(dir: &Path) -> Result<Vec<Candidate>> {
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io(format!("list {}", dir.display()), e)),
    };
    let mut out = Vec::new();
    for ent in rd {
        let ent = ent.io_context(|| format!("list {}", dir.display()))?;
        let name = ent.file_name().to_string_lossy().into_owned();
        if !is_candidate_name(&name) {
            continue;
        }
        let ft = ent
            .file_type()
            .io_context(|| format!("stat {}", ent.path().display()))?;
        if ft.is_dir() {
            continue;
        }
        let content = match fsutil::read_config(&ent.path(), fsutil::MAX_CONFIG_BYTES) {
            Ok(Some(b)) => Ok(b),
            // Removed between the listing and the read: not a candidate any more.
            Ok(None) => continue,
            Err(e) => Err(e.to_string()),
        };
        out.push(Candidate { name, content });
    }
    Ok(out)
}

/// Whether `<dir>/<name>/` holds `*.conf` files (libcni ≥1.2 accepts a list without `plugins` then).
pub fn plugin_dir_has_confs(dir: &Path, name: &str) -> bool {
    match std::fs::read_dir(dir.join(name)) {
        Ok(rd) => rd.flatten().any(|e| {
            Path::new(&e.file_name())
                .extension()
                .and_then(|x| x.to_str())
                == Some("conf")
        }),
        Err(_) => false,
    }
}

/// libcni's validity of one candidate; `Err` carries the warning text (see [`super::libcni`]).
pub fn validate(
    name: &str,
    content: &[u8],
    plugin_dir_has_confs: &dyn Fn(&str) -> bool,
) -> std::result::Result<(), String> {
    super::libcni::validate(name, content, plugin_dir_has_confs)
}

/// upstream `getConfigFilenames`: the valid configurations sorted bytewise; `no networks found in <dir>`
/// without candidates, `no valid networks found in <dir>` when none is valid.
pub fn valid_configs(
    dir_display: &str,
    candidates: &[Candidate],
    plugin_dir_has_confs: &dyn Fn(&str) -> bool,
) -> Result<Listing> {
    if candidates.is_empty() {
        return Err(Error::config(format!("no networks found in {dir_display}")));
    }
    let mut sorted: Vec<&Candidate> = candidates.iter().collect();
    sorted.sort_by(|a, b| a.name.as_bytes().cmp(b.name.as_bytes()));
    let mut listing = Listing::default();
    for c in sorted {
        let verdict = match &c.content {
            Ok(bytes) => validate(&c.name, bytes, plugin_dir_has_confs),
            Err(e) => Err(e.clone()),
        };
        match verdict {
            Ok(()) => listing.valid.push(c.name.clone()),
            Err(why) => listing.skipped.push((c.name.clone(), why)),
        }
    }
    if listing.valid.is_empty() {
        return Err(Error::config(format!(
            "no valid networks found in {dir_display}"
        )));
    }
    Ok(listing)
}

/// The outcome of choosing the file to write to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Choice {
    /// Write to (merge into) this file of the conf dir.
    Use(String),
    /// Nothing usable yet: wait for a change in the conf dir; the text says what we wait for.
    Wait(String),
}

/// upstream `getCNIConfigFilepath`, one evaluation: standalone returns `configured` or
/// [`STANDALONE_DEFAULT`] at once; chained uses `configured` (else the first valid file, skipping
/// `skip` — the Istio-owned file) and, when that file is missing, its `.conf`/`.conflist` twin.
pub fn choose(
    chained: bool,
    configured: Option<&str>,
    listing: &Result<Listing>,
    skip: Option<&str>,
    exists: &dyn Fn(&str) -> bool,
) -> Choice {
    if !chained {
        return Choice::Use(configured.unwrap_or(STANDALONE_DEFAULT).to_string());
    }
    let name = match configured {
        Some(n) => n.to_string(),
        None => match listing {
            Ok(l) => match l.valid.iter().find(|n| Some(n.as_str()) != skip) {
                Some(n) => n.clone(),
                None => return Choice::Wait("no primary CNI config file yet".into()),
            },
            Err(e) => return Choice::Wait(e.to_string()),
        },
    };
    if exists(&name) {
        return Choice::Use(name);
    }
    if name.ends_with(".conf") {
        let twin = format!("{name}list");
        if exists(&twin) {
            return Choice::Use(twin);
        }
    } else if let Some(stem) = name
        .strip_suffix("list")
        .filter(|_| name.ends_with(".conflist"))
    {
        if exists(stem) {
            return Choice::Use(stem.to_string());
        }
    }
    Choice::Wait(format!("CNI config file {name} does not exist yet"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cand(name: &str, text: &str) -> Candidate {
        Candidate {
            name: name.into(),
            content: Ok(text.as_bytes().to_vec()),
        }
    }

    #[test]
    fn libcni_rules() {
        let none = |_: &str| false;
        assert!(validate("a.conf", br#"{"type":"bridge"}"#, &none).is_ok());
        assert!(validate("a.conf", br#"{"type":""}"#, &none).is_err());
        assert!(validate("a.conf", br#"{"name":"x"}"#, &none).is_err());
        assert!(validate("a.conf", b"not json", &none).is_err());
        assert!(validate("a.conflist", br#"{"plugins":[{"type":"x"}]}"#, &none).is_err());
        assert!(validate(
            "a.conflist",
            br#"{"name":"n","pugins":[{"type":"x"}]}"#,
            &none
        )
        .is_err());
        assert!(validate("a.conflist", br#"{"name":"n","plugins":[]}"#, &none).is_err());
        assert!(validate(
            "a.conflist",
            br#"{"name":"n","plugins":[{"type":"x"}]}"#,
            &none
        )
        .is_ok());
        assert!(validate("a.conflist", br#"{"name":"n"}"#, &|n| n == "n").is_ok());
        assert!(validate("a.conflist", br#"[1]"#, &none).is_err());
    }

    #[test]
    fn bytewise_order_and_twins() {
        let c = vec![
            cand("b.conflist", r#"{"name":"n","plugins":[{"type":"x"}]}"#),
            cand("b.conf", r#"{"type":"x"}"#),
            cand("B.conf", "junk"),
        ];
        let l = valid_configs("/d", &c, &|_| false).unwrap();
        assert_eq!(l.valid, vec!["b.conf", "b.conflist"]);
        assert_eq!(l.skipped.len(), 1);
        let ok = Ok(l);
        let exists = |n: &str| n == "b.conflist";
        assert_eq!(
            choose(true, Some("b.conf"), &ok, None, &exists),
            Choice::Use("b.conflist".into())
        );
        assert!(matches!(
            choose(true, Some("x.conf"), &ok, None, &exists),
            Choice::Wait(_)
        ));
        assert_eq!(
            choose(false, None, &ok, None, &exists),
            Choice::Use(STANDALONE_DEFAULT.into())
        );
    }
}
