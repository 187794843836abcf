//! Our entry: the `istio-cni` network configuration the installer writes, as the object merged into a
//! primary's list and as the standalone file (upstream's struct order).

use super::conflist::{PLUGIN_TYPE, UPSTREAM_CNI_VERSION};
use super::selectors::{self, EnablementSelector};
use crate::json::{self, Object, Value};

/// The `istio-cni` network configuration the installer writes (upstream master's `plugin.Config`).
#[derive(Debug, Clone, PartialEq)]
pub struct PluginEntry {
    pub plugin_log_level: String,
    pub cni_agent_run_dir: String,
    /// Always false from the CLI (ambient is not supported); kept so the output matches upstream's shape.
    pub ambient_enabled: bool,
    /// `None` prints `null` (EXCLUDE_NAMESPACES empty), as upstream.
    pub exclude_namespaces: Option<Vec<String>>,
    pub pod_namespace: String,
    pub native_nftables: bool,
    /// AMBIENT_ENABLEMENT_SELECTOR, written even with ambient off, as upstream does.
    pub enablement_selectors: Vec<EnablementSelector>,
    /// ENABLE_AMBIENT_DETECTION_RETRY, written as given, as upstream does (the plugin never reads it:
    /// ambient is refused).
    pub enable_ambient_detection_retry: bool,
    /// POD_CACHE_ENABLED: our key `"pod_cache": false` is written only when off, so the default entry is
    /// upstream's, byte for byte.
    pub pod_cache: bool,
}

impl PluginEntry {
    /// The fields in upstream's struct order, without `cniVersion` (upstream deletes it before merging).
    fn fields(&self) -> Vec<(&'static str, Value)> {
        let exclude = match &self.exclude_namespaces {
            None => Value::Null,
            Some(v) => Value::Array(v.iter().map(|s| json::string(s)).collect()),
        };
        let mut f = vec![
            ("name", json::string(PLUGIN_TYPE)),
            ("type", json::string(PLUGIN_TYPE)),
            ("ipam", Value::Object(Object::new())),
            ("dns", Value::Object(Object::new())),
            ("plugin_log_level", json::string(&self.plugin_log_level)),
            ("cni_agent_run_dir", json::string(&self.cni_agent_run_dir)),
            ("ambient_enabled", Value::Bool(self.ambient_enabled)),
            (
                "enablement_selectors",
                selectors::to_value(&self.enablement_selectors),
            ),
            ("exclude_namespaces", exclude),
            ("pod_namespace", json::string(&self.pod_namespace)),
            ("native_nftables", Value::Bool(self.native_nftables)),
            (
                "enable_ambient_detection_retry",
                Value::Bool(self.enable_ambient_detection_retry),
            ),
        ];
        if !self.pod_cache {
            f.push(("pod_cache", Value::Bool(false)));
        }
        f
    }

    /// The entry as a JSON object (no `cniVersion`).
    pub fn to_object(&self) -> Object {
        let mut o = Object::new();
        for (k, v) in self.fields() {
            o.insert(k.into(), v);
        }
        o
    }

    /// The standalone file: upstream's struct field order (not sorted), `cniVersion` 0.3.1, trailing newline.
    pub fn standalone_text(&self) -> String {
        let mut fields = vec![format!("\"cniVersion\": \"{UPSTREAM_CNI_VERSION}\"")];
        for (k, v) in self.fields() {
            // The selectors print in their struct order too.
            let text = match k {
                "enablement_selectors" => {
                    selectors::to_struct_text(&self.enablement_selectors, "  ", 1)
                }
                _ => json::to_pretty(&v, "  ").replace('\n', "\n  "),
            };
            fields.push(format!("\"{k}\": {text}"));
        }
        json::block_text('{', &fields, '}', "  ", 0) + "\n"
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// The entry the configuration tests write.
    pub(in crate::install::config) fn entry() -> PluginEntry {
        PluginEntry {
            plugin_log_level: "info".into(),
            cni_agent_run_dir: "/var/run/istio-cni".into(),
            ambient_enabled: false,
            exclude_namespaces: Some(vec!["kube-system".into()]),
            pod_namespace: "istio-system".into(),
            native_nftables: false,
            enablement_selectors: selectors::parse(selectors::tests::CHART_DEFAULT).unwrap(),
            enable_ambient_detection_retry: false,
            pod_cache: true,
        }
    }

    #[test]
    fn standalone_is_struct_ordered() {
        let t = entry().standalone_text();
        assert!(t.starts_with("{\n  \"cniVersion\": \"0.3.1\",\n  \"name\": \"istio-cni\""));
        assert!(t.contains("\"exclude_namespaces\": [\n    \"kube-system\"\n  ],"));
        assert!(t.ends_with("\"enable_ambient_detection_retry\": false\n}\n"));
        let retry = PluginEntry {
            enable_ambient_detection_retry: true,
            ..entry()
        };
        assert!(retry
            .standalone_text()
            .ends_with("\"enable_ambient_detection_retry\": true\n}\n"));
        assert!(matches!(
            retry.to_object().get("enable_ambient_detection_retry"),
            Some(Value::Bool(true))
        ));
        json::parse(&t, "standalone").unwrap();
    }

    /// The selectors print in their struct order (`podSelector` first), as upstream's file, not with the
    /// sorted keys of every other value.
    #[test]
    fn standalone_selectors_keep_struct_order() {
        let e = entry();
        let t = e.standalone_text();
        let want = format!(
            "\n  \"enablement_selectors\": {},\n",
            selectors::to_struct_text(&e.enablement_selectors, "  ", 1)
        );
        assert!(t.contains(&want), "{t}");
        let pod = t.find("\"podSelector\"").unwrap();
        let ns = t.find("\"namespaceSelector\"").unwrap();
        assert!(pod < ns, "{t}");
    }

    #[test]
    fn pod_cache_key_only_when_off() {
        let on = entry();
        assert!(!on.to_object().contains_key("pod_cache"));
        assert!(!on.standalone_text().contains("pod_cache"));
        let off = PluginEntry {
            pod_cache: false,
            ..entry()
        };
        assert!(matches!(
            off.to_object().get("pod_cache"),
            Some(Value::Bool(false))
        ));
        let t = off.standalone_text();
        assert!(t.ends_with("false,\n  \"pod_cache\": false\n}\n"), "{t}");
        json::parse(&t, "standalone").unwrap();
    }
}
