//! The node's pod LIST + WATCH loop (`kube::podwatch::watch`) against a scripted [`PodSource`], no server:
//! the restart decision (410 → relist, a watch closed by the server → re-watch from its last
//! resourceVersion) and the order in which the sinks hear of a watch opening and its end. Every request the loop makes is recorded and every wait
//! before a restart is handed to the test, which stops the loop after a few.

use istio_cni::error::Result;
use istio_cni::json::{parse_object, Object};
use istio_cni::kube::client::{PodList, PodSource};
use istio_cni::kube::podwatch::{self, next, Ended, Fanout, PodSink, Selection, Start};
use istio_cni::kube::status::Status;
use istio_cni::kube::{ListParams, WatchParams, WatchStream};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the scripted server answers, in the order the loop asks.
enum Answer {
    /// A LIST page: the pods' names, the list's resourceVersion.
    List(Vec<&'static str>, &'static str),
    /// A watch that opens and streams these event lines, then ends (closed by the server).
    Watch(Vec<String>),
    /// A request answered with this HTTP status.
    Refuse(u16),
}

/// A [`PodSource`] that answers from a script and records each request: `list` or `watch from RV`.
#[derive(Default)]
struct Script {
    answers: Mutex<VecDeque<Answer>>,
    asked: Mutex<Vec<String>>,
}

impl Script {
    fn new(answers: Vec<Answer>) -> Script {
        Script {
            answers: Mutex::new(answers.into()),
            ..Script::default()
        }
    }

    fn answer(&self, asked: String) -> Answer {
        self.asked.lock().unwrap().push(asked.clone());
        let next = self.answers.lock().unwrap().pop_front();
        next.unwrap_or_else(|| panic!("the script has no answer for {asked}"))
    }

    fn asked(&self) -> Vec<String> {
        self.asked.lock().unwrap().clone()
    }
}

fn refused(code: u16) -> istio_cni::Error {
    let reason = if code == 410 { "Expired" } else { "Invalid" };
    Status {
        code,
        reason: reason.into(),
        message: format!("scripted {code}"),
    }
    .into_error()
}

fn pod(name: &str, rv: &str) -> Object {
    parse_object(&pod_json(name, rv), "pod").unwrap()
}

fn pod_json(name: &str, rv: &str) -> String {
    format!(
        r#"{{"metadata":{{"namespace":"ns","name":"{name}","uid":"u-{name}","resourceVersion":"{rv}"}}}}"#
    )
}

