//! The pod cache protocol, version 1, over a unix stream socket: one request line, then one or two reply
//! lines, then the agent closes. Every line is a compact JSON object ending in `\n`.
//!
//! ```text
//! → {"v":1,"namespace":"shop","name":"web-1","uid":"6f1c…"}
//! ← {"v":1,"result":"hit","reduced":"<reduction_id>","pod":{…the reduced pod…}}
//! ← {"v":1,"result":"wait"}   then, within the wait bound, one of the others
//! ← {"v":1,"result":"unknown"} | uid_mismatch | not_synced | too_large | bad_request (+ "error")
//! ```
//!
//! A request without a UID (`"uid":""` or none: plugins before this version asked so when the runtime
//! gave none) is answered `unknown` at once: name and namespace alone are never answered from the cache.
//! `wait` comes at once when the agent has not seen the pod yet and waits for its watch event, so a
//! client can tell a live agent from a hung one within a tight bound. A hit names the agent's reduction
//! ([`reduction_id`]); the client uses it only when that is its own (a rolling update runs a new plugin
//! against the old agent for a while). A request is at most [`MAX_REQUEST`] bytes; a reply at most
//! [`MAX_REPLY`]. A request with another `v` gets `bad_request`. Pure.

use super::Answer;
use crate::json::{self, Object, Value};
use crate::redirect::reduce::{reduction_id, MAX_POD_BYTES};

pub const VERSION: u64 = 1;
/// Largest request line: a namespace (63), a name (253) and a UID fit many times over.
pub const MAX_REQUEST: usize = 1024;
/// Largest reply line: the reduced pod and its envelope.
pub const MAX_REPLY: usize = MAX_POD_BYTES + 256;
/// Longest namespace, name or UID accepted (Kubernetes names are at most 253 bytes).
const MAX_FIELD: usize = 253;

/// What the plugin asks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub namespace: String,
    pub name: String,
    /// `K8S_POD_UID`; "" from an older plugin when the runtime gave none (answered `unknown`).
    pub uid: String,
}

/// The request line.
pub fn encode_request(r: &Request) -> String {
    let mut s = format!("{{\"v\":{VERSION},\"namespace\":");
    json::write_string(&mut s, &r.namespace);
    s.push_str(",\"name\":");
    json::write_string(&mut s, &r.name);
    s.push_str(",\"uid\":");
    json::write_string(&mut s, &r.uid);
    s.push_str("}\n");
    s
}

/// A request line (without its `\n`); the error says what was wrong.
pub fn decode_request(line: &[u8]) -> Result<Request, String> {
    let text = std::str::from_utf8(line).map_err(|_| "request is not UTF-8".to_string())?;
    let o = match json::parse_bounded(text, "request", MAX_REQUEST) {
        Ok(Value::Object(o)) => o,
        Ok(_) => return Err("request is not a JSON object".into()),
        Err(e) => return Err(e.to_string()),
    };
    match o.get("v") {
        Some(Value::Number(json::Number::U64(VERSION))) => {}
        _ => {
            return Err(format!(
                "unsupported protocol version (this agent speaks {VERSION})"
            ))
        }
    }
    let field = |k: &str, required: bool| -> Result<String, String> {
        match o.get(k) {
            Some(Value::String(s)) if s.len() > MAX_FIELD => {
                Err(format!("{k} is longer than {MAX_FIELD} bytes"))
            }
            Some(Value::String(s)) if !(required && s.is_empty()) => Ok(s.clone()),
            None if !required => Ok(String::new()),
            _ => Err(format!("{k} must be a non-empty string")),
        }
    };
    Ok(Request {
        namespace: field("namespace", true)?,
        name: field("name", true)?,
        uid: field("uid", false)?,
    })
}

/// The line a non-hit answer is sent as.
pub fn answer_line(a: Answer, error: Option<&str>) -> Vec<u8> {
    let mut s = format!("{{\"v\":{VERSION},\"result\":\"{}\"", a.name());
    if let Some(e) = error {
        s.push_str(",\"error\":");
        json::write_string(&mut s, e);
    }
    s.push_str("}\n");
    s.into_bytes()
}

/// The hit line for a reduced pod's JSON (rendered once per pod version, then shared by every reply),
/// naming this build's reduction ([`reduction_id`]).
pub fn hit_line(pod_json: &str) -> Vec<u8> {
    let mut s = String::with_capacity(pod_json.len() + 60);
    s.push_str(&format!(
        "{{\"v\":{VERSION},\"result\":\"hit\",\"reduced\":\"{}\",\"pod\":",
        reduction_id()
    ));
    s.push_str(pod_json);
    s.push_str("}\n");
    s.into_bytes()
}

/// The `wait` line.
pub const WAIT_LINE: &[u8] = b"{\"v\":1,\"result\":\"wait\"}\n";

