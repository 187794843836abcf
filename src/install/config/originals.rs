//! The other CNIs' files as we found them, so that an uninstall gives each back (issue 38).
//!
//! The default layout merges our entry into every file the runtime falls back to (a single-plugin `.conf`
//! becoming its `.conflist`, the `.conf` deleted). Before each such write the file's name, mode and exact
//! bytes are recorded in the run dir ([`save`], atomic, before the merge: a crash between the two leaves a
//! record of a file we never changed, which [`restorable`] then finds unchanged by us and drops). At
//! cleanup each record whose file is still our merge of those bytes (its owner has not rewritten it since)
//! is put back under its own name with its own bytes and mode ([`restore_all`]); a file its owner changed
//! since only loses our entry, as before. The records live in the run dir, so an agent restarted, crashed
//! or replaced by a newer one keeps them until the uninstall.

use super::conflist;
use super::select::{list_name_for, shown};
use crate::error::{Error, Result};
use crate::fsutil;
use crate::json::Object;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

/// The run-dir directory holding the records.
pub const DIR: &str = "cni-conf-originals";

/// One file as we found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Original {
    pub name: OsString,
    pub mode: u32,
    pub bytes: Vec<u8>,
    /// The link's text when the name was a symlink (the bytes are its target's): a `.conf` that becomes
    /// its `.conflist` loses the link itself, so the uninstall makes it again.
    pub link: Option<PathBuf>,
}

const MAGIC_V1: &[u8] = b"istio-cni original v1\n";
const MAGIC: &[u8] = b"istio-cni original v2\n";

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &[u8]) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 {
        return None;
    }
    s.chunks(2)
        .map(|c| u8::from_str_radix(std::str::from_utf8(c).ok()?, 16).ok())
        .collect()
}

impl Original {
    /// The record's bytes: a header line, the name in hex, the mode in octal, the link's text in hex
    /// (empty: no link), then the file's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = MAGIC.to_vec();
        out.extend_from_slice(hex(self.name.as_bytes()).as_bytes());
        out.push(b'\n');
        out.extend_from_slice(format!("{:o}\n", self.mode).as_bytes());
        if let Some(l) = &self.link {
            out.extend_from_slice(hex(l.as_os_str().as_bytes()).as_bytes());
        }
        out.push(b'\n');
        out.extend_from_slice(&self.bytes);
        out
    }

    /// The inverse of [`Original::encode`] (and of the first version's, without the link line); `None`
    /// for anything else, and for a name that is not a plain file name (a `/`, `.`, `..`, empty, NUL):
    /// [`restore_all`] writes under it in the conf dir, so a record planted in the run dir must not name
    /// a path elsewhere.
    pub fn decode(b: &[u8]) -> Option<Original> {
        let (v2, rest) = match b.strip_prefix(MAGIC) {
            Some(rest) => (true, rest),
            None => (false, b.strip_prefix(MAGIC_V1)?),
        };
        let line = |rest: &[u8]| -> Option<usize> { rest.iter().position(|&c| c == b'\n') };
        let nl = line(rest)?;
        let name = OsString::from_vec(unhex(&rest[..nl])?);
        if !crate::fsutil::is_plain_name(name.as_bytes()) {
            return None;
        }
        let rest = &rest[nl + 1..];
        let nl = line(rest)?;
        let mode = u32::from_str_radix(std::str::from_utf8(&rest[..nl]).ok()?, 8).ok()?;
        let mut rest = &rest[nl + 1..];
        let mut link = None;
        if v2 {
            let nl = line(rest)?;
            if nl > 0 {
                link = Some(PathBuf::from(OsString::from_vec(unhex(&rest[..nl])?)));
            }
            rest = &rest[nl + 1..];
        }
        Some(Original {
            name,
            mode,
            bytes: rest.to_vec(),
            link,
        })
    }
}

/// The record of the conf-dir file `name` in the records directory `dir`.
pub fn record_path(dir: &Path, name: &OsStr) -> PathBuf {
    dir.join(hex(name.as_bytes()))
}

/// Records `o` in `dir` (atomically; replacing an earlier record of the same name: the owner's latest version is
/// the one to give back).
pub fn save(dir: &Path, o: &Original) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(format!("create {}", dir.display()), e))?;
    fsutil::write_atomic(&record_path(dir, &o.name), &o.encode(), 0o600)
}

