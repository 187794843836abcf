//! The log lines about broken pods the agent does not fix (pure): one no mode acts on, and one repaired in
//! place whose check fails again.

use super::detect::{failure, PodFacts};
use super::options::Options;

/// The init container's name as the log says it.
fn container(o: &Options) -> &str {
    if o.init_container_name.is_empty() {
        "an init container"
    } else {
        o.init_container_name.as_str()
    }
}

/// How it last ended, e.g. `last exited 126`.
fn how(f: &PodFacts, o: &Options) -> String {
    match failure(f, o) {
        Some(t) if t.message.trim().is_empty() => format!("last exited {}", t.exit_code),
        Some(t) => format!("last exited {} ({:?})", t.exit_code, t.message.trim()),
        None => "did not succeed".to_string(),
    }
}

/// The log line for a pod repaired in place whose check failed again on a run that ended after the repair.
pub fn failed_again_line(f: &PodFacts, o: &Options) -> String {
    format!(
        "pod {} (uid {}) is broken again: {} failed again after its repair in place ({}), though its \
         rules were programmed and read back; something else fails the check (the probe port \
         excluded from capture, the check run as another uid than the rules' proxy uid, the rules \
         removed since: the audit says which); each UID is repaired once, so nothing more is done: \
         look at the container's log",
        f.key(),
        f.uid,
        container(o),
        how(f, o)
    )
}

/// The log line for a broken pod no mode acts on (the agent said at start that such pods are only logged).
pub fn unhandled_line(f: &PodFacts, o: &Options) -> String {
    let (container, how) = (container(o), how(f, o));
    format!(
        "pod {} (uid {}) is broken: {container} {how} (no redirection in its network namespace); \
         no mode is enabled (repair-pods, delete-pods, label-pods), so nothing is done: it stays in its \
         init containers until it is repaired, deleted or recreated by hand",
        f.key(),
        f.uid
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::repair::detect::{InitStatus, LastTermination};

    #[test]
    fn the_unhandled_line_names_the_matching_termination() {
        let t = |code: i64, msg: &str| InitStatus {
            succeeded: false,
            last: Some(LastTermination {
                exit_code: code,
                message: msg.into(),
            }),
            runs: 1,
            running: false,
        };
        let f = PodFacts {
            namespace: "ns".into(),
            name: "p".into(),
            uid: "u1".into(),
            annotated: true,
            init: vec![t(1, "other"), t(126, " died ")],
            ..PodFacts::default()
        };
        let mut o = Options::default();
        assert_eq!(failure(&f, &o).map(|t| t.exit_code), Some(126));
        let line = unhandled_line(&f, &o);
        assert!(
            line.starts_with(
                "pod ns/p (uid u1) is broken: istio-validation last exited 126 (\"died\")"
            ),
            "{line}"
        );
        assert!(line.contains("no mode is enabled"), "{line}");
        o.init_container_name = String::new();
        o.init_exit_code = 0;
        assert!(unhandled_line(&f, &o).contains("an init container last exited 1 (\"other\")"));
        let healthy = PodFacts {
            annotated: false,
            ..f.clone()
        };
        assert!(failure(&healthy, &o).is_none());
    }
}
