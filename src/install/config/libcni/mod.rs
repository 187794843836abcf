//! libcni's loading and validation of one candidate file, mirrored exactly (containernetworking/cni
//! v1.3.0 `libcni/conf.go`, the version upstream Istio vendors), so the file we call primary is the file the
//! container runtime uses (issue 16 item 4). Pure: text in, verdict out.
//!
//! - `.conf`: `NetworkPluginConfFromBytes` (Go `json.Unmarshal` of the file's bytes into
//!   `types.PluginConf`, then a non-empty `type`), then `ConfListFromConf`, which decodes the bytes into a
//!   map, wraps it in a list and marshals that, so the plugin is decoded a second time with its keys sorted
//!   and de-duplicated; both decodings must succeed.
//! - `.conflist`: `NetworkConfFromFile`. First `NetworkConfFromBytes`: a JSON object (a Go map: exact keys,
//!   the last duplicate wins) with a string `name`, a string `cniVersion` if present, `cniVersions` (a list
//!   of parsable versions; then `cniVersion` must parse too), `disableCheck`/`disableGC`/
//!   `loadOnlyInlinedPlugins` via `readBool` (a bool, or a string equal to true/false ignoring case), then
//!   every `plugins[]` entry marshalled from that map (keys sorted) through `NetworkPluginConfFromBytes`.
//!   Then, unless `loadOnlyInlinedPlugins`, `NetworkPluginConfsFromFiles`: the `.conf` files of the directory
//!   `filepath.Join(<conf dir>, name)` ([`PluginDir`], read by [`super::plugin_dir::read`]), each through `NetworkPluginConfFromBytes`; a listing
//!   error other than "does not exist" fails the file. So the `name` is a path: one holding a NUL (Go's
//!   syscalls refuse it: EINVAL), naming a regular file (ENOTDIR) or too long (ENAMETOOLONG) makes the
//!   runtime skip the list. At least one plugin, inline or from that directory.
//! - Go's `encoding/json` rules that matter ([`crate::json::go_struct`]): a struct field takes every key
//!   equal to its name ignoring case, ſ (U+017F) standing for `s` and K (U+212A) for `k`; the last such
//!   key wins, `null` leaving a string field as it was; a wrong JSON kind under any of them is an error;
//!   nesting up to 10,000 levels; invalid UTF-8 and lone surrogate escapes decode as U+FFFD (see
//!   [`go_text`]). `vectors.json` holds documents with the decision Go 1.19 makes for each.

use super::plugin_dir::PluginDir;
use crate::json::ordered::{Doc, Id, Keys, Node};
use crate::json::{self, go_struct, Object, Value};
use list::check_conf_list;

mod list;

/// Go's decoding of a JSON text's bytes: invalid UTF-8 and lone surrogate escapes (`"\ud800"`) become
/// U+FFFD instead of errors. The result is what Go's `json.Unmarshal` would see (and re-marshal).
pub fn go_text(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    if !text.contains("\\u") {
        return text.into_owned();
    }
    fix_lone_surrogates(&text)
}

fn hex4(s: &[u8]) -> Option<u32> {
    let h = s.get(..4)?;
    let t = std::str::from_utf8(h).ok()?;
    u32::from_str_radix(t, 16).ok()
}

/// Rewrites `\uD800`–`\uDFFF` escapes that are not a valid high+low pair as `\ufffd`.
fn fix_lone_surrogates(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let (mut i, mut start, mut in_str) = (0usize, 0usize, false);
    while i < b.len() {
        match b[i] {
            b'"' => {
                in_str = !in_str;
                i += 1;
            }
            b'\\' if in_str => {
                if b.get(i + 1) != Some(&b'u') {
                    i += 2;
                    continue;
                }
                let Some(cp) = hex4(&b[(i + 2).min(b.len())..]) else {
                    i += 2;
                    continue;
                };
                if (0xD800..0xDC00).contains(&cp) {
                    let low = (b.get(i + 6) == Some(&b'\\') && b.get(i + 7) == Some(&b'u'))
                        .then(|| hex4(&b[(i + 8).min(b.len())..]))
                        .flatten();
                    if low.is_some_and(|l| (0xDC00..0xE000).contains(&l)) {
                        i += 12;
                        continue;
                    }
                } else if !(0xDC00..0xE000).contains(&cp) {
                    i += 6;
                    continue;
                }
                out.push_str(&text[start..i]);
                out.push_str("\\ufffd");
                i += 6;
                start = i;
            }
            _ => i += 1,
        }
    }
    out.push_str(&text[start..]);
    out
}

