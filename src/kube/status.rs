//! API `Status` objects and how errors are classified (transient, gone, permanent).
//!
//! Every API failure becomes `Error::Api { status, reason, message }`: `status` is the HTTP code (or the
//! Status `code`), `0` for transport failures, whose `reason` is one of the `REASON_*` constants below.

use crate::error::Error;
use crate::json::{self, Object, Value};

pub const REASON_REFUSED: &str = "connection refused";
pub const REASON_RESET: &str = "connection reset";
pub const REASON_TIMEOUT: &str = "timeout";
pub const REASON_TLS_VERIFY: &str = "tls verification failed";
pub const REASON_TLS: &str = "tls error";
pub const REASON_DNS: &str = "dns lookup failed";
pub const REASON_CONNECT: &str = "connection failed";
pub const REASON_TRANSPORT: &str = "transport error";
pub const REASON_BAD_RESPONSE: &str = "bad response";

/// A decoded `meta/v1 Status` (or what we could make of a non-Status error body).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    pub code: u16,
    pub reason: String,
    pub message: String,
}

impl Status {
    pub fn into_error(self) -> Error {
        Error::Api {
            status: self.code,
            reason: self.reason,
            message: self.message,
        }
    }
}

/// The standard reason phrase for a code, used when the body carries no Status.
fn phrase(code: u16) -> &'static str {
    match code {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        405 => "MethodNotAllowed",
        409 => "Conflict",
        410 => "Gone",
        415 => "UnsupportedMediaType",
        422 => "Invalid",
        429 => "TooManyRequests",
        500 => "InternalError",
        502 => "BadGateway",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        _ => "Unknown",
    }
}

/// A Status object as found in an error body or a watch ERROR event; `http` is the HTTP code when known.
pub fn from_object(o: &Object, http: u16) -> Status {
    let code = match o.get("code") {
        Some(Value::Number(json::Number::U64(c))) if *c <= u16::MAX as u64 && *c > 0 => *c as u16,
        _ => http,
    };
    let reason = json::str_of(o, "reason")
        .filter(|r| !r.is_empty())
        .unwrap_or(phrase(code))
        .to_string();
    let message = json::str_of(o, "message").unwrap_or("").to_string();
    Status {
        code,
        reason,
        message,
    }
}

/// Decodes an error response. A body that is not a Status still yields the HTTP code, the standard reason
/// and the start of the body (control characters removed) as the message.
pub fn decode(http: u16, body: &[u8]) -> Status {
    let text = String::from_utf8_lossy(body);
    if let Ok(o) = json::parse_object(&text, "status") {
        if json::str_of(&o, "kind") == Some("Status") || o.contains_key("code") {
            let mut s = from_object(&o, http);
            s.code = http; // the HTTP code is what the transport saw; keep it authoritative
            return s;
        }
    }
    let snippet: String = text
        .chars()
        .filter(|c| !c.is_control() || *c == ' ')
        .take(200)
        .collect();
    Status {
        code: http,
        reason: phrase(http).to_string(),
        message: snippet.trim().to_string(),
    }
}

/// A transport failure (no HTTP status).
pub fn transport(reason: &str, message: impl Into<String>) -> Error {
    Error::Api {
        status: 0,
        reason: reason.to_string(),
        message: message.into(),
    }
}

/// The reason of a successful answer that is not the object asked for ([`not_the_object`]).
pub const REASON_NOT_THE_POD: &str = "not the pod asked for";

/// A 2xx answer that is not the object asked for (`message` says what it was instead,
/// [`super::pod::not_the_pod`]): an API failure like any other (CNI code 101), never transient by itself.
pub fn not_the_object(message: String) -> Error {
    Error::Api {
        status: 200,
        reason: REASON_NOT_THE_POD.to_string(),
        message,
    }
}

/// Questions callers ask about an error from this client.
pub trait ApiErrorExt {
    /// The HTTP status of an API error (0 for transport errors); `None` if not an API error.
    fn api_status(&self) -> Option<u16>;
    /// The API reason (`NotFound`, `Expired`, ...) or transport reason (`connection refused`, ...).
    fn api_reason(&self) -> Option<&str>;
    /// 410 Gone / Expired: the resource version is too old; relist.
    fn is_gone(&self) -> bool {
        self.api_status() == Some(410)
    }
    fn is_not_found(&self) -> bool {
        self.api_status() == Some(404)
    }
    fn is_conflict(&self) -> bool {
        self.api_status() == Some(409)
    }
    /// Worth retrying: refused/reset connections, timeouts, other transport failures except TLS
    /// verification, 5xx and 429.
    fn is_transient(&self) -> bool {
        match self.api_status() {
            Some(0) => self.api_reason() != Some(REASON_TLS_VERIFY),
            Some(429) => true,
            Some(s) => (500..600).contains(&s),
            None => false,
        }
    }
}

impl ApiErrorExt for Error {
    fn api_status(&self) -> Option<u16> {
        match self.root() {
            Error::Api { status, .. } => Some(*status),
            _ => None,
        }
    }
    fn api_reason(&self) -> Option<&str> {
        match self.root() {
            Error::Api { reason, .. } => Some(reason),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Context;

    #[test]
    fn decodes_a_status_body() {
        let body = br#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"pods \"x\" not found","reason":"NotFound","details":{"name":"x","kind":"pods"},"code":404}"#;
        let s = decode(404, body);
        assert_eq!(
            s,
            Status {
                code: 404,
                reason: "NotFound".into(),
                message: "pods \"x\" not found".into()
            }
        );
        let e = s.into_error();
        assert!(e.is_not_found() && !e.is_transient());
        assert_eq!(e.cni_code(), 101);
        assert_eq!(
            e.to_string(),
            "kubernetes API answered 404 NotFound: pods \"x\" not found"
        );
    }

    #[test]
    fn non_status_bodies_keep_code_and_a_clean_snippet() {
        let s = decode(503, b"<html>\n\x1b[31mupstream down</html>");
        assert_eq!(s.code, 503);
        assert_eq!(s.reason, "ServiceUnavailable");
        assert!(!s.message.contains('\x1b') && !s.message.contains('\n'));
        assert!(s.into_error().is_transient());
        let s = decode(401, b"");
        assert_eq!((s.code, s.reason.as_str()), (401, "Unauthorized"));
    }

    #[test]
    fn status_without_reason_gets_the_standard_one() {
        let s = decode(
            410,
            br#"{"kind":"Status","code":410,"message":"too old resource version: 1 (5)"}"#,
        );
        assert_eq!(s.reason, "Gone");
        assert!(s.into_error().is_gone());
    }

    #[test]
    fn classification_sees_through_context() {
        let e: crate::Result<()> = Err(transport(REASON_REFUSED, "dial 127.0.0.1:1"));
        let e = e.context("get pod ns/p").unwrap_err();
        assert!(e.is_transient());
        assert_eq!(e.api_status(), Some(0));
        assert!(!transport(REASON_TLS_VERIFY, "x").is_transient());
        for (code, transient) in [
            (429, true),
            (500, true),
            (504, true),
            (401, false),
            (403, false),
            (409, false),
        ] {
            let e = decode(code, b"").into_error();
            assert_eq!(e.is_transient(), transient, "{code}");
        }
        assert!(!Error::other("x").is_transient());
    }
}
