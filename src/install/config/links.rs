//! The link chains of the candidate configurations (issue 23 H1). The runtime loads a candidate through
//! every symlink on its way — links to links, relative links, links whose parent directories are links —
//! so what it reads changes when any entry looked up along that way changes, and when a dangling link's
//! target (or a directory on the way to it) appears. [`resolve`] walks a name as the kernel does and
//! records every (directory, name) it looks up; [`watch_dirs`] turns the chains into the directories to
//! watch and the names that matter in each. Both are pure (the file system is a lookup function);
//! [`chains_of`] is the effect: it lists the conf dir and resolves each candidate with `lstat`/`readlink`.
//! A chain also carries the version (inode, size, times) of the file it ends at, so two resolutions
//! compare equal only when the runtime would read the same thing: the periodic re-resolve
//! ([`crate::install::run`]) is a backstop for a change no watch saw.

use super::select;
use crate::fsutil::Stamp;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

/// Linux's limit on links followed in one resolution (`ELOOP` beyond it).
pub const MAX_LINKS: usize = 40;
/// At most this many directories are watched for link chains (in candidate order); beyond that, only the
/// periodic re-resolve notices a change.
pub const MAX_DIRS: usize = 64;

/// What a path names, a final link not followed (`lstat`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Node {
    Missing,
    Dir,
    Link(PathBuf),
    /// A file, FIFO, device, ...: its version.
    File(Stamp),
    /// Could not be looked at (permissions, ...).
    Error(String),
}

/// Where a resolution ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum End {
    File(Stamp),
    Dir,
    /// A name on the way does not exist (a dangling link): watching its directory sees it appear.
    Missing,
    /// More than [`MAX_LINKS`] links.
    Loop,
    /// A file where a directory was needed.
    NotDir,
    Error(String),
}

/// One candidate's resolution: every (directory, name) looked up, in order, and where it ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chain {
    pub name: OsString,
    pub lookups: Vec<(PathBuf, OsString)>,
    pub end: End,
}

enum Step {
    Root,
    Parent,
    Name(OsString),
}

fn steps_of(target: &Path) -> Vec<Step> {
    target
        .components()
        .filter_map(|c| match c {
            Component::RootDir | Component::Prefix(_) => Some(Step::Root),
            Component::ParentDir => Some(Step::Parent),
            Component::CurDir => None,
            Component::Normal(n) => Some(Step::Name(n.to_os_string())),
        })
        .collect()
}

/// Resolves `name` in the directory `dir` (a path without links) as the kernel does: each component is
/// looked up in the directory reached so far, a link's target is walked from the link's directory (or
/// from `/`), `..` goes to the parent of the directory reached. `lookup` is `lstat` of a path whose
/// directories are real.
pub fn resolve(dir: &Path, name: &OsStr, lookup: &mut dyn FnMut(&Path) -> Node) -> Chain {
    let mut lookups = Vec::new();
    let mut cur = dir.to_path_buf();
    let mut todo = VecDeque::from([Step::Name(name.to_os_string())]);
    let mut links = 0;
    let end = loop {
        let Some(step) = todo.pop_front() else {
            break End::Dir;
        };
        let n = match step {
            Step::Root => {
                cur = PathBuf::from("/");
                continue;
            }
            Step::Parent => {
                cur.pop();
                continue;
            }
            Step::Name(n) => n,
        };
        let path = cur.join(&n);
        lookups.push((cur.clone(), n));
        match lookup(&path) {
            Node::Missing => break End::Missing,
            Node::Error(e) => break End::Error(e),
            Node::Dir => cur = path,
            Node::File(v) if todo.is_empty() => break End::File(v),
            Node::File(_) => break End::NotDir,
            Node::Link(target) => {
                links += 1;
                if links > MAX_LINKS {
                    break End::Loop;
                }
                if target.as_os_str().is_empty() {
                    break End::Missing;
                }
                for s in steps_of(&target).into_iter().rev() {
                    todo.push_front(s);
                }
            }
        }
    };
    Chain {
        name: name.to_os_string(),
        lookups,
        end,
    }
}

/// The directories to watch for `chains` (in their order) and, in each, the names looked up there. Each
/// chain's first lookup is in the conf dir itself, which is watched whole and is left out. At most `max`
/// directories; the second value counts the ones left out beyond that.
pub fn watch_dirs(chains: &[Chain], max: usize) -> (BTreeMap<PathBuf, BTreeSet<OsString>>, usize) {
    let mut dirs: BTreeMap<PathBuf, BTreeSet<OsString>> = BTreeMap::new();
    let mut left_out = BTreeSet::new();
    for (dir, name) in chains.iter().flat_map(|c| c.lookups.iter().skip(1)) {
        if let Some(names) = dirs.get_mut(dir) {
            names.insert(name.clone());
        } else if dirs.len() < max {
            dirs.insert(dir.clone(), BTreeSet::from([name.clone()]));
        } else {
            left_out.insert(dir);
        }
    }
    (dirs, left_out.len())
}

/// `lstat` as a [`Node`].
pub fn lstat(path: &Path) -> Node {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => match std::fs::read_link(path) {
            Ok(t) => Node::Link(t),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Node::Missing,
            Err(e) => Node::Error(format!("readlink {}: {e}", path.display())),
        },
        Ok(m) if m.is_dir() => Node::Dir,
        Ok(m) => Node::File(Stamp::of(&m)),
        Err(e)
            if e.kind() == std::io::ErrorKind::NotFound
                || e.raw_os_error() == Some(nix::libc::ENOTDIR) =>
        {
            Node::Missing
        }
        Err(e) => Node::Error(format!("stat {}: {e}", path.display())),
    }
}

/// The chains of every candidate of the conf dir `conf`, in the runtime's (bytewise) order. A conf dir
/// that cannot be listed has none (the check reports it).
pub fn chains_of(conf: &Path) -> Vec<Chain> {
    let Ok(real) = std::fs::canonicalize(conf) else {
        return Vec::new();
    };
    let Ok(rd) = std::fs::read_dir(&real) else {
        return Vec::new();
    };
    let mut names: Vec<OsString> = rd
        .flatten()
        .map(|e| e.file_name())
        .filter(|n| select::is_candidate_name(n))
        .collect();
    names.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
    names
        .iter()
        .map(|n| resolve(&real, n, &mut lstat))
        .collect()
}

#[cfg(test)]
#[path = "links_tests.rs"]
mod tests;
