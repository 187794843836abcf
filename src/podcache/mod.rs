//! The node-local pod cache: `install-cni` keeps this node's pods (one LIST + WATCH with
//! `fieldSelector=spec.nodeName=<node>`, [`crate::kube::podwatch`], shared with the in-process repair
//! agent), reduced to what the decision reads ([`crate::redirect::reduce`]), in a [`store`] the watch fills ([`cache`], the
//! watch's sink) and a unix stream socket in the run dir serves (`pod-cache.sock`, [`server`]). The plugin asks it first ([`client`]) and falls back to the API GET on
//! any miss, so the API server is off the pod-start path while it answers and nothing changes when it
//! does not.
//!
//! Safety rules (fail closed is unchanged):
//! - a hit needs a completed list and the pod's UID equal to `K8S_POD_UID`. Without a UID from the
//!   runtime the cache is not asked ([`Miss::NoUid`]): name and namespace alone name no particular pod,
//!   and a watch behind the server may still hold the previous pod of that name (force-deleted with
//!   `--grace-period=0`, so never seen being deleted, and recreated by its StatefulSet), whose
//!   `traffic.sidecar.istio.io/*` configuration is not the new pod's; an older plugin's by-name request
//!   is answered `unknown`;
//! - a pod the cache has not seen (or seen with another UID) is waited for briefly
//!   ([`server::UNSEEN_WAIT`]) while a watch is open, then answered `unknown` / `uid_mismatch`, and the
//!   plugin reads it from the API server: the cache never decides "no sidecar" for a pod it has not seen;
//! - the plugin uses a hit only if it is the pod it asked for (namespace, name and UID);
//! - the cached form is the reduced pod object, so a hit runs exactly the decision code an API GET runs.
//!
//! The request/reply protocol is in [`proto`]; the counters on the installer's `/metrics` in [`metrics`].

pub mod cache;
pub mod client;
pub mod metrics;
pub mod proto;
pub mod server;
pub mod store;

/// How the agent answered a lookup: the `result` label of `istio_cni_pod_cache_lookups_total`, and the
/// `result` of a reply ([`proto`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// The pod, reduced.
    Hit,
    /// Not in the cache (after the wait for its watch event); also every request without a UID (a plugin
    /// older than this agent asking by name alone: never answered from the cache).
    Unknown,
    /// In the cache with another UID than the runtime's `K8S_POD_UID` (a pod recreated under its name).
    UidMismatch,
    /// No completed list yet.
    NotSynced,
    /// The pod's reduced object is over [`crate::redirect::reduce::MAX_POD_BYTES`]: the API serves it.
    TooLarge,
    /// The request could not be read.
    BadRequest,
}

impl Answer {
    pub const ALL: [Answer; 6] = [
        Answer::Hit,
        Answer::Unknown,
        Answer::UidMismatch,
        Answer::NotSynced,
        Answer::TooLarge,
        Answer::BadRequest,
    ];

    /// The stable snake_case name (metric label, reply field).
    pub const fn name(self) -> &'static str {
        match self {
            Answer::Hit => "hit",
            Answer::Unknown => "unknown",
            Answer::UidMismatch => "uid_mismatch",
            Answer::NotSynced => "not_synced",
            Answer::TooLarge => "too_large",
            Answer::BadRequest => "bad_request",
        }
    }

    pub fn from_name(s: &str) -> Option<Answer> {
        Answer::ALL.into_iter().find(|a| a.name() == s)
    }
}

