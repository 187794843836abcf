//! The structured record the plugin relays after each ADD: how long it took, with which rule backend, how
//! it ended, and where the pod object came from. One small JSON datagram on the installer's log relay
//! socket, sent like the log lines (non-blocking; dropped when nobody listens or the queue is full, never
//! an error for ADD):
//!
//! `{"record":"add","seconds":0.0029,"backend":"nftables","result":"redirected","source":"api","reason":"disabled"}`
//!
//! The installer tells it from a log line by its first bytes ([`PREFIX`]) and turns it into
//! `istio_cni_plugin_add_duration_seconds` and `istio_cni_pod_lookups_total`
//! ([`crate::install::plugin_metrics`]). Decoding accepts only the names below, so a local process writing
//! to the socket cannot create series.

use crate::json::{self, Number, Value};

/// How every record datagram starts (a log record starts with `{"level":`).
pub const PREFIX: &str = "{\"record\":\"add\"";

/// The rule backend an ADD programmed (`none`: no rules were due).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Iptables,
    Nftables,
    None,
}

/// How an ADD ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Rules programmed.
    Redirected,
    /// Passed through without rules (excluded, not a Kubernetes pod, no sidecar, ...).
    Skipped,
    /// ADD failed.
    Failed,
}

/// Where the pod object came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    Cache,
    /// The API server, and why not the cache.
    Api(&'static str),
}

/// Why a pod was read from the API server: the pod cache's miss reasons ([`crate::podcache::Miss`], snake_case),
/// `other` for anything else.
pub const API_REASONS: [&str; 13] = [
    "disabled",
    "no_socket",
    "refused",
    "busy",
    "timeout",
    "bad_reply",
    "socket_error",
    "unknown",
    "uid_mismatch",
    "not_synced",
    "too_large",
    "bad_request",
    "other",
];

pub const BACKENDS: [(Backend, &str); 3] = [
    (Backend::Iptables, "iptables"),
    (Backend::Nftables, "nftables"),
    (Backend::None, "none"),
];

pub const OUTCOMES: [(Outcome, &str); 3] = [
    (Outcome::Redirected, "redirected"),
    (Outcome::Skipped, "skipped"),
    (Outcome::Failed, "failed"),
];