/// A reply as the client reads it.
#[derive(Debug)]
pub enum Reply {
    Hit(Object),
    Wait,
    Miss(Answer),
}

/// A reply line (without its `\n`).
pub fn decode_reply(line: &[u8]) -> Result<Reply, String> {
    let text = std::str::from_utf8(line).map_err(|_| "reply is not UTF-8".to_string())?;
    let mut o = match json::parse_bounded(text, "reply", MAX_REPLY) {
        Ok(Value::Object(o)) => o,
        Ok(_) => return Err("reply is not a JSON object".into()),
        Err(e) => return Err(e.to_string()),
    };
    match o.get("v") {
        Some(Value::Number(json::Number::U64(VERSION))) => {}
        _ => return Err("reply of another protocol version".into()),
    }
    let result = json::str_of(&o, "result").unwrap_or("").to_string();
    match result.as_str() {
        "wait" => Ok(Reply::Wait),
        "hit" if json::str_of(&o, "reduced") != Some(reduction_id()) => Err(format!(
            "hit reduced by another build ({:?}, this one reduces as {:?}): it may lack keys this build reads",
            json::str_of(&o, "reduced").unwrap_or(""),
            reduction_id()
        )),
        "hit" => match o.remove("pod") {
            Some(Value::Object(p)) => Ok(Reply::Hit(p)),
            _ => Err("hit without a pod object".into()),
        },
        other => match Answer::from_name(other) {
            Some(a) if a != Answer::Hit => Ok(Reply::Miss(a)),
            _ => Err(format!("unknown result {other:?}")),
        },
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    pub(in crate::podcache) fn req(ns: &str, name: &str, uid: &str) -> Request {
        Request {
            namespace: ns.into(),
            name: name.into(),
            uid: uid.into(),
        }
    }

    #[test]
    fn requests_round_trip_and_bad_ones_say_why() {
        let r = req("shop", "web-\"1\"", "");
        let line = encode_request(&r);
        assert!(line.ends_with('\n') && line.matches('\n').count() == 1);
        assert_eq!(decode_request(line.trim_end().as_bytes()), Ok(r));
        let r = req("a", "b", "6f1c2a9e-0000-4000-8000-000000000001");
        assert_eq!(
            decode_request(encode_request(&r).trim_end().as_bytes()),
            Ok(r)
        );
        for (bad, why) in [
            (&b"\xff"[..], "UTF-8"),
            (b"garbage", "not valid JSON"),
            (b"[1]", "not a JSON object"),
            (br#"{"namespace":"a","name":"b"}"#, "version"),
            (br#"{"v":2,"namespace":"a","name":"b"}"#, "version"),
            (br#"{"v":1,"namespace":"","name":"b"}"#, "namespace"),
            (br#"{"v":1,"namespace":"a"}"#, "name"),
            (br#"{"v":1,"namespace":"a","name":"b","uid":5}"#, "uid"),
        ] {
            let e = decode_request(bad).unwrap_err();
            assert!(e.contains(why), "{bad:?}: {e}");
        }
        let long = format!(r#"{{"v":1,"namespace":"a","name":"{}"}}"#, "n".repeat(254));
        assert!(decode_request(long.as_bytes())
            .unwrap_err()
            .contains("longer"));
        let huge = format!(r#"{{"v":1,"namespace":"{}"}}"#, "n".repeat(MAX_REQUEST));
        assert!(decode_request(huge.as_bytes()).is_err());
    }

    #[test]
    fn replies_round_trip() {
        let hit = hit_line(r#"{"metadata":{"name":"p"}}"#);
        match decode_reply(&hit[..hit.len() - 1]).unwrap() {
            Reply::Hit(p) => assert_eq!(
                json::to_compact(&Value::Object(p)),
                r#"{"metadata":{"name":"p"}}"#
            ),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            decode_reply(&WAIT_LINE[..WAIT_LINE.len() - 1]),
            Ok(Reply::Wait)
        ));
        for a in Answer::ALL.into_iter().filter(|a| *a != Answer::Hit) {
            let l = answer_line(a, Some("why \"x\""));
            match decode_reply(&l[..l.len() - 1]).unwrap() {
                Reply::Miss(b) => assert_eq!(a, b),
                other => panic!("{other:?}"),
            }
        }
        for bad in [
            &br#"{"v":2,"result":"hit","pod":{}}"#[..],
            br#"{"v":1,"result":"hit","pod":{}}"#,
            br#"{"v":1,"result":"hit","reduced":"0000000000000000","pod":{}}"#,
            br#"{"v":1,"result":"hit"}"#,
            br#"{"v":1,"result":"maybe"}"#,
            b"nope",
        ] {
            assert!(decode_reply(bad).is_err(), "{bad:?}");
        }
    }
}
