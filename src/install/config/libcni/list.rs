//! libcni's `.conflist` rules (`NetworkConfFromFile`, see the module docs of [`super`]): the list's own
//! keys, its inline plugins and those of its plugin directory.

use super::{check_plugin_conf, go_text, PluginDir, Rules};
use crate::json::ordered::{Doc, Id, Keys, Node};
use crate::json::{self, Value};

/// `version.ParseVersion`: "" is 0.1.0; up to three dot-separated integers (`strconv.Atoi`).
fn parse_version(v: &str) -> Result<(i64, i64, i64), String> {
    if v.is_empty() {
        return Ok((0, 1, 0));
    }
    let parts: Vec<&str> = v.split('.').collect();
    if parts.len() >= 4 {
        return Err(format!("invalid version {v:?}: too many parts"));
    }
    let num = |p: &str| -> Result<i64, String> {
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

/// libcni's `readBool`: a bool, or a string equal to "true"/"false" ignoring case; `Ok(true)` for true.
fn read_bool(doc: &Doc, list: Id, key: &str) -> Result<bool, String> {
    let Some(v) = doc.get(list, key) else {
        return Ok(false);
    };
    match doc.node(v) {
        Node::Scalar(Value::Bool(b)) => Ok(*b),
        Node::Scalar(Value::String(s)) => match s.to_lowercase().as_str() {
            "true" => Ok(true),
            "false" => Ok(false),
            _ => Err(format!("invalid value {s:?} for {key}")),
        },
        _ => Err(format!("invalid type {} for {key}", doc.kind(v))),
    }
}

/// `NetworkConfFromFile` on a parsed document: the list is a Go map (exact keys, the last duplicate
/// wins), each plugin is marshalled from that map and decoded as `types.PluginConf` (keys sorted); then,
/// unless `loadOnlyInlinedPlugins`, the plugins of `plugin_dir(name)` ([`PluginDir`]).
pub(super) fn check_conf_list(
    doc: &Doc,
    rules: Rules,
    plugin_dir: &dyn Fn(&str) -> PluginDir,
) -> Result<(), String> {
    let pre = "error parsing configuration list";
    let list = doc.root();
    let (name, only_inlined) = list_keys(doc, list, rules).map_err(|e| format!("{pre}: {e}"))?;
    let plugins: &[Id] = match doc.get(list, "plugins") {
        None if only_inlined => {
            return Err(format!(
                "{pre}: `loadOnlyInlinedPlugins` is true, and no 'plugins' key"
            ))
        }
        None => &[],
        Some(p) => match doc.node(p) {
            Node::Array(a) if a.is_empty() => return Err(format!("{pre}: no plugins in list")),
            Node::Array(a) => a,
            _ => return Err(format!("{pre}: invalid 'plugins' type {}", doc.kind(p))),
        },
    };
    for (i, p) in plugins.iter().enumerate() {
        check_plugin_conf(doc, Keys::Map, *p, rules)
            .map_err(|e| format!("failed to parse plugin config {i}: {e}"))?;
    }
    let mut count = plugins.len();
    if !only_inlined {
        let files = match plugin_dir(name) {
            PluginDir::Files(f) => f,
            PluginDir::Error(e) => return Err(format!("failed to read plugin config files: {e}")),
        };
        for (file, bytes) in files {
            let d = Doc::parse(&go_text(&bytes), &file, json::GO_MAX_DEPTH)
                .map_err(|e| format!("{file}: error parsing configuration: {e}"))?;
            check_plugin_conf(&d, Keys::Source, d.root(), rules)
                .map_err(|e| format!("{file}: {e}"))?;
            count += 1;
        }
    }
    if count == 0 {
        return Err("no plugin configs found".into());
    }
    Ok(())
}

/// The list's own keys as libcni reads them before its plugins: an object, a string `name`, a string
/// `cniVersion` when present, then `rules`' checks; returns the name and whether only inlined plugins load.
fn list_keys(doc: &Doc, list: Id, rules: Rules) -> Result<(&str, bool), String> {
    if !matches!(doc.node(list), Node::Object(_)) {
        return Err(format!(
            "json: cannot unmarshal {} into Go value of type map[string]interface {{}}",
            doc.kind(list)
        ));
    }
    let name = match doc.get(list, "name") {
        None => return Err("no name".to_string()),
        Some(n) => doc
            .str(n)
            .ok_or_else(|| format!("invalid name type {}", doc.kind(n)))?,
    };
    let version = match doc.get(list, "cniVersion") {
        None => "",
        Some(v) => doc
            .str(v)
            .ok_or_else(|| format!("invalid cniVersion type {}", doc.kind(v)))?,
    };
    let only_inlined = match rules {
        Rules::V1_3 => {
            check_versions(doc, list, version)?;
            for key in ["disableCheck", "disableGC"] {
                read_bool(doc, list, key)?;
            }
            read_bool(doc, list, "loadOnlyInlinedPlugins")?
        }
        // v1.1 `ConfListFromBytes`: `disableCheck` asserted to a Go bool, `plugins` required.
        Rules::V1_1 => {
            if let Some(v) = doc.get(list, "disableCheck") {
                if !matches!(doc.node(v), Node::Scalar(Value::Bool(_))) {
                    return Err(format!("invalid disableCheck type {}", doc.kind(v)));
                }
            }
            if doc.get(list, "plugins").is_none() {
                return Err("no 'plugins' key".to_string());
            }
            true
        }
    };
    Ok((name, only_inlined))
}

/// `cniVersions`, when present: a list of parsable versions, and then the list's own `cniVersion` must parse
/// too (even when `cniVersions` is empty).
fn check_versions(doc: &Doc, list: Id, version: &str) -> Result<(), String> {
    let Some(raw) = doc.get(list, "cniVersions") else {
        return Ok(());
    };
    let Node::Array(items) = doc.node(raw) else {
        return Err(format!("invalid type for cniVersions: {}", doc.kind(raw)));
    };
    for (i, rv) in items.iter().enumerate() {
        let Some(s) = doc.str(*rv) else {
            return Err(format!(
                "invalid type for cniVersions index {i}: {}",
                doc.kind(*rv)
            ));
        };
        parse_version(s).map_err(|e| format!("invalid cniVersions entry {s} at index {i}: {e}"))?;
    }
    // Then the list's own cniVersion, even when cniVersions is empty.
    if !version.is_empty() {
        parse_version(version).map_err(|e| format!("invalid cniVersion {version}: {e}"))?;
    }
    Ok(())
}
