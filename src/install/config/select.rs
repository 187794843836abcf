//! Choosing the primary CNI configuration exactly as the container runtime does (installer.md §2.2,
//! §2.3): candidates are files ending exactly in `.conf`, `.conflist` or `.json` (containerd's go-cni,
//! CRI-O's ocicni and kubelet's dockershim all call libcni `ConfFiles(dir, [".conf", ".conflist",
//! ".json"])`; a `.json` is loaded like a `.conf`: one plugin, `type` required), sorted bytewise, and
//! invalid ones are skipped with a warning. Upstream's installer lists only `.conf`/`.conflist` and so
//! misses a `.json` the runtime loads first (a deviation, README). Names are bytes as in Go: compared,
//! sorted and opened as they are, spelled through UTF-8 only for messages. The decision is pure;
//! [`list_candidates`] is the only effect.

use super::plugin_dir::go_ext;
use crate::error::{Error, IoContext, Result};
use crate::fsutil;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::Path;

/// Standalone mode's default file name.
pub const STANDALONE_DEFAULT: &str = "YYY-istio-cni.conf";

/// A candidate file: its name and its content (or why it was not read).
#[derive(Debug, Clone)]
pub struct Candidate {
    pub name: OsString,
    pub content: std::result::Result<Vec<u8>, Unread>,
}

/// Why a candidate was not read, and what the runtime does with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unread {
    /// The runtime cannot use it either (a FIFO hangs it, a device or a file that is not JSON fails its
    /// load): skipped, as libcni skips (or never gets past) it.
    Skip(String),
    /// A regular file over our read limit that starts like a JSON object: libcni reads files of any size,
    /// so the runtime may load it, and we cannot tell whether it holds our entry.
    Undecided(String),
}

impl Unread {
    pub fn reason(&self) -> &str {
        match self {
            Unread::Skip(s) | Unread::Undecided(s) => s,
        }
    }
}

/// The valid configurations in priority order, and the skipped ones with the reason.
#[derive(Debug, Clone, Default)]
pub struct Listing {
    pub valid: Vec<OsString>,
    pub skipped: Vec<(OsString, String)>,
    /// An [`Unread::Undecided`] candidate sorting before every valid one: the runtime may load it, so no
    /// file of ours can be the runtime's choice for sure (the installer stays not ready while it is there).
    pub blocked: Option<(OsString, String)>,
    /// The first candidate sorting before every valid one that libcni v1.3 skips (with its reason) but
    /// libcni v1.1 loads ([`super::libcni::Rules`]): Debian 12's containerd 1.6 and podman 4.3 use it, so
    /// it must hold our entry too.
    pub older: Option<(OsString, String)>,
}

/// The extensions the runtimes load, in libcni's `ConfFiles` call.
pub const EXTENSIONS: [&str; 3] = [".conf", ".conflist", ".json"];

/// True for names the runtime considers: the extension is exactly one of [`EXTENSIONS`] (so a file
/// named just `.conf` is a candidate).
pub fn is_candidate_name(name: &OsStr) -> bool {
    EXTENSIONS.iter().any(|e| go_ext(name) == e.as_bytes())
}

/// True for a list (`.conflist`); every other candidate is loaded as one plugin (`.conf`, `.json`).
pub fn is_list_name(name: &OsStr) -> bool {
    go_ext(name) == b".conflist"
}

/// The `.conflist` a single-plugin file (`x.conf`, `x.json`) becomes when our entry is added: `x.conflist`.
pub fn list_name_for(name: &OsStr) -> Option<OsString> {
    let e = go_ext(name);
    if e != b".conf" && e != b".json" {
        return None;
    }
    let mut b = name.as_bytes()[..name.len() - e.len()].to_vec();
    b.extend_from_slice(b".conflist");
    Some(OsString::from_vec(b))
}

/// The `.conf`/`.conflist` twin of a name (`x.json`'s is `x.conflist`): what [`choose`] uses when the
/// pinned name does not exist, and the owned layout's check looks the primary up through.
pub fn twin(name: &OsStr) -> Option<OsString> {
    list_name_for(name).or_else(|| {
        let b = name.as_bytes();
        b.strip_suffix(b"list")
            .filter(|_| is_list_name(name))
            .map(|s| OsString::from_vec(s.to_vec()))
    })
}

/// A name as it appears in messages (invalid UTF-8 shown as U+FFFD).
pub fn shown(name: &OsStr) -> std::borrow::Cow<'_, str> {
    name.to_string_lossy()
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
        let name = ent.file_name();
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
            Err(e) if oversized_object(&ent.path()) => Err(Unread::Undecided(format!(
                "{e}, but it starts like a JSON object and the container runtime reads files of any size, \
                 so it may load it"
            ))),
            Err(e) => Err(Unread::Skip(e.to_string())),
        };
        out.push(Candidate { name, content });
    }
    Ok(out)
}

