//! Pure request texts for the actions: the label patch, Event reasons, messages and bodies, exactly as
//! upstream master sends them. Paths, methods and the DeleteOptions body are [`crate::kube::request`]'s.

use super::detect::{Action, PodFacts};
use super::options::Options;
use crate::json::write_string;

pub const REASON_LABEL: &str = "LabelBrokenPod";
pub const REASON_DELETE: &str = "DeleteBrokenPod";
pub const REASON_REPAIR: &str = "RepairBrokenPod";
/// The Event source component (`cni-repair`).
pub const COMPONENT: &str = "cni-repair";

/// `{"metadata":{"labels":{"<key>":"<value>"}}}`.
pub fn label_patch(o: &Options) -> String {
    let mut s = String::from(r#"{"metadata":{"labels":{"#);
    write_string(&mut s, &o.label_key);
    s.push(':');
    write_string(&mut s, &o.label_value);
    s.push_str("}}}");
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

/// `YYYY-MM-DDTHH:MM:SSZ` for a Unix time in seconds (UTC), as Kubernetes writes `metav1.Time`.
pub fn rfc3339(unix: u64) -> String {
    format!("{}Z", crate::logging::line::utc_date_time(unix))
}

/// A core/v1 Event about the pod, as client-go's recorder writes it (component `cni-repair`).
pub fn event_json(
    f: &PodFacts,
    reason: &str,
    message: &str,
    unix_nanos: u128,
    node: &str,
) -> String {
    let ts = rfc3339((unix_nanos / 1_000_000_000) as u64);
    let q = |v: &str| {
        let mut s = String::new();
        write_string(&mut s, v);
        s
    };
    format!(
        concat!(
            r#"{{"kind":"Event","apiVersion":"v1","metadata":{{"name":{name},"namespace":{ns}}},"#,
            r#""involvedObject":{{"kind":"Pod","apiVersion":"v1","namespace":{ns},"name":{pod},"uid":{uid},"resourceVersion":{rv}}},"#,
            r#""type":"Warning","reason":{reason},"message":{message},"count":1,"#,
            r#""firstTimestamp":{ts},"lastTimestamp":{ts},"#,
            r#""source":{{"component":{comp},"host":{node}}},"reportingComponent":{comp},"reportingInstance":{node}}}"#
        ),
        name = q(&format!("{}.{:x}", f.name, unix_nanos)),
        ns = q(&f.namespace),
        pod = q(&f.name),
        uid = q(&f.uid),
        rv = q(&f.resource_version),
        reason = q(reason),
        message = q(message),
        ts = q(&ts),
        comp = q(COMPONENT),
        node = q(node),
    )
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
            event_text(Action::Delete, Some("409")).unwrap().1,
            "pod detected as broken, but failed to delete: 409"
        );
        assert!(event_text(Action::LabelSkip, None).is_none());
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_795_320_000), "2026-11-22T04:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        let ev = event_json(&f, REASON_DELETE, "m\"", 1_795_320_000_000_000_001, "n1");
        let v = crate::json::parse_object(&ev, "event").unwrap();
        assert_eq!(crate::json::str_of(&v, "message"), Some("m\""));
        let md = crate::json::obj_of(&v, "metadata").unwrap();
        assert_eq!(crate::json::str_of(md, "name"), Some(".18ea42072a278001"));
        assert_eq!(
            crate::json::str_of(&v, "lastTimestamp"),
            Some("2026-11-22T04:00:00Z")
        );
    }
}
