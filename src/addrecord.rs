//! The record the plugin sends after each ADD: how long it took, with which rule backend, how it ended,
//! and where the pod object came from ([`Source`]). One small JSON datagram on the installer's log relay
//! socket, sent like the log lines ([`crate::logging`]), carrying the ADD's last log line too:
//!
//! `{"record":"add","seconds":0.0029,"backend":"nftables","result":"redirected","source":"api","reason":"disabled","level":"info","msg":"ADD ..."}`
//!
//! The installer tells it from a log line by its first bytes ([`PREFIX`]) and turns it into
//! `istio_cni_plugin_add_duration_seconds` and `istio_cni_pod_lookups_total` (`install::node::plugin_metrics`),
//! relaying its line if it carries one (a plugin before that sent the line on its own). Decoding accepts
//! only the names below (an unknown reason is [`Miss::Other`]), so a local process writing to the socket
//! cannot create series; fields it does not know are ignored.

use crate::json::{self, Number, Object, Value};
use crate::podcache::{Miss, Source};

/// How every record datagram starts (a log record starts with `{"level":`).
pub const PREFIX: &str = "{\"record\":\"add\"";

/// The rule backend an ADD programmed (`none`: no rules were due).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Iptables,
    Nftables,
    None,
}

impl Backend {
    pub const ALL: [Backend; 3] = [Backend::Iptables, Backend::Nftables, Backend::None];

    pub fn name(self) -> &'static str {
        match self {
            Backend::Iptables => "iptables",
            Backend::Nftables => "nftables",
            Backend::None => "none",
        }
    }
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

impl Outcome {
    pub const ALL: [Outcome; 3] = [Outcome::Redirected, Outcome::Skipped, Outcome::Failed];

    pub fn name(self) -> &'static str {
        match self {
            Outcome::Redirected => "redirected",
            Outcome::Skipped => "skipped",
            Outcome::Failed => "failed",
        }
    }
}

/// One ADD.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AddRecord {
    pub seconds: f64,
    pub backend: Backend,
    pub outcome: Outcome,
    /// `None` when ADD did not need the pod object (or failed before reading it).
    pub source: Option<Source>,
}

impl AddRecord {
    /// The datagram, without a log line.
    pub fn encode(&self) -> String {
        let mut s = String::from(PREFIX);
        s.push_str(&format!(
            ",\"seconds\":{:.6},\"backend\":\"{}\",\"result\":\"{}\"",
            self.seconds.max(0.0),
            self.backend.name(),
            self.outcome.name()
        ));
        match self.source {
            Some(Source::Cache) => s.push_str(",\"source\":\"cache\""),
            Some(Source::Api(m)) => {
                s.push_str(",\"source\":\"api\",\"reason\":");
                json::write_string(&mut s, m.name());
            }
            None => {}
        }
        s.push('}');
        s
    }

    /// A record datagram, or `None` for anything else (a log line, or a record with unknown names).
    pub fn decode(data: &[u8]) -> Option<AddRecord> {
        AddRecord::of(&Self::object(data)?)
    }

    /// The JSON object of a record datagram (`None`: not one, or not JSON).
    pub fn object(data: &[u8]) -> Option<Object> {
        if !data.starts_with(PREFIX.as_bytes()) {
            return None;
        }
        json::parse_object(std::str::from_utf8(data).ok()?, "relayed record").ok()
    }

    /// The record a datagram's object holds, if its names are known.
    pub fn of(o: &Object) -> Option<AddRecord> {
        let seconds = match o.get("seconds") {
            Some(Value::Number(Number::F64(f))) => *f,
            Some(Value::Number(Number::U64(u))) => *u as f64,
            Some(Value::Number(Number::I64(i))) => *i as f64,
            _ => return None,
        };
        let named = |k: &str| json::str_of(o, k);
        let source = match named("source") {
            None => None,
            Some("cache") => Some(Source::Cache),
            Some("api") => Some(Source::Api(Miss::from_name(named("reason").unwrap_or("")))),
            Some(_) => return None,
        };
        Some(AddRecord {
            seconds: if seconds.is_finite() && seconds >= 0.0 {
                seconds
            } else {
                return None;
            },
            backend: Backend::ALL
                .into_iter()
                .find(|b| Some(b.name()) == named("backend"))?,
            outcome: Outcome::ALL
                .into_iter()
                .find(|r| Some(r.name()) == named("result"))?,
            source,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::podcache::Answer;

    #[test]
    fn records_round_trip_and_only_known_names_decode() {
        let r = AddRecord {
            seconds: 0.0029314,
            backend: Backend::Nftables,
            outcome: Outcome::Redirected,
            source: Some(Source::Api(Miss::Disabled)),
        };
        let text = r.encode();
        assert_eq!(
            text,
            r#"{"record":"add","seconds":0.002931,"backend":"nftables","result":"redirected","source":"api","reason":"disabled"}"#
        );
        let back = AddRecord::decode(text.as_bytes()).unwrap();
        assert_eq!(back.source, r.source);
        assert_eq!((back.backend, back.outcome), (r.backend, r.outcome));
        assert!((back.seconds - 0.002931).abs() < 1e-9);
        let skipped = AddRecord {
            seconds: 0.0005,
            backend: Backend::None,
            outcome: Outcome::Skipped,
            source: None,
        };
        assert_eq!(
            AddRecord::decode(skipped.encode().as_bytes()),
            Some(skipped)
        );
        for source in [Source::Cache, Source::Api(Miss::Agent(Answer::NotSynced))] {
            let r = AddRecord {
                source: Some(source),
                ..skipped
            };
            assert_eq!(AddRecord::decode(r.encode().as_bytes()), Some(r));
        }
        // An unknown reason is counted as `other`, never as a new series.
        let odd = br#"{"record":"add","seconds":1,"backend":"iptables","result":"failed","source":"api","reason":"x\"y"}"#;
        assert_eq!(
            AddRecord::decode(odd).unwrap().source,
            Some(Source::Api(Miss::Other))
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
