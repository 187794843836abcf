//! The cache's pods and its sync state, and the one decision of what a lookup gets ([`Store::lookup`]).
//! Fed by the node's pod watch (pods, pods gone, list end, watch up/down; [`super::cache`]); read by the
//! server. Pure.

use super::proto::{hit_line, Request};
use super::Answer;
use crate::kube::pod::key;
use crate::redirect::reduce::Reduced;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long the open watch may stay silent before lookups by name stop being answered from it. A watch
/// hears a BOOKMARK from kube-apiserver every minute once the pods' resourceVersion has moved past the
/// one it started at (on a quiet cluster the first one came 1-2 min after the start, measured on 1.34:
/// name-only lookups then go to the API server meanwhile). One silent for longer may be dead without a
/// FIN or RST having reached us (TCP keepalive, [`crate::kube::tcp::KEEPALIVE`], ends such a connection
/// within about a minute) or its reader stuck, and meanwhile a pod deleted and recreated under the same
/// name would still be answered as the old one. By UID nothing changes: a UID names one pod.
pub const QUIET_LIMIT: Duration = Duration::from_secs(90);

/// One cached pod.
#[derive(Debug)]
struct Entry {
    uid: Box<str>,
    /// A static pod's mirror: the kubelet's UID for it (what a runtime sends); empty otherwise.
    kubelet_uid: Box<str>,
    resource_version: Box<str>,
    /// `metadata.deletionTimestamp` is set: by name alone it is not the answer ([`Store::lookup`]).
    deleting: bool,
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
    /// The open watch has caught up with the server ([`crate::kube::podwatch::catch_up`]): it delivered
    /// every change up to a consistent read made after it was requested. Only then do name and namespace
    /// alone get an answer.
    live: bool,
    /// It was live once.
    was_live: bool,
    /// When the open watch last delivered something (or caught up).
    heard: Option<Instant>,
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
            deleting: r.deleting,
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

    /// A watch opened (its head arrived). What it missed may still be on its way: not live yet.
    pub fn watch_open(&mut self) {
        self.watching = true;
    }

    /// The open watch has caught up with the server (`at`): lookups by name are answered from now on, while
    /// it is heard from ([`QUIET_LIMIT`]). Whether this is the first time.
    pub fn caught_up(&mut self, at: Instant) -> bool {
        self.heard = Some(at);
        self.live = self.watching;
        let first = self.live && !self.was_live;
        self.was_live |= self.live;
        first
    }

    /// The open watch delivered something at `at`.
    pub fn heard(&mut self, at: Instant) {
        self.heard = Some(at);
    }

    /// The list or watch ended (failed, expired, or closed): neither waiting nor answering by name until
    /// the next watch has caught up.
    pub fn watch_closed(&mut self) {
        self.watching = false;
        self.live = false;
    }

    /// The answer to `req` at `now`; `may_wait` while the wait for an unseen pod is not over.
    pub fn lookup(&self, req: &Request, may_wait: bool, now: Instant) -> Lookup {
        if !self.listed {
            return Lookup::Answer(Answer::NotSynced);
        }
        let by_name = req.uid.is_empty();
        let heard = self
            .heard
            .is_some_and(|h| now.saturating_duration_since(h) < QUIET_LIMIT);
        if by_name && !(self.live && heard) {
            // Name and namespace alone are trusted only from a watch that has caught up and is still heard
            // from: otherwise the cache may hold the previous pod of that name (recreated while no watch
            // was open, or while this one was silently dead).
            return Lookup::Answer(Answer::NotSynced);
        }
        let wait = may_wait && self.watching;
        match self.pods.get(&key(&req.namespace, &req.name)) {
            // By name alone, a pod being deleted is not the answer: a sandbox set up under its name now is
            // for the pod that replaces it (a StatefulSet's), whose events are still on their way. Its
            // redirect configuration is not the new pod's; treated as not seen.
            Some(e) if by_name && e.deleting && wait => Lookup::Wait,
            Some(e) if by_name && e.deleting => Lookup::Answer(Answer::Unknown),
            Some(e) if by_name || e.is(&req.uid) => match &e.reply {
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