/// Whether `current` (the file now, under its name or the `.conflist` it became) is our merge of
/// `original` with nothing else changed: the two agree once our entry is out of both. Pure.
pub fn restorable(original: &[u8], current: &[u8]) -> bool {
    let strip = |text: &str| -> Option<String> {
        Some(
            conflist::remove_entry(text, "original")
                .ok()?
                .unwrap_or_else(|| text.to_string()),
        )
    };
    let orig = super::libcni::go_text(original);
    let Ok(ours) = conflist::merge(
        &orig,
        &Object::from_iter([(
            "type".to_string(),
            crate::json::string(conflist::PLUGIN_TYPE),
        )]),
    ) else {
        return false;
    };
    let cur = super::libcni::go_text(current);
    match (strip(&ours), strip(&cur)) {
        (Some(a), Some(b)) => a == b,
        _ => false,
    }
}

/// At cleanup: every recorded file still as we left it is given back under its own name, with its own
/// bytes and mode (the `.conflist` it became removed); the others are left to lose our entry only. A name
/// that is a symlink stays one: its target gets the bytes back, as the install merged into it. Every
/// record is then dropped. Returns a line per file for the log.
pub fn restore_all(conf_dir: &Path, dir: &Path) -> Result<Vec<String>> {
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io(format!("list {}", dir.display()), e)),
    };
    let mut notes = Vec::new();
    for ent in rd.flatten() {
        let rec = ent.path();
        let Some(o) = fsutil::read_opt(&rec)?
            .as_deref()
            .and_then(Original::decode)
        else {
            let _ = fsutil::remove_if_exists(&rec);
            continue;
        };
        let list = list_name_for(&o.name).filter(|l| conf_dir.join(l).exists());
        let current = list.clone().unwrap_or_else(|| o.name.clone());
        let cur_path = conf_dir.join(&current);
        // Its owner wrote the single-plugin file again beside the list it became: that version stays.
        let rewritten = list.is_some()
            && fsutil::read_config(&conf_dir.join(&o.name), fsutil::MAX_CONFIG_BYTES)
                .is_ok_and(|b| b.is_some_and(|b| b != o.bytes));
        match fsutil::read_config(&cur_path, fsutil::MAX_CONFIG_BYTES) {
            Ok(Some(b)) if b == o.bytes && list.is_none() => {}
            Ok(Some(b)) if !rewritten && restorable(&o.bytes, &b) => {
                let at = conf_dir.join(&o.name);
                match &o.link {
                    // A linked `.conf` that became its list: the install removed the link and left its
                    // target alone, so the link is made again (never over a name someone made since).
                    Some(l) if current != o.name && !exists_at_all(&at)? => {
                        std::os::unix::fs::symlink(l, &at).map_err(|e| {
                            Error::io(format!("link {} to {}", at.display(), l.display()), e)
                        })?;
                        fsutil::fsync_dir(conf_dir)?;
                    }
                    // Through a link, as the install wrote: the link stays, its target gets the bytes.
                    _ => fsutil::write_atomic_through(&at, &o.bytes, o.mode)?,
                }
                if current != o.name {
                    fsutil::remove_if_exists(&cur_path)?;
                }
                notes.push(format!(
                    "gave {}/{} back as we found it",
                    conf_dir.display(),
                    shown(&o.name)
                ));
            }
            _ => notes.push(format!(
                "{}/{} changed since we added our entry: only our entry is taken out",
                conf_dir.display(),
                shown(&current)
            )),
        }
        fsutil::remove_if_exists(&rec)?;
    }
    let _ = std::fs::remove_dir(dir);
    Ok(notes)
}