/// The field kinds of the Go structs libcni decodes into.
#[derive(Clone, Copy)]
enum Kind {
    Str,
    StrList,
    BoolMap,
    AnyMap,
    Ipam,
    Dns,
    Attachments,
}

/// `types.PluginConf`'s JSON fields (`PrevResult` is `json:"-"`).
const PLUGIN_FIELDS: [(&str, Kind); 8] = [
    ("cniVersion", Kind::Str),
    ("name", Kind::Str),
    ("type", Kind::Str),
    ("capabilities", Kind::BoolMap),
    ("ipam", Kind::Ipam),
    ("dns", Kind::Dns),
    ("prevResult", Kind::AnyMap),
    ("cni.dev/valid-attachments", Kind::Attachments),
];
const IPAM_FIELDS: [(&str, Kind); 1] = [("type", Kind::Str)];
const DNS_FIELDS: [(&str, Kind); 4] = [
    ("nameservers", Kind::StrList),
    ("domain", Kind::Str),
    ("search", Kind::StrList),
    ("options", Kind::StrList),
];
const ATTACHMENT_FIELDS: [(&str, Kind); 2] = [("containerID", Kind::Str), ("ifname", Kind::Str)];

fn mismatch(doc: &Doc, field: &str, v: Id, want: &str) -> String {
    format!(
        "json: cannot unmarshal {} into Go struct field {field} of type {want}",
        doc.kind(v)
    )
}

/// Go's struct decoding of `v` into the given fields, seeing an object's keys in the order `keys`: every
/// key that names a field ([`go_struct::key_matches`]) must hold a value of the field's kind (or null);
/// other keys are ignored.
fn decode_struct(
    doc: &Doc,
    keys: Keys,
    ctx: &str,
    v: Id,
    fields: &[(&str, Kind)],
) -> std::result::Result<(), String> {
    match doc.node(v) {
        Node::Scalar(Value::Null) => return Ok(()),
        Node::Object(_) => {}
        _ => return Err(mismatch(doc, ctx, v, "struct")),
    }
    for (key, val) in doc.entries(v, keys) {
        let Some((fname, kind)) = fields.iter().find(|(f, _)| go_struct::key_matches(key, f))
        else {
            continue;
        };
        decode_field(doc, keys, &format!("{ctx}.{fname}"), val, *kind)?;
    }
    Ok(())
}

fn decode_field(
    doc: &Doc,
    keys: Keys,
    path: &str,
    v: Id,
    kind: Kind,
) -> std::result::Result<(), String> {
    let node = doc.node(v);
    if matches!(node, Node::Scalar(Value::Null)) {
        return Ok(());
    }
    match (kind, node) {
        (Kind::Str, Node::Scalar(Value::String(_))) => Ok(()),
        (Kind::Str, _) => Err(mismatch(doc, path, v, "string")),
        (Kind::StrList, Node::Array(a)) => a
            .iter()
            .try_for_each(|x| decode_field(doc, keys, path, *x, Kind::Str)),
        (Kind::StrList, _) => Err(mismatch(doc, path, v, "[]string")),
        // Every entry of a map is decoded, duplicates too (in source order).
        (Kind::BoolMap, Node::Object(_)) => {
            doc.entries(v, keys)
                .into_iter()
                .try_for_each(|(_, x)| match doc.node(x) {
                    Node::Scalar(Value::Bool(_) | Value::Null) => Ok(()),
                    _ => Err(mismatch(doc, path, x, "bool")),
                })
        }
        (Kind::BoolMap, _) => Err(mismatch(doc, path, v, "map[string]bool")),
        (Kind::AnyMap, Node::Object(_)) => Ok(()),
        (Kind::AnyMap, _) => Err(mismatch(doc, path, v, "map[string]interface {}")),
        (Kind::Ipam, _) => decode_struct(doc, keys, path, v, &IPAM_FIELDS),
        (Kind::Dns, _) => decode_struct(doc, keys, path, v, &DNS_FIELDS),
        (Kind::Attachments, Node::Array(a)) => a
            .iter()
            .try_for_each(|x| decode_struct(doc, keys, path, *x, &ATTACHMENT_FIELDS)),
        (Kind::Attachments, _) => Err(mismatch(doc, path, v, "[]types.GCAttachment")),
    }
}

