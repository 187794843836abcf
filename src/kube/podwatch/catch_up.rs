//! When a (re-)opened pod watch has caught up with the API server: the proof the pod cache needs before it
//! answers a lookup by namespace and name alone (`podcache::store`). Pure.
//!
//! A watch's response head says nothing about what it missed: after a gap (the server's timeout, an
//! error, a 410, or the moments between a LIST and its WATCH) the server replays the changes since the
//! last resourceVersion at its own pace, and until it has, the cache may hold the *previous* pod of a name
//! (a StatefulSet's `web-0` deleted and recreated in the gap). So a watch counts as caught up only when it
//! has delivered every change up to a consistent read made after the watch was requested:
//! - **watch-list** (`sendInitialEvents=true&resourceVersionMatch=NotOlderThan`, no resourceVersion: a
//!   consistent read): the BOOKMARK annotated `k8s.io/initial-events-end`, which the server sends once the
//!   initial events are synced "at least to the moment the request started being processed". Every
//!   (re)start is a new watch-list, so every gap ends with that proof, as soon as the node's pods are
//!   streamed (milliseconds).
//! - **a server without watch-list** (it answers 400/422, as Kubernetes 1.27–1.31 and 1.33 do by default,
//!   or it ignores the parameter: an unannotated BOOKMARK before the end marker): LIST, then WATCH from
//!   the list's resourceVersion (or re-watch from the last one), and once the watch's head arrived a
//!   consistent LIST with `limit=1` (no selector: one key read, cheap at any cluster size) gives a
//!   resourceVersion `R` no older than the gap; the watch is caught up at its first event or BOOKMARK at
//!   or past `R`. resourceVersions are compared as the integers etcd makes them (the API server compares
//!   them the same way); one that is not an integer proves nothing, so the cache then never answers by
//!   name. On a quiet node this waits for the server's next BOOKMARK (kube-apiserver sends one a minute
//!   once the pods' resourceVersion has moved past the watch's: measured on 1.34, 1-2 min after the watch
//!   opened); meanwhile name-only lookups go to the API server.

use crate::kube::{ApiErrorExt, EventKind, WatchEvent};

/// The annotation on the BOOKMARK that ends a watch-list's initial events.
pub const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

/// What still has to arrive before the open watch is caught up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pending {
    /// Nothing: caught up (or no proof is wanted).
    Nothing,
    /// The watch-list's initial-events-end BOOKMARK.
    InitialEnd,
    /// An event or BOOKMARK at or past this resourceVersion.
    AtLeast(u64),
    /// Nothing can prove it on this watch (the probe failed, or a resourceVersion is not an integer).
    Never,
}

/// What one event means for a watch waiting for `pending`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Still waiting (or never was).
    Wait,
    /// This event proves it: the watch has caught up.
    CaughtUp,
    /// A BOOKMARK without the end marker while a watch-list's initial events were due: the server ignored
    /// `sendInitialEvents`.
    NoWatchList,
}

/// A resourceVersion as the integer etcd made it; `None` if it is not one.
pub fn rv_number(rv: &str) -> Option<u64> {
    rv.parse().ok()
}

/// Whether `ev` is the BOOKMARK that ends a watch-list's initial events.
pub fn is_initial_events_end(ev: &WatchEvent) -> bool {
    ev.kind == EventKind::Bookmark
        && crate::json::obj_of(&ev.object, "metadata")
            .and_then(|m| crate::json::obj_of(m, "annotations"))
            .and_then(|a| crate::json::str_of(a, INITIAL_EVENTS_END))
            == Some("true")
}

/// The step for `ev`, an event of a watch waiting for `pending`.
pub fn step(pending: Pending, ev: &WatchEvent) -> Step {
    match pending {
        Pending::Nothing | Pending::Never => Step::Wait,
        Pending::InitialEnd if is_initial_events_end(ev) => Step::CaughtUp,
        Pending::InitialEnd if ev.kind == EventKind::Bookmark => Step::NoWatchList,
        Pending::InitialEnd => Step::Wait,
        Pending::AtLeast(r) => match ev.resource_version().map(rv_number) {
            Some(Some(v)) if v >= r => Step::CaughtUp,
            _ => Step::Wait,
        },
    }
}

