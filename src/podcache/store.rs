//! The cache's pods and its sync state, and the one decision of what a lookup gets ([`Store::lookup`]).
//! Fed by the node's pod watch (pods, pods gone, list end, watch up/down; [`super::cache`]); read by the
//! server. Pure.

use super::proto::{hit_line, Request};
use super::Answer;
use crate::kube::pod::key;
use crate::redirect::reduce::Reduced;
use std::collections::HashMap;
use std::sync::Arc;

/// One cached pod.
#[derive(Debug)]
struct Entry {
    uid: Box<str>,
    /// A static pod's mirror: the kubelet's UID for it (what a runtime sends); empty otherwise.
    kubelet_uid: Box<str>,
    resource_version: Box<str>,
    /// The whole hit reply line, shared by every reply; `None` when the pod is too large to keep.
    reply: Option<Arc<[u8]>>,
}

impl Entry {
    /// Whether a sandbox of UID `uid` (non-empty) is this pod: its UID, or for a static pod's mirror the
    /// kubelet's UID.
    fn is(&self, uid: &str) -> bool {
        *self.uid == *uid || (!self.kubelet_uid.is_empty() && *self.kubelet_uid == *uid)
    }
}

/// What a lookup gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    /// The hit reply line.
    Hit(Arc<[u8]>),
    Answer(Answer),
    /// Not seen yet (or seen with another UID) while the watch is live: ask again when the store changes
    /// or the wait is over.
    Wait,
}

#[derive(Debug, Default)]
pub struct Store {
    pods: HashMap<String, Entry>,
    /// A list completed (ever): the store holds the node's pods.
    listed: bool,
    /// A watch is open (its head arrived) and has not ended since: a pod not seen yet is worth waiting for.
    watching: bool,
}

impl Store {
    pub fn len(&self) -> usize {
        self.pods.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pods.is_empty()
    }

    pub fn listed(&self) -> bool {
        self.listed
    }

    /// A pod from a list page or an ADDED/MODIFIED event. A pod in a terminal phase is dropped: no
    /// sandbox is set up for it again.
    pub fn apply(&mut self, r: Reduced) {
        let k = key(&r.namespace, &r.name);
        if r.terminal {
            self.pods.remove(&k);
            return;
        }
        if let Some(e) = self.pods.get(&k) {
            if *e.uid == *r.uid && *e.resource_version == *r.resource_version {
                return; // a relist of an unchanged pod: keep the rendered line
            }
        }
        let entry = Entry {
            uid: r.uid.into(),
            kubelet_uid: r.kubelet_uid.into(),
            resource_version: r.resource_version.into(),
            reply: r.body.map(|b| Arc::from(hit_line(&b))),
        };
        self.pods.insert(k, entry);
    }

    /// The pod `key` (`namespace/name`) is gone. Only the pod with that UID goes (an empty UID matches any).
    pub fn delete(&mut self, key: &str, uid: &str) {
        if self
            .pods
            .get(key)
            .is_some_and(|e| uid.is_empty() || *e.uid == *uid)
        {
            self.pods.remove(key);
        }
    }

    /// A list is complete (the pods it did not list are deleted): the store holds the node's pods.
    pub fn list_done(&mut self) {
        self.listed = true;
    }

    /// A watch opened (its head arrived): a pod not seen yet is waited for.
    pub fn watch_open(&mut self) {
        self.watching = true;
    }

    /// The list or watch ended (failed, expired, or closed): nothing is waited for until the next watch.
    pub fn watch_closed(&mut self) {
        self.watching = false;
    }

    /// The answer to `req`; `may_wait` while the wait for an unseen pod is not over.
    pub fn lookup(&self, req: &Request, may_wait: bool) -> Lookup {
        if req.uid.is_empty() {
            // Name and namespace alone name no particular pod: the cache may hold the previous pod of that
            // name (force-deleted, recreated, its events still on their way), whose redirect configuration
            // is not the new pod's. Never answered from the cache; only a plugin older than this agent
            // asks (the plugin reads such a pod from the API server), and treats `unknown` as a miss.
            return Lookup::Answer(Answer::Unknown);
        }
        if !self.listed {
            return Lookup::Answer(Answer::NotSynced);
        }
        let wait = may_wait && self.watching;
        match self.pods.get(&key(&req.namespace, &req.name)) {
            Some(e) if e.is(&req.uid) => match &e.reply {
                Some(line) => Lookup::Hit(line.clone()),
                None => Lookup::Answer(Answer::TooLarge),
            },
            Some(_) if wait => Lookup::Wait,
            Some(_) => Lookup::Answer(Answer::UidMismatch),
            None if wait => Lookup::Wait,
            None => Lookup::Answer(Answer::Unknown),
        }
    }
}

#[cfg(test)]
#[path = "store_tests.rs"]
mod tests;