/// A struct field of a CNI configuration object as Go decodes it (the lookup everything reading one as
/// libcni does shares): of the keys naming `name` ignoring case (ſ and K included, see
/// [`go_struct::key_matches`]), the last whose value is not null. `o` is a map, so its keys are in the
/// sorted, de-duplicated order libcni's re-marshalled plugin has.
pub fn field<'a>(o: &'a Object, name: &str) -> Option<&'a Value> {
    go_struct::last_match(o.iter().map(|(k, v)| (k.as_str(), v)), name, |v| {
        matches!(v, Value::Null)
    })
}

/// The plugin type as libcni reads it ([`field`]), when it is a string.
pub fn plugin_type(o: &Object) -> Option<&str> {
    match field(o, "type") {
        Some(Value::String(s)) => Some(s),
        _ => None,
    }
}

/// Parses a CNI configuration file's bytes as the runtime's Go reads them: [`go_text`], nesting up to
/// Go's limit ([`json::GO_MAX_DEPTH`]).
pub fn parse(bytes: &[u8], what: &str) -> crate::error::Result<Value> {
    json::parse_go_depth(&go_text(bytes), what)
}

/// Whose rules: libcni v1.3.0 (upstream Istio's, current go-cni and ocicni: the installer's model of
/// the runtime), or v1.1 (Debian 12's containerd 1.6.20 and podman 4.3.1 carry it: no plugin directory,
/// no `cniVersions`, `disableGC`, `loadOnlyInlinedPlugins` or GC attachments, `disableCheck` a JSON bool,
/// `plugins` required). A list only v1.1 loads sorting first keeps the installer not ready
/// ([`super::select::valid_configs`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rules {
    V1_3,
    V1_1,
}

/// `NetworkPluginConfFromBytes` (v1.1: `ConfFromBytes`): decodes as `types.PluginConf` (keys seen in the
/// order `keys`), then requires a non-empty type.
fn check_plugin_conf(
    doc: &Doc,
    keys: Keys,
    v: Id,
    rules: Rules,
) -> std::result::Result<(), String> {
    let fields = match rules {
        Rules::V1_3 => &PLUGIN_FIELDS[..],
        // v1.1's `types.NetConf` has no `cni.dev/valid-attachments`.
        Rules::V1_1 => &PLUGIN_FIELDS[..PLUGIN_FIELDS.len() - 1],
    };
    decode_struct(doc, keys, "PluginConf", v, fields)
        .map_err(|e| format!("error parsing configuration: {e}"))?;
    let ty = go_struct::last_match(doc.entries(v, keys), "type", |x| doc.is_null(x));
    match ty.and_then(|t| doc.str(t)) {
        Some(t) if !t.is_empty() => Ok(()),
        _ => Err("error parsing configuration: missing 'type'".into()),
    }
}

/// libcni's verdict on a candidate file `name` with these bytes (see the module docs); `plugin_dir` is
/// what a list's `name` names ([`PluginDir`]).
pub fn validate(
    name: &str,
    content: &[u8],
    plugin_dir: &dyn Fn(&str) -> PluginDir,
) -> std::result::Result<(), String> {
    validate_as(Rules::V1_3, name, content, plugin_dir)
}

/// [`validate`] under the given libcni's [`Rules`] (v1.1 reads no plugin directory).
pub fn validate_as(
    rules: Rules,
    name: &str,
    content: &[u8],
    plugin_dir: &dyn Fn(&str) -> PluginDir,
) -> std::result::Result<(), String> {
    let list = name.ends_with(".conflist");
    let doc = Doc::parse(&go_text(content), "configuration", json::GO_MAX_DEPTH).map_err(|e| {
        if list {
            format!("error parsing configuration list: {e}")
        } else {
            format!("error parsing configuration: {e}")
        }
    })?;
    if list {
        return check_conf_list(&doc, rules, plugin_dir);
    }
    // The file's own bytes, keys as written; then `ConfListFromConf`, which decodes them into a map and
    // puts that into a list, so the plugin is decoded again with its keys sorted and de-duplicated (name
    // and cniVersion of that list are strings by now).
    check_plugin_conf(&doc, Keys::Source, doc.root(), rules)?;
    check_plugin_conf(&doc, Keys::Map, doc.root(), rules)
        .map_err(|e| format!("failed to parse plugin config 0: {e}"))
}

#[cfg(test)]
mod tests;