/// What the probe's resourceVersion `probe` leaves to wait for, given the resourceVersion the watch has
/// reached (`at`: its start, or its last event).
pub fn after_probe(probe: &str, at: Option<&str>) -> Pending {
    match rv_number(probe) {
        None => Pending::Never,
        Some(r) if at.and_then(rv_number).is_some_and(|a| a >= r) => Pending::Nothing,
        Some(r) => Pending::AtLeast(r),
    }
}

/// Whether the API server refused a watch-list request because it does not serve one (400 or 422 on the
/// request; Kubernetes 1.27–1.31 and 1.33 by default answer 422 `Invalid`: "sendInitialEvents is forbidden
/// for watch unless the WatchList feature gate is enabled").
pub fn refuses_watch_list(e: &crate::Error) -> bool {
    matches!(e.api_status(), Some(400 | 422))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kube::watch::decode_event;

    fn ev(line: &str) -> WatchEvent {
        decode_event(line).unwrap()
    }

    #[test]
    fn the_end_marker_proves_a_watch_list_and_an_unmarked_bookmark_means_no_watch_list() {
        let end = ev(
            r#"{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"9","annotations":{"k8s.io/initial-events-end":"true"}}}}"#,
        );
        let plain = ev(r#"{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"9"}}}"#);
        let added = ev(r#"{"type":"ADDED","object":{"metadata":{"resourceVersion":"99"}}}"#);
        assert!(is_initial_events_end(&end) && !is_initial_events_end(&plain));
        assert_eq!(step(Pending::InitialEnd, &end), Step::CaughtUp);
        assert_eq!(step(Pending::InitialEnd, &plain), Step::NoWatchList);
        // An initial ADDED event, however new, proves nothing: more may follow.
        assert_eq!(step(Pending::InitialEnd, &added), Step::Wait);
        for p in [Pending::Nothing, Pending::Never] {
            assert_eq!(step(p, &end), Step::Wait);
        }
    }

    #[test]
    fn a_probe_is_reached_by_an_event_or_bookmark_at_or_past_it() {
        assert_eq!(after_probe("120", Some("100")), Pending::AtLeast(120));
        assert_eq!(after_probe("120", None), Pending::AtLeast(120));
        // Nothing changed anywhere since the watch's start.
        assert_eq!(after_probe("100", Some("100")), Pending::Nothing);
        // Not integers: nothing proves it.
        assert_eq!(after_probe("abc", Some("100")), Pending::Never);
        assert_eq!(after_probe("120", Some("x")), Pending::AtLeast(120));
        let at = |kind: &str, rv: &str| {
            ev(&format!(
                r#"{{"type":"{kind}","object":{{"metadata":{{"resourceVersion":"{rv}"}}}}}}"#
            ))
        };
        let p = Pending::AtLeast(120);
        assert_eq!(step(p, &at("ADDED", "119")), Step::Wait);
        assert_eq!(step(p, &at("DELETED", "120")), Step::CaughtUp);
        assert_eq!(step(p, &at("BOOKMARK", "500")), Step::CaughtUp);
        assert_eq!(step(p, &at("MODIFIED", "1e9")), Step::Wait);
        // A bookmark without the end marker is just progress here.
        assert_eq!(step(p, &at("BOOKMARK", "100")), Step::Wait);
    }

    #[test]
    fn only_400_and_422_mean_no_watch_list() {
        let st = |code: u16| crate::kube::status::Status {
            code,
            reason: String::new(),
            message: String::new(),
        };
        assert!(refuses_watch_list(&st(422).into_error()));
        assert!(refuses_watch_list(&st(400).into_error()));
        for code in [401, 403, 410, 429, 500, 503] {
            assert!(!refuses_watch_list(&st(code).into_error()), "{code}");
        }
    }
}