/// Whether anything (a dangling link included) has this name.
fn exists_at_all(p: &Path) -> Result<bool> {
    Ok(fsutil::existing(std::fs::symlink_metadata(p), || {
        format!("stat {}", p.display())
    })?
    .is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_decodes_to_itself() {
        let mut o = Original {
            name: OsString::from_vec(b"20-fl\xffannel.conf".to_vec()),
            mode: 0o640,
            bytes: b"{\"type\":\"flannel\"}\n\n".to_vec(),
            link: None,
        };
        assert_eq!(Original::decode(&o.encode()), Some(o.clone()));
        o.link = Some(PathBuf::from(OsString::from_vec(
            b"../x/\xff.conf".to_vec(),
        )));
        assert_eq!(Original::decode(&o.encode()), Some(o.clone()));
        assert_eq!(Original::decode(b"other"), None);
        // A record of the first version (no link line) still reads.
        let mut v1 = MAGIC_V1.to_vec();
        v1.extend_from_slice(b"6162\n640\n{}");
        let want = Original {
            name: "ab".into(),
            mode: 0o640,
            bytes: b"{}".to_vec(),
            link: None,
        };
        assert_eq!(Original::decode(&v1), Some(want));
        // A record naming anything but a plain file name in the conf dir is no record.
        for bad in [
            &b"../../etc/cron.d/x"[..],
            b"a/b",
            b"..",
            b".",
            b"",
            b"a\0b",
        ] {
            let o = Original {
                name: OsString::from_vec(bad.to_vec()),
                mode: 0o644,
                bytes: b"{}".to_vec(),
                link: None,
            };
            assert_eq!(Original::decode(&o.encode()), None, "{bad:?}");
        }
    }

    #[test]
    fn restorable_only_while_the_file_is_our_merge_of_the_original() {
        let orig = br#"{"cniVersion":"0.3.1","name":"fl","type":"flannel","delegate":{"x":1}}"#;
        let entry = Object::from_iter([
            ("type".to_string(), crate::json::string("istio-cni")),
            ("log_level".to_string(), crate::json::string("info")),
        ]);
        let ours = conflist::merge(&String::from_utf8_lossy(orig), &entry).unwrap();
        assert!(restorable(orig, ours.as_bytes()));
        // Our entry already taken out (an earlier cleanup interrupted): still ours.
        let out = conflist::remove_entry(&ours, "t").unwrap().unwrap();
        assert!(restorable(orig, out.as_bytes()));
        // The owner rewrote it since (another setting): not ours to give back.
        let theirs = ours.replace("\"x\": 1", "\"x\": 2");
        assert_ne!(theirs, ours);
        assert!(!restorable(orig, theirs.as_bytes()));
        assert!(!restorable(orig, b"not json"));
    }

    /// A conf dir holding `10-fl.conflist`, our merge of the recorded `10-fl.conf` (`orig`), and the
    /// record; returns (conf dir, records dir, the original's bytes).
    fn converted(tag: &str, link: Option<PathBuf>) -> (PathBuf, PathBuf, Vec<u8>) {
        let d = crate::fsutil::test_dir(tag);
        let (conf, recs) = (d.join("net.d"), d.join("originals"));
        std::fs::create_dir_all(&conf).unwrap();
        let orig = br#"{"cniVersion":"0.3.1","name":"fl","type":"flannel"}"#.to_vec();
        let entry = Object::from_iter([("type".to_string(), crate::json::string("istio-cni"))]);
        let ours = conflist::merge(&String::from_utf8_lossy(&orig), &entry).unwrap();
        std::fs::write(conf.join("10-fl.conflist"), &ours).unwrap();
        let o = Original {
            name: "10-fl.conf".into(),
            mode: 0o640,
            bytes: orig.clone(),
            link,
        };
        save(&recs, &o).unwrap();
        (conf, recs, orig)
    }

    #[test]
    fn a_conf_given_back_only_while_its_owner_has_not_written_it_again() {
        use std::os::unix::fs::PermissionsExt;
        // As we left it: the .conf comes back with its bytes and mode, the list it became goes.
        let (conf, recs, orig) = converted("originals-back", None);
        let notes = restore_all(&conf, &recs).unwrap();
        assert_eq!(std::fs::read(conf.join("10-fl.conf")).unwrap(), orig);
        let mode = std::fs::metadata(conf.join("10-fl.conf"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o640);
        assert!(!conf.join("10-fl.conflist").exists(), "{notes:?}");
        assert!(notes[0].contains("back as we found it"), "{notes:?}");
        let left = std::fs::read_dir(&recs).map_or(0, |d| d.count());
        assert_eq!(left, 0, "the record is dropped");
        // Its owner wrote the .conf again beside the list: their version stays, and so does the list
        // (the cleanup takes only our entry out of it).
        let (conf, recs, _) = converted("originals-rewritten", None);
        let theirs = br#"{"cniVersion":"0.3.1","name":"fl","type":"flannel","mtu":1400}"#;
        std::fs::write(conf.join("10-fl.conf"), theirs).unwrap();
        let notes = restore_all(&conf, &recs).unwrap();
        assert_eq!(std::fs::read(conf.join("10-fl.conf")).unwrap(), theirs);
        assert!(conf.join("10-fl.conflist").exists());
        assert!(notes[0].contains("changed since"), "{notes:?}");
    }

    #[test]
    fn a_linked_conf_is_linked_again_unless_the_name_was_made_since() {
        // The install removed the link when the .conf became its list: the link is made again.
        let target = PathBuf::from("../real/10-fl.conf");
        let (conf, recs, orig) = converted("originals-link", Some(target.clone()));
        restore_all(&conf, &recs).unwrap();
        assert_eq!(std::fs::read_link(conf.join("10-fl.conf")).unwrap(), target);
        assert!(!conf.join("10-fl.conflist").exists());
        // A file made under the name since (with the original's bytes, so not a rewrite): never replaced
        // by a link; it keeps the bytes.
        let (conf, recs, _) = converted("originals-link-made", Some(target));
        std::fs::write(conf.join("10-fl.conf"), &orig).unwrap();
        restore_all(&conf, &recs).unwrap();
        let at = conf.join("10-fl.conf");
        assert!(!std::fs::symlink_metadata(&at)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(std::fs::read(&at).unwrap(), orig);
    }
}
