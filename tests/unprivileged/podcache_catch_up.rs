//! The pod cache's by-name rule against an API server that is slow to tell a (re-)opened watch what it
//! missed (the API double holding a watch's events after its response head): a lookup by namespace and
//! name alone (a runtime that passes no `K8S_POD_UID`) must never get the previous pod of that name, a
//! StatefulSet's `web-0` deleted and recreated while no watch was open. Each case runs against a server
//! that streams the watch-list (`sendInitialEvents`, Kubernetes 1.32, 1.34+) and one that refuses it
//! with 422 (1.27–1.31, and 1.33 by default), where the agent lists, watches and probes instead.

use crate::support::kube::{pod_json, start};
use crate::support::podcache::Agent;
use crate::support::repair::NODE;
use crate::support::{poll_until, TempDir};
use istio_cni::json::{obj_of, str_of, Object};
use istio_cni::podcache::{client, proto::Request, Answer, Miss};
use kube_double::{Fault, Server};
use std::time::Duration;

const NS: &str = "shop";
const NAME: &str = "web-0";

fn uid_of(o: &Object) -> String {
    obj_of(o, "metadata")
        .and_then(|m| str_of(m, "uid"))
        .unwrap_or("")
        .to_string()
}

/// The UID of the pod the cache answers for `web-0` by namespace and name alone, or why not.
fn by_name(agent: &Agent) -> Result<String, Miss> {
    let req = Request {
        namespace: NS.into(),
        name: NAME.into(),
        uid: String::new(),
    };
    client::lookup(&agent.socket(), &req).map(|p| uid_of(&p))
}

fn add_web(srv: &Server) -> String {
    uid_of(&srv.add_pod(&pod_json(NS, NAME, NODE)).unwrap())
}

/// `web-0` deleted and created again under its name: a new UID.
fn recreate_web(srv: &Server, old: &str) -> String {
    srv.delete_pod(NS, NAME).unwrap();
    let new = add_web(srv);
    assert_ne!(new, old);
    new
}

/// Waits until a watch request is held (its head sent, its events not) and the agent has had time to read
/// the head.
fn wait_held(srv: &Server) {
    poll_until("a held watch", Duration::from_secs(60), || {
        srv.stats().watches_held >= 1
    });
    // Only the vulnerable agent needs this to fail: it goes live when it reads the head.
    std::thread::sleep(Duration::from_millis(300));
}

/// The name-only lookup during the hold: a miss (the plugin reads the pod from the API server), or the new
/// pod; never the old one.
fn assert_not_the_old_pod(agent: &Agent, old: &str, new: &str, case: &str) {
    let got = by_name(agent);
    assert!(
        matches!(&got, Err(Miss::Agent(Answer::NotSynced))) || got.as_deref() == Ok(new),
        "{case}: a name-only lookup during the held watch got {got:?} (old pod {old}, new pod {new})\n{}",
        agent.log()
    );
}

/// Once the server delivers, the cache catches up and answers by name again, with the new pod.
fn assert_catches_up(agent: &Agent, new: &str) {
    poll_until(
        "the new web-0 by name from the cache",
        Duration::from_secs(60),
        || by_name(agent).as_deref() == Ok(new),
    );
}

/// A synced agent answering `web-0` (the old pod) by name, against a server with or without watch-list.
fn agent_with_web(watch_list: bool, dir: &TempDir) -> (Server, Agent, String) {
    let srv = start();
    srv.set_watch_list(watch_list);
    let old = add_web(&srv);
    let agent = Agent::start(&srv, &dir.join("run"), NODE, &[]);
    poll_until(
        "web-0 by name from the cache",
        Duration::from_secs(60),
        || by_name(&agent).as_deref() == Ok(old.as_str()),
    );
    (srv, agent, old)
}

/// The watch ends and every re-watch is closed at once for now (no watch open: a gap), and `web-0` is
/// recreated in the gap.
fn gap_with_recreated_web(srv: &Server, agent: &Agent, old: &str) -> String {
    srv.set_fault(Fault::WatchClose, None);
    srv.end_watches();
    poll_until(
        "the cache not answering by name",
        Duration::from_secs(60),
        || by_name(agent) == Err(Miss::Agent(Answer::NotSynced)),
    );
    recreate_web(srv, old)
}