/// Why the plugin read the pod from the API server instead of the cache. The names are stable snake_case,
/// for the plugin's log line and the records it relays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Miss {
    /// `pod_cache: false` in the plugin's configuration (`POD_CACHE_ENABLED=false`): the socket is never
    /// touched.
    Disabled,
    /// No socket in the run dir (no agent, or an agent with the cache off).
    NoSocket,
    /// The socket is there but nobody listens (the agent was killed).
    Refused,
    /// The agent's listen backlog is full.
    Busy,
    /// No reply within the bound ([`client::Bounds`]).
    Timeout,
    /// A reply we could not read (another protocol version, garbage, closed early).
    BadReply,
    /// Any other socket error (permissions, ...).
    SocketError,
    /// The agent's answer.
    Agent(Answer),
    /// The runtime gave no `K8S_POD_UID` (podman, older runtimes): name and namespace alone name no
    /// particular pod, and the cache may still hold the previous pod of that name (force-deleted and
    /// recreated, its events not delivered yet), so the agent is not asked and the API server answers for
    /// the pod of that name now. Plugins before this name reported `name_only_skip` for the skips among
    /// them; an ADD record carrying it is counted here.
    NoUid,
    /// A reason this version does not know: an ADD record from another version of the plugin
    /// ([`crate::addrecord`]) is counted under `other`, never as a new series. The plugin never reports it.
    Other,
}

impl Miss {
    /// Every miss (a hit is not one).
    pub const ALL: [Miss; 14] = [
        Miss::Disabled,
        Miss::NoSocket,
        Miss::Refused,
        Miss::Busy,
        Miss::Timeout,
        Miss::BadReply,
        Miss::SocketError,
        Miss::Agent(Answer::Unknown),
        Miss::Agent(Answer::UidMismatch),
        Miss::Agent(Answer::NotSynced),
        Miss::Agent(Answer::TooLarge),
        Miss::Agent(Answer::BadRequest),
        Miss::NoUid,
        Miss::Other,
    ];

    pub const fn name(self) -> &'static str {
        match self {
            Miss::Disabled => "disabled",
            Miss::NoSocket => "no_socket",
            Miss::Refused => "refused",
            Miss::Busy => "busy",
            Miss::Timeout => "timeout",
            Miss::BadReply => "bad_reply",
            Miss::SocketError => "socket_error",
            Miss::Agent(a) => a.name(),
            Miss::NoUid => "no_uid",
            Miss::Other => "other",
        }
    }

    /// The miss of that name; `other` for a name this version does not know.
    pub fn from_name(s: &str) -> Miss {
        match s {
            "name_only_skip" => Miss::NoUid,
            s => Miss::ALL
                .into_iter()
                .find(|m| m.name() == s)
                .unwrap_or(Miss::Other),
        }
    }
}

/// Where the plugin's pod object came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Cache,
    /// The API server, and why not the cache.
    Api(Miss),
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Cache => f.write_str("cache"),
            Source::Api(Miss::Disabled) => f.write_str("api: pod cache disabled"),
            Source::Api(m) => write!(f, "api: cache miss: {}", m.name()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_stable_snake_case_and_round_trip() {
        let names: Vec<&str> = Answer::ALL.iter().map(|a| a.name()).collect();
        assert_eq!(
            names,
            [
                "hit",
                "unknown",
                "uid_mismatch",
                "not_synced",
                "too_large",
                "bad_request"
            ]
        );
        for a in Answer::ALL {
            assert_eq!(Answer::from_name(a.name()), Some(a));
        }
        assert_eq!(Answer::from_name("wait"), None);
        for m in Miss::ALL {
            assert_eq!(Miss::from_name(m.name()), m);
        }
        // A hit is no miss; a name this version does not know is `other`.
        assert_eq!(Miss::from_name("hit"), Miss::Other);
        // An older plugin's by-name skip is a lookup without a UID.
        assert_eq!(Miss::from_name("name_only_skip"), Miss::NoUid);
        assert_eq!(Miss::from_name("x\"y"), Miss::Other);
        for (s, text) in [
            (Source::Cache, "cache"),
            (
                Source::Api(Miss::Agent(Answer::NotSynced)),
                "api: cache miss: not_synced",
            ),
            (Source::Api(Miss::Refused), "api: cache miss: refused"),
            (Source::Api(Miss::Disabled), "api: pod cache disabled"),
        ] {
            assert_eq!(s.to_string(), text);
        }
    }
}

#[cfg(test)]
#[path = "wire_tests.rs"]
mod wire_tests;
