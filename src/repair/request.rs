//! Pure request texts for the actions: paths, bodies, Event reasons and messages, exactly as upstream
//! master sends them.

use super::detect::{Action, PodFacts};
use super::options::Options;
use crate::json::write_string;

pub const MERGE_PATCH: &str = "application/merge-patch+json";
pub const REASON_LABEL: &str = "LabelBrokenPod";
pub const REASON_DELETE: &str = "DeleteBrokenPod";
pub const REASON_REPAIR: &str = "RepairBrokenPod";
/// The Event source component (`cni-repair`).
pub const COMPONENT: &str = "cni-repair";

/// `/api/v1/namespaces/{ns}/pods/{name}`.
pub fn pod_path(ns: &str, name: &str) -> String {
    format!("/api/v1/namespaces/{ns}/pods/{name}")
}

/// `/api/v1/namespaces/{ns}/pods/{name}/status`, where the label patch goes.
pub fn status_path(ns: &str, name: &str) -> String {
    format!("{}/status", pod_path(ns, name))
}

/// `{"metadata":{"labels":{"<key>":"<value>"}}}`.
pub fn label_patch(o: &Options) -> String {
    let mut s = String::from(r#"{"metadata":{"labels":{"#);
    write_string(&mut s, &o.label_key);
    s.push(':');
    write_string(&mut s, &o.label_value);
    s.push_str("}}}");
    s
}

/// DeleteOptions with the uid and resourceVersion we observed as preconditions, so we never delete a
/// recreated pod of the same name nor one that changed since we judged it.
pub fn delete_options(f: &PodFacts) -> String {
    let mut s =
        String::from(r#"{"kind":"DeleteOptions","apiVersion":"v1","preconditions":{"uid":"#);
    write_string(&mut s, &f.uid);
    s.push_str(r#","resourceVersion":"#);
    write_string(&mut s, &f.resource_version);
    s.push_str("}}");
    s
}

/// The Event reason and message for an action's outcome (`err` = the failure, if any); `None` for
/// actions upstream writes no Event for.
pub fn event_text(a: Action, err: Option<&str>) -> Option<(&'static str, String)> {
    let (reason, verb, failed) = match a {
        Action::Label => (REASON_LABEL, "labeled", "label"),
        Action::Delete => (REASON_DELETE, "deleted", "delete"),
        Action::Repair => (REASON_REPAIR, "repaired", "repair"),
        Action::None | Action::LabelSkip => return None,
    };
    Some(match err {
        None => (reason, format!("pod detected as broken, {verb}")),
        Some(e) => (
            reason,
            format!("pod detected as broken, but failed to {failed}: {e}"),
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_escape() {
        let o = Options {
            label_key: "a\"b".into(),
            label_value: "<v>".into(),
            ..Options::default()
        };
        assert_eq!(
            label_patch(&o),
            r#"{"metadata":{"labels":{"a\"b":"\u003cv\u003e"}}}"#
        );
        let f = PodFacts {
            uid: "u".into(),
            resource_version: "9".into(),
            ..PodFacts::default()
        };
        assert_eq!(
            delete_options(&f),
            r#"{"kind":"DeleteOptions","apiVersion":"v1","preconditions":{"uid":"u","resourceVersion":"9"}}"#
        );
        assert_eq!(status_path("d", "p"), "/api/v1/namespaces/d/pods/p/status");
        assert_eq!(
            event_text(Action::Delete, Some("409")).unwrap().1,
            "pod detected as broken, but failed to delete: 409"
        );
        assert!(event_text(Action::LabelSkip, None).is_none());
    }
}
