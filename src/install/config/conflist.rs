//! Pure edits of CNI configuration text: build the `istio-cni` entry, merge it into a primary
//! configuration, remove it again, and print exactly what upstream master prints (Go map marshalling:
//! keys sorted at every level, 2-space indent, HTML-safe escapes, float64 numbers, one trailing newline).
//!
//! Deliberate deviation from upstream: when a single-network `.conf` primary is wrapped into a list,
//! upstream always writes `"cniVersion": "0.3.1"`, silently downgrading a `0.4.0`/`1.x` primary (no CHECK,
//! another result format). We keep the `.conf`'s own `cniVersion` when it is 0.3.0 or newer and use `0.3.1`
//! only when it is absent, unparsable or older (a list needs chaining, which starts at 0.3.0). See
//! [`wrapper_cni_version`].
//!
//! Second deviation: upstream master removes only the *first* `istio-cni` plugin before appending its
//! entry (and on cleanup), so a list that somehow holds two keeps one stale copy forever and the plugin
//! runs twice per ADD. We remove every `istio-cni` plugin, so the result holds our entry exactly once
//! (and none after cleanup), as the seed-era shell installer did. Lists with at most one entry — every
//! upstream vector — are unaffected.

use crate::error::{Error, Result};
use crate::json::{self, Array, Object, Value};

/// The plugin type (and network name) of our entry.
pub const PLUGIN_TYPE: &str = "istio-cni";
/// The list name upstream gives a wrapped `.conf`.
pub const WRAPPER_NAME: &str = "k8s-pod-network";
/// The cniVersion upstream gives every wrapped `.conf` and its standalone file.
pub const UPSTREAM_CNI_VERSION: &str = "0.3.1";

/// Prints a configuration as upstream does: sorted keys, 2-space indent, one trailing newline. Numbers
/// were read as Go reads them ([`json::parse`]: integers beyond 2^53 are floats), so they print as Go does.
/// A text larger than we would read back ([`json::MAX_INPUT`]) is refused rather than written: the
/// indentation grows with the nesting, so a primary thousands of levels deep (Go reads up to 10,000)
/// would print as hundreds of megabytes.
pub fn render(v: &Value) -> Result<String> {
    let mut s = json::to_pretty_bounded(v, "  ", json::MAX_INPUT - 1).ok_or_else(|| {
        Error::config(format!(
            "the CNI config with our entry would be larger than {} bytes (is the primary nested thousands \
             of levels deep?); not writing it",
            json::MAX_INPUT
        ))
    })?;
    s.push('\n');
    Ok(s)
}

/// Parses `a.b.c` (missing parts are 0); `None` when not numeric.
fn parse_version(v: &str) -> Option<(u64, u64, u64)> {
    let mut it = v.trim().split('.');
    let mut next = |required: bool| -> Option<u64> {
        match it.next() {
            Some(p) => p.parse().ok(),
            None if required => None,
            None => Some(0),
        }
    };
    let a = next(true)?;
    let b = next(false)?;
    let c = next(false)?;
    if it.next().is_some() {
        return None;
    }
    Some((a, b, c))
}

/// The `cniVersion` of the list made from a single-network `.conf` (our deviation, see the module docs):
/// the `.conf`'s own version when it is at least 0.3.0, else 0.3.1.
pub fn wrapper_cni_version(conf_version: Option<&str>) -> String {
    match conf_version {
        Some(v) if parse_version(v).is_some_and(|p| p >= (0, 3, 0)) => v.to_string(),
        _ => UPSTREAM_CNI_VERSION.to_string(),
    }
}