#[test]
fn a_rewatch_after_a_gap_answers_no_name_only_lookup_until_it_caught_up() {
    for watch_list in [true, false] {
        let case = format!("re-watch (watch-list {watch_list})");
        let dir = TempDir::new("cache-rewatch");
        let (srv, agent, old) = agent_with_web(watch_list, &dir);
        let new = gap_with_recreated_web(&srv, &agent, &old);
        // The next watch answers at once; what it missed comes only when the fault is cleared.
        srv.set_fault(Fault::WatchHold, None);
        wait_held(&srv);
        assert_not_the_old_pod(&agent, &old, &new, &case);
        srv.clear_fault();
        assert_catches_up(&agent, &new);
    }
}

#[test]
fn a_watch_that_answers_200_then_410_answers_no_name_only_lookup() {
    for watch_list in [true, false] {
        let case = format!("200 then 410 (watch-list {watch_list})");
        let dir = TempDir::new("cache-410");
        let (srv, agent, old) = agent_with_web(watch_list, &dir);
        let new = gap_with_recreated_web(&srv, &agent, &old);
        // The next watch answers 200 and, once the fault is cleared, an ERROR 410: the agent relists.
        srv.set_fault(Fault::WatchHoldGone, None);
        wait_held(&srv);
        assert_not_the_old_pod(&agent, &old, &new, &case);
        srv.clear_fault();
        assert_catches_up(&agent, &new);
    }
}

#[test]
fn the_first_watch_after_the_list_answers_no_name_only_lookup_until_it_caught_up() {
    for watch_list in [true, false] {
        let case = format!("first watch (watch-list {watch_list})");
        let dir = TempDir::new("cache-first");
        let srv = start();
        srv.set_watch_list(watch_list);
        let old = add_web(&srv);
        // Every watch is closed at once for now: the agent lists (unless its watch-list is what is
        // closed), and its first watch does not get going.
        srv.set_fault(Fault::WatchClose, None);
        let agent = Agent::start(&srv, &dir.join("run"), NODE, &[]);
        poll_until("a watch request", Duration::from_secs(60), || {
            srv.stats().watches >= 2
        });
        // Recreated after the list and before the first watch that stays open, which holds what it
        // missed.
        let new = recreate_web(&srv, &old);
        srv.set_fault(Fault::WatchHold, None);
        wait_held(&srv);
        assert_not_the_old_pod(&agent, &old, &new, &case);
        srv.clear_fault();
        assert_catches_up(&agent, &new);
    }
}

/// `web-0` being deleted (`deletionTimestamp` set, its containers still stopping; a slow node or an
/// agent whose watch lags behind the kubelet's) is, by name alone, not the answer: a sandbox set up under
/// its name is for the pod that replaces it, whose redirect configuration may differ. The agent waits for
/// that one, then answers `unknown` (the plugin asks the API server); by its UID the old pod is still
/// served, and once the new pod arrives it is the answer by name.
#[test]
fn by_name_a_pod_being_deleted_is_not_the_answer() {
    let dir = TempDir::new("cache-deleting");
    let srv = start();
    let mut old = istio_cni::json::parse_object(&pod_json(NS, NAME, NODE), "pod").unwrap();
    if let Some(istio_cni::json::Value::Object(m)) = old.get_mut("metadata") {
        m.insert(
            "deletionTimestamp".into(),
            istio_cni::json::string("2026-11-30T00:00:30Z"),
        );
    }
    let old = uid_of(
        &srv.add_pod(&istio_cni::json::object_to_compact(&old))
            .unwrap(),
    );
    let agent = Agent::start(&srv, &dir.join("run"), NODE, &[]);
    let by_uid = Request {
        namespace: NS.into(),
        name: NAME.into(),
        uid: old.clone(),
    };
    poll_until(
        "the old web-0 by its UID, and the watch caught up",
        Duration::from_secs(60),
        || {
            client::lookup(&agent.socket(), &by_uid).is_ok()
                && by_name(&agent) != Err(Miss::Agent(Answer::NotSynced))
        },
    );
    assert_eq!(
        by_name(&agent),
        Err(Miss::Agent(Answer::Unknown)),
        "{}",
        agent.log()
    );
    let new = recreate_web(&srv, &old);
    assert_catches_up(&agent, &new);
}