/// How far into an oversized file we look for its first byte.
const PEEK_BYTES: usize = 64 * 1024;

/// Whether `path` is a regular file over the read limit whose first non-blank byte (within
/// [`PEEK_BYTES`]) is `{`, or is all blank that far: a document libcni might accept. Anything else
/// (a sparse file of zeros, text) fails Go's `json.Unmarshal` into a struct at its first byte.
fn oversized_object(path: &Path) -> bool {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let Ok(meta) = std::fs::metadata(path) else {
        return false;
    };
    if !meta.is_file() || meta.len() <= fsutil::MAX_CONFIG_BYTES {
        return false;
    }
    let Ok(f) = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits())
        .open(path)
    else {
        return false;
    };
    let mut head = Vec::with_capacity(PEEK_BYTES);
    if f.take(PEEK_BYTES as u64).read_to_end(&mut head).is_err() {
        // Unreadable to us: assume the runtime (also root) may read it.
        return true;
    }
    first_is_object(&head)
}

/// The pure half of [`oversized_object`]: the first byte after JSON whitespace is `{` (or there is none).
fn first_is_object(head: &[u8]) -> bool {
    head.iter()
        .find(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
        .map_or(true, |&b| b == b'{')
}

/// libcni's validity of one candidate; `Err` carries the warning text (see [`super::libcni`]). libcni
/// looks at the name's extension only, which its UTF-8 spelling keeps.
pub fn validate(
    name: &OsStr,
    content: &[u8],
    plugin_dir: &dyn Fn(&str) -> super::plugin_dir::PluginDir,
) -> std::result::Result<(), String> {
    super::libcni::validate(&shown(name), content, plugin_dir)
}

/// upstream `getConfigFilenames`: the valid configurations sorted bytewise; `no networks found in <dir>`
/// without candidates, `no valid networks found in <dir>` when none is valid.
pub fn valid_configs(
    dir_display: &str,
    candidates: &[Candidate],
    plugin_dir: &dyn Fn(&str) -> super::plugin_dir::PluginDir,
) -> Result<Listing> {
    if candidates.is_empty() {
        return Err(Error::config(format!("no networks found in {dir_display}")));
    }
    let mut sorted: Vec<&Candidate> = candidates.iter().collect();
    sorted.sort_by(|a, b| a.name.as_bytes().cmp(b.name.as_bytes()));
    let mut listing = Listing::default();
    for c in sorted {
        let verdict = match &c.content {
            Ok(bytes) => validate(&c.name, bytes, plugin_dir),
            Err(Unread::Undecided(why)) => {
                if listing.valid.is_empty() && listing.blocked.is_none() {
                    listing.blocked = Some((c.name.clone(), why.clone()));
                }
                Err(why.clone())
            }
            Err(Unread::Skip(why)) => Err(why.clone()),
        };
        match verdict {
            Ok(()) => listing.valid.push(c.name.clone()),
            Err(why) => {
                if let (Ok(bytes), true) = (&c.content, listing.valid.is_empty()) {
                    let old = super::libcni::validate_as(
                        super::libcni::Rules::V1_1,
                        &shown(&c.name),
                        bytes,
                        plugin_dir,
                    );
                    if old.is_ok() && listing.older.is_none() {
                        listing.older = Some((c.name.clone(), why.clone()));
                    }
                }
                listing.skipped.push((c.name.clone(), why));
            }
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
    Use(OsString),
    /// Nothing usable yet: wait for a change in the conf dir; the text says what we wait for.
    Wait(String),
}

/// upstream `getCNIConfigFilepath`, one evaluation: standalone returns `configured` or
/// [`STANDALONE_DEFAULT`] at once; chained uses `configured` (else the first valid file, skipping
/// `skip` — the Istio-owned file) and, when that file is missing, its `.conf`/`.conflist` twin (and for a
/// `.json`, the `.conflist` we turn it into).
pub fn choose(
    chained: bool,
    configured: Option<&OsStr>,
    listing: &Result<Listing>,
    skip: Option<&OsStr>,
    exists: &dyn Fn(&OsStr) -> bool,
) -> Choice {
    if !chained {
        return Choice::Use(
            configured
                .unwrap_or(OsStr::new(STANDALONE_DEFAULT))
                .to_os_string(),
        );
    }
    let name = match configured {
        Some(n) => n.to_os_string(),
        None => match listing {
            Ok(Listing {
                blocked: Some((n, why)),
                ..
            }) => {
                return Choice::Wait(format!(
                    "{} sorts first and may be the container runtime's choice: {why}",
                    shown(n)
                ))
            }
            Ok(l) => match l.valid.iter().find(|n| Some(n.as_os_str()) != skip) {
                Some(n) => n.clone(),
                None => return Choice::Wait("no primary CNI config file yet".into()),
            },
            Err(e) => return Choice::Wait(e.to_string()),
        },
    };
    if exists(&name) {
        return Choice::Use(name);
    }
    if let Some(twin) = twin(&name).filter(|t| exists(t)) {
        return Choice::Use(twin);
    }
    Choice::Wait(format!(
        "CNI config file {} does not exist yet",
        shown(&name)
    ))
}

/// The file the runtime uses (the first valid one) after a write: `removed` gone (the file merged into),
/// `written` holding content libcni accepts (`written_valid`) or not; `valid` is the valid files before,
/// in order. `removed` and `written` are the same name for a merge in place.
pub fn choice_after(
    valid: &[OsString],
    removed: &OsStr,
    written: &OsStr,
    written_valid: bool,
) -> Option<OsString> {
    valid
        .iter()
        .map(OsString::as_os_str)
        .filter(|n| *n != removed && *n != written)
        .chain(written_valid.then_some(written))
        .min_by(|a, b| a.as_bytes().cmp(b.as_bytes()))
        .map(OsStr::to_os_string)
}

/// Our writes never change which network the runtime uses: the runtime's file stays the one it was, or,
/// when that was the file we merge into (`target`), becomes the file we write (`written`: itself, or the
/// `.conflist` a single-plugin file becomes). Where the runtime loads no file at all (no network: no pod
/// starts), the file we write may become its file: that is the operator's pinned CNI_CONF_NAME. `Err`
/// says what the runtime would use instead.
pub fn keeps_runtime_choice(
    valid: &[OsString],
    target: &OsStr,
    written: &OsStr,
    written_valid: bool,
) -> std::result::Result<(), String> {
    let want = match valid.first() {
        Some(f) if f == target => Some(written.to_os_string()),
        other => other.cloned(),
    };
    let got = choice_after(valid, target, written, written_valid);
    if got == want || (want.is_none() && got.as_deref() == Some(written)) {
        return Ok(());
    }
    let name = |n: &Option<OsString>| match n {
        Some(n) => shown(n).into_owned(),
        None => "no file".to_string(),
    };
    Err(format!(
        "adding our entry to {} as {} would make the container runtime use {} instead of {}: not written \
         (we never change which network the runtime uses)",
        shown(target),
        shown(written),
        name(&got),
        name(&want)
    ))
}

/// Where the merge of the file `name` (content `bytes`, with our entry `merged`) goes: `None`, in place;
/// `Some(list)`, the `.conflist` it becomes. A `.conf` becomes a list, as upstream renames it, and so does
/// a `.json` the runtime loads (`loads`: libcni's verdict; upstream never lists a `.json`). A file the
/// runtime skips (a list in a `.json` or a `.conf`) is edited in place instead when becoming a list would
/// change the runtime's file, and so stays skipped (upstream edits a `.json` in place). `Err` when the write
/// would change which file the runtime uses ([`keeps_runtime_choice`], `valid` being the valid files now)
/// or replace a file that is not ours (`ours_or_absent`: absent, or holding an istio-cni entry, as an
/// interrupted conversion leaves it).
pub fn merge_target(
    name: &OsStr,
    bytes: &[u8],
    merged: &str,
    valid: &[OsString],
    loads: &dyn Fn(&OsStr, &[u8]) -> bool,
    ours_or_absent: &dyn Fn(&OsStr) -> bool,
) -> std::result::Result<Option<OsString>, String> {
    let runtime_loads = loads(name, bytes);
    let list = list_name_for(name).filter(|_| go_ext(name) == b".conf" || runtime_loads);
    if let Some(l) = list {
        match keeps_runtime_choice(valid, name, &l, loads(&l, merged.as_bytes())) {
            Ok(()) if ours_or_absent(&l) => return Ok(Some(l)),
            Ok(()) => {
                return Err(format!(
                    "{} exists and is not ours: not replacing it with {} and our entry",
                    shown(&l),
                    shown(name)
                ))
            }
            Err(e) if runtime_loads => return Err(e),
            Err(_) => {}
        }
    }
    keeps_runtime_choice(valid, name, name, loads(name, merged.as_bytes()))?;
    Ok(None)
}

#[cfg(test)]
#[path = "select_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "select_dir_tests.rs"]
mod dir_tests;
