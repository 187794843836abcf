//! The audit's kept decisions as they outlive the agent (pure): each running pod as the audit first saw it,
//! reduced to what the plugin's decision reads ([`crate::redirect::reduce::reduce_object`]), so a restarted
//! agent decides it again with the same function from the same pod, never from labels or annotations
//! changed since. The file ([`crate::rundir::RunDir::AUDIT_DECISIONS`]): a header line, then one pod per
//! line, in key order: `<namespace>/<name> <uid> <pod IP> <reduced pod as compact JSON>` (the head names
//! what the JSON holds, checked when read; it lets a write carry a pod's line over from the last file
//! without parsing it, so the agent keeps no copy of the pods in memory once written). Which one applies
//! to a pod event: [`applies`], only to the same UID and pod IP. Reading and writing it: [`super::persist`].

use crate::json::{self, Object};
use crate::kube::PodView;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The file's format and version: its first line starts with it (another is refused, as a corrupt file is).
pub const FORMAT: &str = "istio-cni audit kept decisions v1";

/// The file's first line: [`FORMAT`] and this build's reduction
/// ([`crate::redirect::reduce::reduction_id`]). A file another build wrote after another reduction is
/// refused: a key this build reads and that build dropped would read as absent, and absent is "no
/// sidecar" or the default capture (the pod cache's hits carry the same name for the same reason).
pub fn header() -> String {
    format!(
        "{FORMAT} reduced {}",
        crate::redirect::reduce::reduction_id()
    )
}

/// Most pods the file keeps: far above a node's pods (the kubelet's default is 110, large nodes run a
/// few hundred); the pods past it, in key order, are left out (decided afresh after a restart).
pub const MAX_ENTRIES: usize = 4096;

/// Most bytes the file holds (the JSON layer's input bound); pods past it are left out, a larger file is
/// refused.
pub const MAX_BYTES: usize = json::MAX_INPUT;

/// Largest pod kept: the pod cache's bound ([`crate::redirect::reduce::MAX_POD_BYTES`]); a larger one
/// is not kept across a restart.
pub const MAX_POD_BYTES: usize = crate::redirect::reduce::MAX_POD_BYTES;

/// A pod as the audit first saw it running, read back from the file.
#[derive(Debug, Clone)]
pub struct First {
    pub uid: String,
    pub pod_ip: String,
    /// The reduced pod, as written (compact JSON): written again as it is while the pod runs on, and
    /// parsed again ([`First::pod`]) only when the pod's first event after the restart comes: a node's
    /// worth of parsed pods held until then would cost several times the text.
    pub body: Arc<str>,
}

impl First {
    /// The reduced pod, parsed: what its decision is made from (it parsed when the file was read).
    pub fn pod(&self) -> crate::Result<Object> {
        json::parse_object(&self.body, "kept pod")
    }
}

/// `pod` reduced, as compact JSON: what is kept of it; `None` over [`MAX_POD_BYTES`].
pub fn reduced(pod: &Object) -> Option<Arc<str>> {
    crate::redirect::reduce::reduced_text(pod).map(Arc::from)
}

/// Whether the pod kept as `first` decides the running pod with `uid` and `pod_ip`: the same pod in the
/// same sandbox. A recreated pod (another UID) or sandbox (another pod IP: ADD ran again) is decided
/// afresh, from the pod as it is.
pub fn applies(first: &First, uid: &str, pod_ip: &str) -> bool {
    !uid.is_empty() && !pod_ip.is_empty() && first.uid == uid && first.pod_ip == pod_ip
}

/// One pod the audit keeps, as a write sees it: its key, UID and pod IP, and the reduced pod when the
/// store still holds it (not yet written), else `None`: its line is carried over from the last file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Live<'a> {
    pub key: &'a str,
    pub uid: &'a str,
    pub pod_ip: &'a str,
    pub body: Option<&'a str>,
}

/// The file's text for the kept pods (in the order given: the store's key order).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Encoded {
    pub text: String,
    /// The pods written.
    pub kept: usize,
    /// The pods left out: over [`MAX_POD_BYTES`], past [`MAX_ENTRIES`] or [`MAX_BYTES`], or written
    /// before and no longer in the last file (it was removed or replaced meanwhile).
    pub left_out: usize,
}

/// A line's head and pod: `(key, uid, pod IP, pod)`.
fn split_line(l: &str) -> Option<(&str, &str, &str, &str)> {
    let (key, rest) = l.split_once(' ')?;
    let (uid, rest) = rest.split_once(' ')?;
    let (ip, body) = rest.split_once(' ')?;
    Some((key, uid, ip, body))
}

/// Whether a line headed by these reads back: each word non-empty, without a space or a line break (a
/// line that does not would make the whole file refused).
fn head_ok(words: [&str; 3]) -> bool {
    words
        .iter()
        .all(|w| !w.is_empty() && !w.contains([' ', '\n']))
}

/// How many pods a write kept and left out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// The pods written.
    pub kept: usize,
    /// The pods left out: over [`MAX_POD_BYTES`], past [`MAX_ENTRIES`] or [`MAX_BYTES`], a head that
    /// would not read back, or written before and no longer in the last file (it was removed or
    /// replaced meanwhile).
    pub left_out: usize,
}