fn event(kind: &str, name: &str, rv: &str) -> String {
    format!(r#"{{"type":"{kind}","object":{}}}"#, pod_json(name, rv))
}

fn bookmark(rv: &str) -> String {
    format!(r#"{{"type":"BOOKMARK","object":{{"metadata":{{"resourceVersion":"{rv}"}}}}}}"#)
}

fn expired() -> String {
    r#"{"type":"ERROR","object":{"kind":"Status","code":410,"reason":"Expired","message":"too old resource version"}}"#.into()
}

impl PodSource for Script {
    fn list_pods(&self, p: &ListParams) -> Result<PodList> {
        assert!(
            p.field_selector.is_some(),
            "a list of other pods than the node's"
        );
        match self.answer("list".into()) {
            Answer::List(names, rv) => Ok(PodList {
                items: names.iter().map(|n| pod(n, rv)).collect(),
                resource_version: rv.into(),
                continue_token: None,
            }),
            Answer::Refuse(code) => Err(refused(code)),
            Answer::Watch(_) => panic!("the script has a watch where the loop lists"),
        }
    }

    fn watch_pods(&self, p: &WatchParams) -> Result<WatchStream> {
        let asked = match &p.resource_version {
            Some(rv) => format!("watch from {rv}"),
            None => panic!("a watch from no resourceVersion"),
        };
        assert!(p.allow_bookmarks, "{asked}: bookmarks not asked for");
        match self.answer(asked) {
            Answer::Watch(lines) => {
                let body = lines.join("\n").into_bytes();
                let rv = p.resource_version.clone();
                Ok(WatchStream::new(
                    Box::new(std::io::Cursor::new(body)),
                    rv,
                    "scripted".into(),
                ))
            }
            Answer::Refuse(code) => Err(refused(code)),
            Answer::List(..) => panic!("the script has a list where the loop watches"),
        }
    }
}

/// A sink that writes down every call, in order.
struct Record {
    calls: Arc<Mutex<Vec<String>>>,
}

impl Record {
    fn say(&self, s: impl Into<String>) {
        self.calls.lock().unwrap().push(s.into());
    }
}

impl PodSink for Record {
    fn pod(&mut self, pod: &Object) {
        let meta = istio_cni::json::obj_of(pod, "metadata").unwrap();
        let field = |k| istio_cni::json::str_of(meta, k).unwrap_or("");
        self.say(format!(
            "pod {}@{}",
            field("name"),
            field("resourceVersion")
        ));
    }
    fn gone(&mut self, key: &str, _uid: &str) {
        self.say(format!("gone {key}"));
    }
    fn list_done(&mut self) {
        self.say("listed");
    }
    fn watch_up(&mut self, restart: bool) {
        self.say(if restart { "up again" } else { "up" });
    }
    fn watch_down(&mut self) {
        self.say("down");
    }
}

/// Runs the loop over `script` until it has waited `restarts` times; returns the sink's calls and the
/// waits.
fn run(script: &Script, restarts: usize) -> (Vec<String>, Vec<Duration>) {
    let calls = Arc::new(Mutex::new(Vec::new()));
    let sink = Record {
        calls: calls.clone(),
    };
    let sel = Selection {
        label: None,
        field: "spec.nodeName=node-1".into(),
        what: "scripted",
    };
    let mut waits = Vec::new();
    podwatch::watch(script, &sel, Fanout::new(vec![Box::new(sink)]), |d| {
        waits.push(d);
        waits.len() < restarts
    });
    let calls = calls.lock().unwrap().clone();
    (calls, waits)
}

#[test]
fn the_restart_decision() {
    let from = |rv: &str| Start::From(rv.into());
    let (gone, failed) = (Ended::Gone(refused(410)), Ended::Failed(refused(500)));
    for (start, ended, want) in [
        // A 410: relist.
        (from("9"), &gone, Start::List),
        // Closed or failed: re-watch from where the watch got to.
        (from("9"), &Ended::Closed, from("9")),
        (from("9"), &failed, from("9")),
    ] {
        let what = format!("{start:?} {ended:?}");
        assert_eq!(next(start, ended), want, "{what}");
    }
}

#[test]
fn a_watch_closed_by_the_server_is_reopened_from_its_last_resource_version() {
    let s = Script::new(vec![
        Answer::List(vec!["a"], "10"),
        Answer::Watch(vec![event("ADDED", "b", "11"), bookmark("12")]),
        Answer::Watch(vec![]),
    ]);
    let (calls, waits) = run(&s, 2);
    assert_eq!(s.asked(), ["list", "watch from 10", "watch from 12"]);
    let want = [
        "pod a@10", "listed", "up", "pod b@11", "down", "up again", "down",
    ];
    assert_eq!(calls, want);
    assert!(waits.iter().all(|d| !d.is_zero()), "{waits:?}");
}

#[test]
fn a_410_relists_and_tells_the_sinks_which_pods_vanished() {
    for ends in [
        Answer::Watch(vec![event("MODIFIED", "a", "11"), expired()]),
        Answer::Refuse(410),
    ] {
        let s = Script::new(vec![
            Answer::List(vec!["a", "b"], "10"),
            ends,
            Answer::List(vec!["a"], "20"),
            Answer::Watch(vec![]),
        ]);
        let (calls, waits) = run(&s, 2);
        assert_eq!(
            s.asked(),
            ["list", "watch from 10", "list", "watch from 20"]
        );
        let relist = calls.iter().position(|c| c == "pod a@20").unwrap();
        assert_eq!(
            calls[relist..],
            ["pod a@20", "gone ns/b", "listed", "up again", "down"]
        );
        assert!(waits.iter().all(|d| !d.is_zero()), "{waits:?}");
    }
}

#[test]
fn a_failed_list_is_retried_after_a_wait() {
    let s = Script::new(vec![
        Answer::Refuse(500),
        Answer::List(vec![], "3"),
        Answer::Watch(vec![]),
    ]);
    let (calls, waits) = run(&s, 2);
    assert_eq!(s.asked(), ["list", "list", "watch from 3"]);
    assert_eq!(calls, ["down", "listed", "up", "down"]);
    assert!(waits.iter().all(|d| !d.is_zero()), "{waits:?}");
}