fn name_of<T: PartialEq + Copy>(table: &[(T, &'static str)], v: T) -> &'static str {
    table
        .iter()
        .find(|(x, _)| *x == v)
        .map(|(_, n)| *n)
        .unwrap_or("")
}

fn value_of<T: Copy>(table: &[(T, &'static str)], name: &str) -> Option<T> {
    table.iter().find(|(_, n)| *n == name).map(|(x, _)| *x)
}

/// The reason as one of [`API_REASONS`] (`other` when unknown).
pub fn api_reason(name: &str) -> &'static str {
    API_REASONS
        .iter()
        .find(|r| **r == name)
        .copied()
        .unwrap_or("other")
}

/// One ADD.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AddRecord {
    pub seconds: f64,
    pub backend: Backend,
    pub outcome: Outcome,
    /// `None` when ADD did not need the pod object (or failed before reading it).
    pub lookup: Option<Lookup>,
}

impl AddRecord {
    pub fn backend_name(&self) -> &'static str {
        name_of(&BACKENDS, self.backend)
    }

    pub fn outcome_name(&self) -> &'static str {
        name_of(&OUTCOMES, self.outcome)
    }

    /// The datagram.
    pub fn encode(&self) -> String {
        let mut s = String::from(PREFIX);
        s.push_str(&format!(
            ",\"seconds\":{:.6},\"backend\":\"{}\",\"result\":\"{}\"",
            self.seconds.max(0.0),
            self.backend_name(),
            self.outcome_name()
        ));
        match self.lookup {
            Some(Lookup::Cache) => s.push_str(",\"source\":\"cache\""),
            Some(Lookup::Api(r)) => {
                s.push_str(",\"source\":\"api\",\"reason\":");
                json::write_string(&mut s, api_reason(r));
            }
            None => {}
        }
        s.push('}');
        s
    }

    /// A record datagram, or `None` for anything else (a log line, or a record with unknown names).
    pub fn decode(data: &[u8]) -> Option<AddRecord> {
        if !data.starts_with(PREFIX.as_bytes()) {
            return None;
        }
        let o = json::parse_object(std::str::from_utf8(data).ok()?, "relayed record").ok()?;
        let seconds = match o.get("seconds") {
            Some(Value::Number(Number::F64(f))) => *f,
            Some(Value::Number(Number::U64(u))) => *u as f64,
            Some(Value::Number(Number::I64(i))) => *i as f64,
            _ => return None,
        };
        let lookup = match json::str_of(&o, "source") {
            None => None,
            Some("cache") => Some(Lookup::Cache),
            Some("api") => Some(Lookup::Api(api_reason(
                json::str_of(&o, "reason").unwrap_or(""),
            ))),
            Some(_) => return None,
        };
        Some(AddRecord {
            seconds: if seconds.is_finite() && seconds >= 0.0 {
                seconds
            } else {
                return None;
            },
            backend: value_of(&BACKENDS, json::str_of(&o, "backend")?)?,
            outcome: value_of(&OUTCOMES, json::str_of(&o, "result")?)?,
            lookup,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::podcache::{Answer, Miss};

    #[test]
    fn every_cache_miss_reason_is_a_label_value() {
        let mut misses = vec![
            Miss::Disabled,
            Miss::NoSocket,
            Miss::Refused,
            Miss::Busy,
            Miss::Timeout,
            Miss::BadReply,
            Miss::SocketError,
        ];
        misses.extend(
            Answer::ALL
                .into_iter()
                .filter(|a| *a != Answer::Hit)
                .map(Miss::Agent),
        );
        for m in misses {
            // Exhaustive: a new kind of miss fails to compile here until it is listed above.
            match m {
                Miss::Disabled
                | Miss::NoSocket
                | Miss::Refused
                | Miss::Busy
                | Miss::Timeout
                | Miss::BadReply
                | Miss::SocketError
                | Miss::Agent(_) => {}
            }
            assert_eq!(api_reason(m.name()), m.name(), "{m:?}");
        }
    }

    #[test]
    fn records_round_trip_and_only_known_names_decode() {
        let r = AddRecord {
            seconds: 0.0029314,
            backend: Backend::Nftables,
            outcome: Outcome::Redirected,
            lookup: Some(Lookup::Api("disabled")),
        };
        let text = r.encode();
        assert_eq!(
            text,
            r#"{"record":"add","seconds":0.002931,"backend":"nftables","result":"redirected","source":"api","reason":"disabled"}"#
        );
        let back = AddRecord::decode(text.as_bytes()).unwrap();
        assert_eq!(back.lookup, r.lookup);
        assert_eq!((back.backend, back.outcome), (r.backend, r.outcome));
        assert!((back.seconds - 0.002931).abs() < 1e-9);
        let skipped = AddRecord {
            seconds: 0.0005,
            backend: Backend::None,
            outcome: Outcome::Skipped,
            lookup: None,
        };
        assert_eq!(
            AddRecord::decode(skipped.encode().as_bytes()),
            Some(skipped)
        );
        let cached = AddRecord {
            lookup: Some(Lookup::Cache),
            ..skipped
        };
        assert_eq!(AddRecord::decode(cached.encode().as_bytes()), Some(cached));
        // An unknown reason is counted as `other`, never as a new series.
        let odd = br#"{"record":"add","seconds":1,"backend":"iptables","result":"failed","source":"api","reason":"x\"y"}"#;
        assert_eq!(
            AddRecord::decode(odd).unwrap().lookup,
            Some(Lookup::Api("other"))
        );
        for bad in [
            &br#"{"level":"info","msg":"ADD x"}"#[..],
            br#"{"record":"add","seconds":1,"backend":"ebpf","result":"failed"}"#,
            br#"{"record":"add","seconds":-1,"backend":"none","result":"failed"}"#,
            br#"{"record":"add","seconds":"1","backend":"none","result":"failed"}"#,
            br#"{"record":"add","seconds":1,"backend":"none","result":"failed","source":"disk"}"#,
            br#"{"record":"add","seconds":1,"backend":"none""#,
        ] {
            assert_eq!(
                AddRecord::decode(bad),
                None,
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
