//! libcni's loading and validation of one candidate file, mirrored exactly (containernetworking/cni
//! v1.3.0 `libcni/conf.go`, the version upstream Istio vendors), so the file we call primary is the file the
//! container runtime uses (issue 16 item 4). Pure: text in, verdict out.
//!
//! - `.conf`: `NetworkPluginConfFromBytes` (Go `json.Unmarshal` into `types.PluginConf`, then a non-empty
//!   `type`), then `ConfListFromConf`, which re-checks the same entry inside a list.
//! - `.conflist`: `NetworkConfFromBytes`: a JSON object with a string `name`, a string `cniVersion` if
//!   present, `cniVersions` (a list of parsable versions), `disableCheck`/`disableGC`/`loadOnlyInlinedPlugins`
//!   via `readBool` (a bool, or a string equal to true/false ignoring case), then every `plugins[]` entry
//!   through `NetworkPluginConfFromBytes`.
//! - Go's `encoding/json` rules that matter: struct fields match keys case-insensitively (`"TYPE"` is
//!   `type`), `null` is accepted for every field, a wrong JSON kind is an error, invalid UTF-8 and lone
//!   surrogate escapes decode as U+FFFD (see [`go_text`]).

use crate::json::{self, Object, Value};

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

fn kind_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn mismatch(field: &str, v: &Value, want: &str) -> String {
    format!(
        "json: cannot unmarshal {} into Go struct field {field} of type {want}",
        kind_name(v)
    )
}

/// Go's struct decoding of `v` into the given fields: every key that names a field (ignoring case) must
/// hold a value of the field's kind (or null); other keys are ignored.
fn decode_struct(ctx: &str, v: &Value, fields: &[(&str, Kind)]) -> std::result::Result<(), String> {
    let o = match v {
        Value::Null => return Ok(()),
        Value::Object(o) => o,
        other => return Err(mismatch(ctx, other, "struct")),
    };
    for (key, val) in o.iter() {
        let Some((fname, kind)) = fields.iter().find(|(f, _)| f.eq_ignore_ascii_case(key)) else {
            continue;
        };
        let path = format!("{ctx}.{fname}");
        decode_field(&path, val, *kind)?;
    }
    Ok(())
}

fn decode_field(path: &str, v: &Value, kind: Kind) -> std::result::Result<(), String> {
    if matches!(v, Value::Null) {
        return Ok(());
    }
    match (kind, v) {
        (Kind::Str, Value::String(_)) => Ok(()),
        (Kind::Str, _) => Err(mismatch(path, v, "string")),
        (Kind::StrList, Value::Array(a)) => {
            a.iter().try_for_each(|x| decode_field(path, x, Kind::Str))
        }
        (Kind::StrList, _) => Err(mismatch(path, v, "[]string")),
        (Kind::BoolMap, Value::Object(o)) => o.values().try_for_each(|x| match x {
            Value::Bool(_) | Value::Null => Ok(()),
            other => Err(mismatch(path, other, "bool")),
        }),
        (Kind::BoolMap, _) => Err(mismatch(path, v, "map[string]bool")),
        (Kind::AnyMap, Value::Object(_)) => Ok(()),
        (Kind::AnyMap, _) => Err(mismatch(path, v, "map[string]interface {}")),
        (Kind::Ipam, _) => decode_struct(path, v, &IPAM_FIELDS),
        (Kind::Dns, _) => decode_struct(path, v, &DNS_FIELDS),
        (Kind::Attachments, Value::Array(a)) => a
            .iter()
            .try_for_each(|x| decode_struct(path, x, &ATTACHMENT_FIELDS)),
        (Kind::Attachments, _) => Err(mismatch(path, v, "[]types.GCAttachment")),
    }
}

/// The value Go assigns to a struct field: the exact key if present, else a key matching it ignoring case.
/// A field as Go's `encoding/json` finds it: the exact key, else the first key equal ignoring case.
pub fn field<'a>(o: &'a Object, name: &str) -> Option<&'a Value> {
    o.get(name).or_else(|| {
        o.iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    })
}

/// The plugin type as libcni reads it (case-insensitive key), when it is a string.
pub fn plugin_type(o: &Object) -> Option<&str> {
    match field(o, "type") {
        Some(Value::String(s)) => Some(s),
        _ => None,
    }
}

/// `NetworkPluginConfFromBytes`: decodes as `types.PluginConf`, then requires a non-empty type.
pub fn check_plugin_conf(v: &Value) -> std::result::Result<(), String> {
    decode_struct("PluginConf", v, &PLUGIN_FIELDS)
        .map_err(|e| format!("error parsing configuration: {e}"))?;
    match v {
        Value::Object(o) if plugin_type(o).is_some_and(|t| !t.is_empty()) => Ok(()),
        _ => Err("error parsing configuration: missing 'type'".into()),
    }
}

