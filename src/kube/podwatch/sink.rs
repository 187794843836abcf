//! What the node's pod watch feeds ([`PodSink`]), and the one fan-out to its sinks ([`Fanout`]) with the
//! relist bookkeeping: the loop knows which pods exist, so after a relist it tells its sinks which ones
//! vanished (deleted while no watch was open) as if their DELETED events had come. Pure.

use crate::json::Object;
use crate::kube::PodView;
use std::collections::HashMap;

/// What the list/watch loop feeds: the pod cache ([`crate::podcache`]), the repair worker
/// (`repair::controller::RepairSink`), or both through a [`Fanout`].
pub trait PodSink {
    /// A pod from a list page or an ADDED/MODIFIED event.
    fn pod(&mut self, pod: &Object);
    /// The pod `key` with `uid` is gone: a DELETED event (its UID, possibly empty), or a relist that no
    /// longer lists it.
    fn gone(&mut self, key: &str, uid: &str);
    /// A list is complete: the sink holds every pod that exists (those that vanished were [`PodSink::gone`]).
    fn list_done(&mut self) {}
    /// A watch opened (its response head arrived); `restart` when it is not the first one. What it missed
    /// since the last one may still be on its way.
    fn watch_up(&mut self, _restart: bool) {}
    /// The list or watch ended (failed, expired, or closed by the server): until the next watch opens,
    /// events may be missed.
    fn watch_down(&mut self) {}
}

/// The sinks one watch feeds, each every call in order, and the relist bookkeeping for them: the pods that
/// exist as far as the watch has told (each one's UID and the list that last saw it), so that a relist
/// tells the sinks which ones vanished.
pub struct Fanout {
    sinks: Vec<Box<dyn PodSink + Send>>,
    known: HashMap<String, (Box<str>, u32)>,
    /// The number of the list in progress, or of the last one.
    list: u32,
}

impl Fanout {
    pub fn new(sinks: Vec<Box<dyn PodSink + Send>>) -> Fanout {
        Fanout {
            sinks,
            known: HashMap::new(),
            list: 0,
        }
    }

    fn each(&mut self, f: impl Fn(&mut dyn PodSink)) {
        for s in &mut self.sinks {
            f(s.as_mut());
        }
    }

    /// A (re)list starts.
    pub fn list_begun(&mut self) {
        self.list = self.list.wrapping_add(1);
    }

    pub fn pod(&mut self, pod: &Object) {
        let v = PodView::of(pod);
        self.known.insert(v.key(), (v.uid.into(), self.list));
        self.each(|s| s.pod(pod));
    }

    /// A DELETED event: forgotten only if it is the pod known under that name (an empty UID matches any).
    pub fn gone(&mut self, pod: &Object) {
        let v = PodView::of(pod);
        let (key, uid) = (v.key(), v.uid);
        if (self.known.get(&key)).is_some_and(|(u, _)| uid.is_empty() || **u == *uid) {
            self.known.remove(&key);
        }
        self.each(|s| s.gone(&key, uid));
    }

    /// The list is complete: every pod it did not see is gone.
    pub fn list_done(&mut self) {
        let mut vanished = Vec::new();
        self.known.retain(|k, (uid, seen)| {
            let keep = *seen == self.list;
            if !keep {
                vanished.push((k.clone(), std::mem::take(uid)));
            }
            keep
        });
        for (k, uid) in vanished {
            self.each(|s| s.gone(&k, &uid));
        }
        self.each(|s| s.list_done());
    }

    pub fn watch_up(&mut self, restart: bool) {
        self.each(|s| s.watch_up(restart));
    }

    pub fn watch_down(&mut self) {
        self.each(|s| s.watch_down());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// Records every call as a line (sorted when taken: a relist's vanished pods come in no order).
    #[derive(Default, Clone)]
    struct Calls(Arc<Mutex<Vec<String>>>);

    impl Calls {
        fn take(&self) -> Vec<String> {
            let mut v = std::mem::take(&mut *self.0.lock().unwrap());
            v.sort();
            v
        }
    }

    impl PodSink for Calls {
        fn pod(&mut self, pod: &Object) {
            let v = PodView::of(pod);
            self.0
                .lock()
                .unwrap()
                .push(format!("pod {} {}", v.key(), v.uid));
        }
        fn gone(&mut self, key: &str, uid: &str) {
            self.0.lock().unwrap().push(format!("gone {key} {uid}"));
        }
        fn list_done(&mut self) {
            self.0.lock().unwrap().push("listed".into());
        }
    }

    fn pod(name: &str, uid: &str) -> Object {
        crate::json::parse_object(
            &format!(r#"{{"metadata":{{"namespace":"ns","name":"{name}","uid":"{uid}"}}}}"#),
            "pod",
        )
        .unwrap()
    }

    #[test]
    fn a_relist_reports_the_pods_it_did_not_see_as_gone_to_every_sink() {
        let (calls, other) = (Calls::default(), Calls::default());
        let mut t = Fanout::new(vec![Box::new(calls.clone()), Box::new(other.clone())]);
        t.list_begun();
        for (n, u) in [("a", "ua"), ("b", "ub"), ("c", "uc")] {
            t.pod(&pod(n, u));
        }
        t.list_done();
        assert_eq!(calls.take().len(), 4);
        // Between lists: a DELETED of another UID leaves the known pod; one of it forgets it.
        t.gone(&pod("a", "u-old"));
        t.gone(&pod("c", "uc"));
        t.pod(&pod("d", "ud"));
        calls.take();
        // The relist sees only b: a and d vanished (c was already gone), with the UIDs they had.
        t.list_begun();
        t.pod(&pod("b", "ub"));
        t.list_done();
        assert_eq!(
            calls.take(),
            ["gone ns/a ua", "gone ns/d ud", "listed", "pod ns/b ub"]
        );
        // A relist cut short counts for nothing: the next complete one decides.
        t.list_begun();
        t.list_begun();
        t.list_done();
        assert_eq!(calls.take(), ["gone ns/b ub", "listed"]);
        // The other sink got every call too.
        assert_eq!(other.take().len(), 4 + 3 + 4 + 2);
    }
}