/// Writes the file for `live` (in key order) to `out` within the bounds, line by line: each pod's line
/// made from its reduced pod, or carried over from `old`, the last file's lines (in key order, as written;
/// a line out of order or not ours is passed over), when the store no longer holds it and `old` has it
/// for the same UID and pod IP. Neither the file nor the last one is ever whole in memory.
pub fn write<'a>(
    live: impl IntoIterator<Item = Live<'a>>,
    old: impl IntoIterator<Item = String>,
    out: &mut impl std::io::Write,
) -> std::io::Result<Counts> {
    let mut old = old.into_iter().peekable();
    // Not ours (another header, or none): nothing is carried over.
    let header = header();
    let ours = old.next_if(|l| *l == header).is_some();
    let mut c = Counts::default();
    let mut bytes = header.len() + 1;
    out.write_all(header.as_bytes())?;
    out.write_all(b"\n")?;
    for p in live {
        let carried: String;
        let mut body = p.body;
        if body.is_none() && ours {
            // The last file's lines before this key are of pods gone since (or out of order).
            while old
                .next_if(|l| split_line(l).map_or(true, |(k, ..)| k < p.key))
                .is_some()
            {}
            if let Some(l) = old.next_if(|l| split_line(l).is_some_and(|(k, ..)| k == p.key)) {
                carried = l;
                body = split_line(&carried)
                    .filter(|(_, uid, ip, _)| *uid == p.uid && *ip == p.pod_ip)
                    .map(|(.., b)| b);
            }
        }
        let head = [p.key, p.uid, p.pod_ip];
        let len = body.map_or(0, |b| {
            head.iter().map(|w| w.len() + 1).sum::<usize>() + b.len() + 1
        });
        match body {
            Some(b)
                if head_ok(head)
                    && b.len() <= MAX_POD_BYTES
                    && !b.contains('\n')
                    && c.kept < MAX_ENTRIES
                    && bytes + len <= MAX_BYTES =>
            {
                writeln!(out, "{} {} {} {b}", p.key, p.uid, p.pod_ip)?;
                bytes += len;
                c.kept += 1;
            }
            _ => c.left_out += 1,
        }
    }
    Ok(c)
}

/// [`write()`] into a string: the file's text for `live`, lines carried over from `old` (the last file's
/// text).
pub fn encode<'a>(live: impl IntoIterator<Item = Live<'a>>, old: &str) -> Encoded {
    let mut text = Vec::new();
    let old = old.split_terminator('\n').map(str::to_string);
    // Writing into memory cannot fail.
    let c = write(live, old, &mut text).unwrap_or_default();
    Encoded {
        text: String::from_utf8(text).unwrap_or_default(),
        kept: c.kept,
        left_out: c.left_out,
    }
}

/// The kept pods by `namespace/name`, from the file's text; any line that is not one of ours makes the
/// whole file refused (it is written whole, atomically: a bad line is a file someone else wrote).
pub fn decode(text: &str) -> Result<BTreeMap<String, First>, String> {
    if text.len() > MAX_BYTES {
        return Err(format!(
            "{} bytes, over the {MAX_BYTES}-byte bound",
            text.len()
        ));
    }
    let mut lines = text.split_terminator('\n');
    let header = header();
    match lines.next() {
        Some(first) if first == header => {}
        Some(other) if other.starts_with(&format!("{FORMAT} reduced ")) => {
            return Err(format!(
                "written by a build that reduces pods otherwise ({other:?}, this build {header:?})"
            ));
        }
        Some(other) => {
            let head: String = other.chars().take(60).collect();
            return Err(format!("not a kept-decisions file (first line {head:?})"));
        }
        None => return Err("empty".into()),
    }
    let mut out = BTreeMap::new();
    for (i, line) in lines.enumerate() {
        let n = i + 2;
        if out.len() == MAX_ENTRIES {
            return Err(format!("line {n}: over {MAX_ENTRIES} pods"));
        }
        let Some((key, uid, pod_ip, body)) = split_line(line) else {
            return Err(format!("line {n}: not <key> <uid> <pod IP> <pod>"));
        };
        if body.len() > MAX_POD_BYTES {
            return Err(format!("line {n}: over {MAX_POD_BYTES} bytes"));
        }
        let pod = json::parse_object(body, "kept pod").map_err(|e| format!("line {n}: {e}"))?;
        let v = PodView::of(&pod);
        if [v.namespace, v.name, v.uid, v.pod_ip]
            .iter()
            .any(|s| s.is_empty())
        {
            return Err(format!(
                "line {n}: a pod without its namespace, name, uid or pod IP"
            ));
        }
        if (v.key().as_str(), v.uid, v.pod_ip) != (key, uid, pod_ip) {
            return Err(format!(
                "line {n}: names {key} {uid} {pod_ip}, holds {} {} {}",
                v.key(),
                v.uid,
                v.pod_ip
            ));
        }
        let first = First {
            uid: uid.into(),
            pod_ip: pod_ip.into(),
            body: body.into(),
        };
        if out.insert(key.to_string(), first).is_some() {
            return Err(format!("line {n}: pod {key} twice"));
        }
    }
    Ok(out)
}

#[cfg(test)]
#[path = "kept_tests.rs"]
mod tests;