/// `version.ParseVersion`: "" is 0.1.0; up to three dot-separated integers (`strconv.Atoi`).
fn parse_version(v: &str) -> std::result::Result<(i64, i64, i64), String> {
    if v.is_empty() {
        return Ok((0, 1, 0));
    }
    let parts: Vec<&str> = v.split('.').collect();
    if parts.len() >= 4 {
        return Err(format!("invalid version {v:?}: too many parts"));
    }
    let num = |p: &str| -> std::result::Result<i64, String> {
        let digits = p.strip_prefix(['+', '-']).unwrap_or(p);
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(format!("failed to convert version {v:?}"));
        }
        p.parse::<i64>()
            .map_err(|_| format!("failed to convert version {v:?}"))
    };
    let major = num(parts[0])?;
    let minor = parts.get(1).map(|p| num(p)).transpose()?.unwrap_or(0);
    let micro = parts.get(2).map(|p| num(p)).transpose()?.unwrap_or(0);
    Ok((major, minor, micro))
}

/// libcni's `readBool`: a bool, or a string equal to "true"/"false" ignoring case.
fn read_bool(o: &Object, key: &str) -> std::result::Result<(), String> {
    match o.get(key) {
        None | Some(Value::Bool(_)) => Ok(()),
        Some(Value::String(s)) if matches!(s.to_lowercase().as_str(), "true" | "false") => Ok(()),
        Some(Value::String(s)) => Err(format!("invalid value {s:?} for {key}")),
        Some(other) => Err(format!("invalid type {} for {key}", kind_name(other))),
    }
}

/// `NetworkConfFromBytes` on a parsed document. `subdir_has_plugins(name)`: whether `<dir>/<name>/`
/// holds plugin `.conf` files (a list without `plugins` is valid only then).
pub fn check_conf_list(
    v: &Value,
    subdir_has_plugins: &dyn Fn(&str) -> bool,
) -> std::result::Result<(), String> {
    let pre = "error parsing configuration list";
    let Value::Object(o) = v else {
        return Err(format!(
            "{pre}: json: cannot unmarshal {} into Go value of type map[string]interface {{}}",
            kind_name(v)
        ));
    };
    let name = match o.get("name") {
        None => return Err(format!("{pre}: no name")),
        Some(Value::String(n)) => n.as_str(),
        Some(other) => return Err(format!("{pre}: invalid name type {}", kind_name(other))),
    };
    let version = match o.get("cniVersion") {
        None => "",
        Some(Value::String(s)) => s.as_str(),
        Some(other) => {
            return Err(format!(
                "{pre}: invalid cniVersion type {}",
                kind_name(other)
            ))
        }
    };
    if let Some(raw) = o.get("cniVersions") {
        let Value::Array(list) = raw else {
            return Err(format!(
                "{pre}: invalid type for cniVersions: {}",
                kind_name(raw)
            ));
        };
        for (i, rv) in list.iter().enumerate() {
            let Value::String(s) = rv else {
                return Err(format!(
                    "{pre}: invalid type for cniVersions index {i}: {}",
                    kind_name(rv)
                ));
            };
            parse_version(s)
                .and_then(|_| parse_version(version))
                .map_err(|e| format!("{pre}: invalid cniVersions entry {s} at index {i}: {e}"))?;
        }
    }
    for key in ["disableCheck", "disableGC", "loadOnlyInlinedPlugins"] {
        read_bool(o, key).map_err(|e| format!("{pre}: {e}"))?;
    }
    let only_inlined = matches!(o.get("loadOnlyInlinedPlugins"), Some(Value::Bool(true)))
        || matches!(o.get("loadOnlyInlinedPlugins"), Some(Value::String(s)) if s.eq_ignore_ascii_case("true"));
    let plugins = match o.get("plugins") {
        None if only_inlined => {
            return Err(format!(
                "{pre}: `loadOnlyInlinedPlugins` is true, and no 'plugins' key"
            ))
        }
        None if subdir_has_plugins(name) => return Ok(()),
        None => return Err("no plugin configs found".into()),
        Some(Value::Array(a)) => a,
        Some(other) => {
            return Err(format!(
                "{pre}: invalid 'plugins' type {}",
                kind_name(other)
            ))
        }
    };
    if plugins.is_empty() {
        return Err(format!("{pre}: no plugins in list"));
    }
    for (i, p) in plugins.iter().enumerate() {
        check_plugin_conf(p).map_err(|e| format!("failed to parse plugin config {i}: {e}"))?;
    }
    Ok(())
}

/// libcni's verdict on a candidate file `name` with these bytes (see the module docs).
pub fn validate(
    name: &str,
    content: &[u8],
    subdir_has_plugins: &dyn Fn(&str) -> bool,
) -> std::result::Result<(), String> {
    let text = go_text(content);
    let v = json::parse(&text, "configuration").map_err(|e| {
        if name.ends_with(".conflist") {
            format!("error parsing configuration list: {e}")
        } else {
            format!("error parsing configuration: {e}")
        }
    })?;
    if name.ends_with(".conflist") {
        return check_conf_list(&v, subdir_has_plugins);
    }
    check_plugin_conf(&v)?;
    // ConfListFromConf: the entry re-checked inside a list (name and cniVersion are strings by now).
    Ok(())
}

#[cfg(test)]
#[path = "libcni_tests.rs"]
mod tests;