/// Upstream's `insertCNIConfig`: merges `entry` into the configuration `existing` (the primary's text) and
/// returns the new document. A single network (a top-level `type`) becomes a list
/// `{name: k8s-pod-network, cniVersion, plugins: [existing, entry]}` (cniVersion per
/// [`wrapper_cni_version`]); a list gets its `istio-cni` plugins removed and `entry` appended last,
/// everything else kept. Both entries lose their own `cniVersion`.
pub fn merge(existing: &str, entry: &Object) -> Result<String> {
    let mut entry = entry.clone();
    entry.remove("cniVersion");
    let mut conf =
        match json::parse_go_depth(existing, "existing CNI config") {
            Ok(Value::Object(o)) => o,
            Ok(_) => return Err(Error::config(
                "error loading existing CNI config (JSON error): the document is not a JSON object",
            )),
            Err(e) => {
                return Err(Error::config(format!(
                    "error loading existing CNI config (JSON error): {e}"
                )))
            }
        };
    if conf.contains_key("type") {
        let own = json::str_of(&conf, "cniVersion").map(str::to_string);
        conf.remove("cniVersion");
        let mut list = Object::new();
        list.insert("name".into(), json::string(WRAPPER_NAME));
        list.insert(
            "cniVersion".into(),
            json::string(&wrapper_cni_version(own.as_deref())),
        );
        let mut plugins = Array::new();
        // A `.conf` that is itself an istio-cni entry (a standalone leftover) is replaced by ours, not
        // kept beside it: exactly one entry (upstream writes two).
        if !is_ours_object(&conf) {
            plugins.push(Value::Object(conf));
        }
        plugins.push(Value::Object(entry));
        list.insert("plugins".into(), Value::Array(plugins));
        return render(&Value::Object(list));
    }
    plugin_list(&conf)?;
    let mut kept = take_plugins_except_ours(&mut conf);
    kept.push(Value::Object(entry));
    conf.insert("plugins".into(), Value::Array(kept));
    render(&Value::Object(conf))
}

/// Takes a list's `plugins` out of it without the `istio-cni` ones (moved, not copied: a plugin may
/// nest thousands of levels deep, and cloning a value recurses).
fn take_plugins_except_ours(conf: &mut Object) -> Array {
    match conf.remove("plugins") {
        Some(Value::Array(plugins)) => plugins.into_iter().filter(|p| !is_ours(p)).collect(),
        _ => Array::new(),
    }
}

/// The `plugins` array of a list, every element an object (upstream's errors otherwise).
fn plugin_list(conf: &Object) -> Result<&Array> {
    let plugins = json::arr_of(conf, "plugins").ok_or_else(|| {
        Error::config("existing CNI config: error reading plugin list from CNI config")
    })?;
    if plugins.iter().any(|p| !matches!(p, Value::Object(_))) {
        return Err(Error::config(
            "existing CNI plugin: error reading plugin from CNI config plugin list",
        ));
    }
    Ok(plugins)
}

fn is_ours(p: &Value) -> bool {
    matches!(p, Value::Object(o) if is_ours_object(o))
}

/// Whether libcni runs this plugin as `istio-cni` ([`super::libcni::plugin_type`]).
fn is_ours_object(o: &Object) -> bool {
    super::libcni::plugin_type(o) == Some(PLUGIN_TYPE)
}

/// True when a list's `plugins` is an empty array (libcni rejects it: cleanup deletes such a file
/// rather than leave it).
pub fn has_empty_plugins(text: &str) -> bool {
    match json::parse_go_depth(text, "CNI config") {
        Ok(Value::Object(o)) => json::arr_of(&o, "plugins").is_some_and(|a| a.is_empty()),
        _ => false,
    }
}

/// Cleanup of a chained list: removes the `istio-cni` plugins and re-renders (sorted, as upstream).
/// Returns `None` when there is no such plugin (nothing to write).
pub fn remove_entry(text: &str, what: &str) -> Result<Option<String>> {
    let mut conf = match json::parse_go_depth(text, what)? {
        Value::Object(o) => o,
        _ => {
            return Err(Error::config(format!(
                "failed to read CNI config map from file {what}: not a JSON object"
            )))
        }
    };
    let plugins = match json::arr_of(&conf, "plugins") {
        Some(p) => p,
        None => return Ok(None),
    };
    if !plugins.iter().any(is_ours) {
        return Ok(None);
    }
    let kept = take_plugins_except_ours(&mut conf);
    conf.insert("plugins".into(), Value::Array(kept));
    render(&Value::Object(conf)).map(Some)
}

