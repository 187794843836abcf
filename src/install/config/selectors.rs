//! `AMBIENT_ENABLEMENT_SELECTOR`: upstream parses this YAML list even with ambient off and writes it into
//! the `istio-cni` entry's `enablement_selectors` (the chart's ConfigMap always sets it), so a node's conf
//! is byte-identical to upstream's only if we do the same. Pure: YAML text → typed selectors → JSON.
//!
//! Upstream's types (`cni/pkg/util`, `metav1`): `EnablementSelector{podSelector, namespaceSelector}`,
//! both `LabelSelector` structs without omitempty (an absent one prints `{}`); `LabelSelector{matchLabels
//! (omitempty), matchExpressions (omitempty)}`; `LabelSelectorRequirement{key, operator, values
//! (omitempty)}`. Unknown keys are dropped, as Go's decoder drops them.

use crate::error::{Error, Result};
use crate::json::{self, Array, Object, Value};

const SETTING: &str = "AMBIENT_ENABLEMENT_SELECTOR";

#[derive(Debug, Clone, PartialEq, Default)]
pub struct LabelSelector {
    pub match_labels: Vec<(String, String)>,
    pub match_expressions: Vec<Requirement>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Requirement {
    pub key: String,
    pub operator: String,
    pub values: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct EnablementSelector {
    pub pod_selector: LabelSelector,
    pub namespace_selector: LabelSelector,
}

fn bad(msg: String) -> Error {
    Error::env(
        SETTING,
        format!("failed to parse ambient enablement selector: {msg}"),
    )
}

fn text_of(v: &Value, what: &str) -> Result<String> {
    match v {
        Value::String(s) => Ok(s.clone()),
        _ => Err(bad(format!("{what} must be a string"))),
    }
}

fn label_selector(v: Option<&Value>, what: &str) -> Result<LabelSelector> {
    let o = match v {
        None | Some(Value::Null) => return Ok(LabelSelector::default()),
        Some(Value::Object(o)) => o,
        Some(_) => return Err(bad(format!("{what} must be a mapping"))),
    };
    let mut sel = LabelSelector::default();
    match o.get("matchLabels") {
        None | Some(Value::Null) => {}
        Some(Value::Object(m)) => {
            for (k, v) in m.iter() {
                sel.match_labels
                    .push((k.clone(), text_of(v, &format!("{what}.matchLabels.{k}"))?));
            }
        }
        Some(_) => return Err(bad(format!("{what}.matchLabels must be a mapping"))),
    }
    match o.get("matchExpressions") {
        None | Some(Value::Null) => {}
        Some(Value::Array(a)) => {
            for (i, e) in a.iter().enumerate() {
                let w = format!("{what}.matchExpressions[{i}]");
                let Value::Object(e) = e else {
                    return Err(bad(format!("{w} must be a mapping")));
                };
                let field = |k: &str| match e.get(k) {
                    None | Some(Value::Null) => Ok(String::new()),
                    Some(v) => text_of(v, &format!("{w}.{k}")),
                };
                let values = match e.get("values") {
                    None | Some(Value::Null) => Vec::new(),
                    Some(Value::Array(vs)) => vs
                        .iter()
                        .map(|v| text_of(v, &format!("{w}.values")))
                        .collect::<Result<_>>()?,
                    Some(_) => return Err(bad(format!("{w}.values must be a list"))),
                };
                sel.match_expressions.push(Requirement {
                    key: field("key")?,
                    operator: field("operator")?,
                    values,
                });
            }
        }
        Some(_) => return Err(bad(format!("{what}.matchExpressions must be a list"))),
    }
    Ok(sel)
}

/// Parses the setting's YAML list; empty text is no selectors.
pub fn parse(text: &str) -> Result<Vec<EnablementSelector>> {
    if text.trim().is_empty() {
        return Ok(Vec::new());
    }
    let v = crate::kube::yaml::parse(text, SETTING).map_err(|e| bad(e.to_string()))?;
    let items = match v {
        Value::Null => return Ok(Vec::new()),
        Value::Array(a) => a,
        _ => return Err(bad("expected a list of selectors".into())),
    };
    items
        .iter()
        .enumerate()
        .map(|(i, item)| match item {
            Value::Object(o) => Ok(EnablementSelector {
                pod_selector: label_selector(o.get("podSelector"), &format!("[{i}].podSelector"))?,
                namespace_selector: label_selector(
                    o.get("namespaceSelector"),
                    &format!("[{i}].namespaceSelector"),
                )?,
            }),
            Value::Null => Ok(EnablementSelector::default()),
            _ => Err(bad(format!("[{i}] must be a mapping"))),
        })
        .collect()
}

/// One selector as an ordered list of (key, value) pairs in Go's struct field order.
type Fields = Vec<(&'static str, Value)>;

fn label_selector_fields(s: &LabelSelector) -> Fields {
    let mut f = Fields::new();
    if !s.match_labels.is_empty() {
        let mut m = Object::new();
        for (k, v) in &s.match_labels {
            m.insert(k.clone(), json::string(v));
        }
        f.push(("matchLabels", Value::Object(m)));
    }
    if !s.match_expressions.is_empty() {
        let a: Array = s
            .match_expressions
            .iter()
            .map(|r| {
                let mut o = Object::new();
                o.insert("key".into(), json::string(&r.key));
                o.insert("operator".into(), json::string(&r.operator));
                if !r.values.is_empty() {
                    o.insert(
                        "values".into(),
                        Value::Array(r.values.iter().map(|v| json::string(v)).collect()),
                    );
                }
                o
            })
            .map(Value::Object)
            .collect();
        f.push(("matchExpressions", Value::Array(a)));
    }
    f
}

fn object(fields: Fields) -> Value {
    Value::Object(
        fields
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
    )
}

/// The selectors as a JSON value (objects sorted, as every merged conf is printed).
pub fn to_value(sels: &[EnablementSelector]) -> Value {
    Value::Array(
        sels.iter()
            .map(|s| {
                object(vec![
                    (
                        "podSelector",
                        object(label_selector_fields(&s.pod_selector)),
                    ),
                    (
                        "namespaceSelector",
                        object(label_selector_fields(&s.namespace_selector)),
                    ),
                ])
            })
            .collect(),
    )
}

/// A label selector as Go prints the struct at nesting `depth`: `matchLabels`, then `matchExpressions`.
fn label_selector_text(s: &LabelSelector, indent: &str, depth: usize) -> String {
    let nested = format!("\n{}", indent.repeat(depth + 1));
    let fields: Vec<String> = label_selector_fields(s)
        .iter()
        // matchLabels is a Go map (sorted keys); requirement objects have key < operator < values,
        // so their sorted order is their struct order.
        .map(|(k, v)| {
            format!(
                "\"{k}\": {}",
                json::to_pretty(v, indent).replace('\n', &nested)
            )
        })
        .collect();
    json::block_text('{', &fields, '}', indent, depth)
}

/// The selectors as Go's `json.MarshalIndent` prints the struct (the standalone file): struct field
/// order, `indent` per level, starting at nesting `depth`; no trailing newline.
pub fn to_struct_text(sels: &[EnablementSelector], indent: &str, depth: usize) -> String {
    let items: Vec<String> = sels
        .iter()
        .map(|s| {
            let fields = [
                ("podSelector", &s.pod_selector),
                ("namespaceSelector", &s.namespace_selector),
            ]
            .map(|(k, sel)| format!("\"{k}\": {}", label_selector_text(sel, indent, depth + 2)));
            json::block_text('{', &fields, '}', indent, depth + 1)
        })
        .collect();
    json::block_text('[', &items, ']', indent, depth)
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// The chart's default value (upstream's `ambient.enablementSelectors`).
    pub const CHART_DEFAULT: &str = "- podSelector:\n    matchLabels:\n      istio.io/dataplane-mode: ambient\n- namespaceSelector:\n    matchLabels:\n      istio.io/dataplane-mode: ambient\n  podSelector:\n    matchExpressions:\n    - key: istio.io/dataplane-mode\n      operator: NotIn\n      values:\n      - none";

    #[test]
    fn chart_default_prints_as_upstream() {
        let s = parse(CHART_DEFAULT).unwrap();
        assert_eq!(s.len(), 2);
        let want = r#"[{"namespaceSelector":{},"podSelector":{"matchLabels":{"istio.io/dataplane-mode":"ambient"}}},{"namespaceSelector":{"matchLabels":{"istio.io/dataplane-mode":"ambient"}},"podSelector":{"matchExpressions":[{"key":"istio.io/dataplane-mode","operator":"NotIn","values":["none"]}]}}]"#;
        assert_eq!(json::to_compact(&to_value(&s)), want);
    }

    #[test]
    fn struct_text_keeps_field_order() {
        let s = parse("- podSelector:\n    matchLabels:\n      a: b\n    matchExpressions:\n    - key: k\n      operator: Exists\n").unwrap();
        let t = to_struct_text(&s, "  ", 1);
        let want = "[\n    {\n      \"podSelector\": {\n        \"matchLabels\": {\n          \"a\": \"b\"\n        },\n        \"matchExpressions\": [\n          {\n            \"key\": \"k\",\n            \"operator\": \"Exists\"\n          }\n        ]\n      },\n      \"namespaceSelector\": {}\n    }\n  ]";
        assert_eq!(t, want);
        assert_eq!(to_struct_text(&[], "  ", 1), "[]");
    }

    #[test]
    fn empty_and_malformed() {
        assert!(parse("").unwrap().is_empty());
        assert!(parse("  \n").unwrap().is_empty());
        let e = parse("podSelector: {}").unwrap_err().to_string();
        assert!(
            e.contains("AMBIENT_ENABLEMENT_SELECTOR") && e.contains("list"),
            "{e}"
        );
        let e = parse("- podSelector:\n    matchLabels:\n    - a\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("matchLabels must be a mapping"), "{e}");
        assert!(parse("- podSelector: &a x\n").is_err());
    }
}