/// How many `istio-cni` plugins a list holds (0 when it is not a list).
pub fn count_entries(text: &str) -> usize {
    match json::parse_go_depth(text, "CNI config") {
        Ok(Value::Object(o)) => json::arr_of(&o, "plugins")
            .map(|a| a.iter().filter(|p| is_ours(p)).count())
            .unwrap_or(0),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::install::config::entry::tests::entry;

    #[test]
    fn wrapper_version_keeps_usable_versions() {
        assert_eq!(wrapper_cni_version(Some("0.4.0")), "0.4.0");
        assert_eq!(wrapper_cni_version(Some("1.0.0")), "1.0.0");
        assert_eq!(wrapper_cni_version(Some("0.3.0")), "0.3.0");
        assert_eq!(wrapper_cni_version(Some("0.2.0")), "0.3.1");
        assert_eq!(wrapper_cni_version(Some("junk")), "0.3.1");
        assert_eq!(wrapper_cni_version(None), "0.3.1");
        // libcni's ParseVersion takes one to three parts: "1.0" is 1.0.0, kept; four parts are invalid.
        assert_eq!(wrapper_cni_version(Some("1.0")), "1.0");
        assert_eq!(wrapper_cni_version(Some("0.2")), "0.3.1");
        assert_eq!(wrapper_cni_version(Some("1.0.0.0")), "0.3.1");
    }

    /// The largest text render writes is one our own reader takes back ([`json::MAX_INPUT`] bytes with
    /// its newline): the installer reads the file it wrote to decide readiness.
    #[test]
    fn render_writes_only_what_we_read_back() {
        let doc = |n: usize| {
            Value::Object(Object::from_iter([(
                "a".to_string(),
                json::string(&"x".repeat(n)),
            )]))
        };
        let overhead = json::to_pretty(&doc(0), "  ").len();
        let fits = render(&doc(json::MAX_INPUT - 1 - overhead)).unwrap();
        assert_eq!(fits.len(), json::MAX_INPUT);
        json::parse(&fits, "rendered").unwrap();
        let e = render(&doc(json::MAX_INPUT - overhead))
            .unwrap_err()
            .to_string();
        assert!(e.contains("not writing it"), "{e}");
    }

    #[test]
    fn merge_replaces_every_entry_and_appends_last() {
        let primary = r#"{"name":"n","cniVersion":"1.0.0","plugins":[{"type":"istio-cni","old":1},{"type":"calico"},{"type":"istio-cni","second":true}]}"#;
        let out = merge(primary, &entry().to_object()).unwrap();
        let v = json::parse_object(&out, "out").unwrap();
        let plugins = json::arr_of(&v, "plugins").unwrap();
        assert_eq!(plugins.len(), 2);
        assert_eq!(count_entries(&out), 1);
        assert!(!out.contains("second") && !out.contains("\"old\""));
        assert!(out.ends_with("}\n") && !out.ends_with("\n\n"));
        // merging again is idempotent
        assert_eq!(merge(&out, &entry().to_object()).unwrap(), out);
        let removed = remove_entry(primary, "x").unwrap().unwrap();
        assert_eq!(count_entries(&removed), 0);
        assert_eq!(remove_entry(&removed, "x").unwrap(), None);
    }

    #[test]
    fn wrapping_an_istio_cni_conf_leaves_one_entry() {
        let conf = r#"{"cniVersion":"0.3.1","name":"istio-cni","type":"istio-cni","old":true}"#;
        let out = merge(conf, &entry().to_object()).unwrap();
        assert_eq!(count_entries(&out), 1, "{out}");
        assert!(!out.contains("\"old\""), "{out}");
        let removed = remove_entry(&out, "x").unwrap().unwrap();
        assert!(has_empty_plugins(&removed));
        assert!(!has_empty_plugins(&out));
    }

    #[test]
    fn merge_errors_are_upstreams() {
        let e = merge("[]", &entry().to_object()).unwrap_err().to_string();
        assert!(
            e.contains("error loading existing CNI config (JSON error)"),
            "{e}"
        );
        let e = merge("{}", &entry().to_object()).unwrap_err().to_string();
        assert!(
            e.contains("error reading plugin list from CNI config"),
            "{e}"
        );
        let e = merge(r#"{"plugins":[1]}"#, &entry().to_object())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("error reading plugin from CNI config plugin list"),
            "{e}"
        );
    }

    #[test]
    fn go_number_rules() {
        let v = json::parse(r#"{"a":10000000000000001,"b":1.0,"c":1e21,"d":-3}"#, "t").unwrap();
        assert_eq!(
            render(&v).unwrap(),
            "{\n  \"a\": 10000000000000000,\n  \"b\": 1,\n  \"c\": 1e+21,\n  \"d\": -3\n}\n"
        );
    }
}
