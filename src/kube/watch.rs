//! Watch streams: newline-delimited `{"type":…,"object":…}` events.
//!
//! `ERROR` events are not yielded as events: the stream yields `Err(Error::Api{..})` built from the event's
//! Status and then ends. A 410 (`Expired`/`Gone`), as an HTTP status or an `ERROR` event, satisfies
//! [`super::ApiErrorExt::is_gone`]: the caller must relist. A normal end of the stream (server timeout)
//! is `None`; re-watch from [`WatchStream::resource_version`].

use std::io::{BufRead, BufReader, Read};

use super::status;
use crate::error::{Error, Result};
use crate::json::{self, Object, Value};

/// Largest single event line we accept.
pub const MAX_EVENT: usize = 16 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    Added,
    Modified,
    Deleted,
    /// A progress marker: the object carries only `metadata.resourceVersion` (and annotations).
    Bookmark,
}

#[derive(Debug, Clone)]
pub struct WatchEvent {
    pub kind: EventKind,
    pub object: Object,
}

impl WatchEvent {
    /// `object.metadata.resourceVersion`, if any.
    pub fn resource_version(&self) -> Option<&str> {
        json::obj_of(&self.object, "metadata").and_then(|m| json::str_of(m, "resourceVersion"))
    }
}

/// Decodes one event line. `ERROR` events become the `Err` of their Status.
pub fn decode_event(line: &str) -> Result<WatchEvent> {
    let o = json::parse_object(line, "watch event")?;
    let kind = json::str_of(&o, "type")
        .ok_or_else(|| Error::Decode("watch event: missing \"type\"".into()))?;
    let object = match o.get("object") {
        Some(Value::Object(obj)) => obj.clone(),
        _ => {
            return Err(Error::Decode(format!(
                "watch event {kind}: missing \"object\""
            )))
        }
    };
    let kind = match kind {
        "ADDED" => EventKind::Added,
        "MODIFIED" => EventKind::Modified,
        "DELETED" => EventKind::Deleted,
        "BOOKMARK" => EventKind::Bookmark,
        "ERROR" => {
            let st = status::from_object(&object, 500);
            return Err(st.into_error());
        }
        other => {
            return Err(Error::Decode(format!(
                "watch event: unknown type {other:?}"
            )))
        }
    };
    Ok(WatchEvent { kind, object })
}

/// An open watch: an iterator of events. After any `Err` the stream is finished.
pub struct WatchStream {
    reader: BufReader<Box<dyn Read + Send>>,
    done: bool,
    resource_version: Option<String>,
    what: String,
}

impl WatchStream {
    pub fn new(reader: Box<dyn Read + Send>, start_rv: Option<String>, what: String) -> Self {
        WatchStream {
            reader: BufReader::with_capacity(64 << 10, reader),
            done: false,
            resource_version: start_rv.filter(|r| !r.is_empty()),
            what,
        }
    }

    /// The resource version of the last event seen (bookmarks included), or the one the watch started at.
    pub fn resource_version(&self) -> Option<&str> {
        self.resource_version.as_deref()
    }

    fn read_line(&mut self) -> std::io::Result<Option<String>> {
        let mut buf = Vec::new();
        loop {
            let n = (&mut self.reader)
                .take((MAX_EVENT + 1 - buf.len()) as u64)
                .read_until(b'\n', &mut buf)?;
            if buf.len() > MAX_EVENT {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("watch event larger than {MAX_EVENT} bytes"),
                ));
            }
            // A line ends at a newline or at the end of the stream; blank lines are skipped.
            if n == 0 || buf.ends_with(b"\n") {
                if !buf.iter().all(u8::is_ascii_whitespace) {
                    return Ok(Some(String::from_utf8_lossy(&buf).into_owned()));
                }
                if n == 0 {
                    return Ok(None);
                }
                buf.clear();
            }
        }
    }
}

impl std::fmt::Debug for WatchStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "WatchStream({}, rv {:?})",
            self.what, self.resource_version
        )
    }
}

impl Iterator for WatchStream {
    type Item = Result<WatchEvent>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let line = match self.read_line() {
            Ok(Some(l)) => l,
            Ok(None) => {
                self.done = true;
                return None;
            }
            Err(e) => {
                self.done = true;
                use std::io::ErrorKind as K;
                let reason = match e.kind() {
                    K::InvalidData => status::REASON_BAD_RESPONSE,
                    K::TimedOut | K::WouldBlock => status::REASON_TIMEOUT,
                    _ => status::REASON_RESET,
                };
                return Some(Err(status::transport(
                    reason,
                    format!("{}: {e}", self.what),
                )));
            }
        };
        match decode_event(line.trim()) {
            Ok(ev) => {
                if let Some(rv) = ev.resource_version() {
                    self.resource_version = Some(rv.to_string());
                }
                Some(Ok(ev))
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::ApiErrorExt;
    use super::*;

    fn stream(text: &'static str) -> WatchStream {
        WatchStream::new(Box::new(text.as_bytes()), Some("5".into()), "watch".into())
    }

    #[test]
    fn decodes_events_and_tracks_the_resource_version() {
        let mut s = stream(concat!(
            r#"{"type":"ADDED","object":{"kind":"Pod","metadata":{"name":"a","resourceVersion":"6"}}}"#,
            "\n\n",
            r#"{"type":"BOOKMARK","object":{"kind":"Pod","metadata":{"resourceVersion":"9"}}}"#,
            "\n",
            r#"{"type":"DELETED","object":{"metadata":{"name":"a","resourceVersion":"10"}}}"#,
        ));
        assert_eq!(s.resource_version(), Some("5"));
        let e = s.next().unwrap().unwrap();
        assert_eq!(e.kind, EventKind::Added);
        assert_eq!(e.resource_version(), Some("6"));
        assert_eq!(s.next().unwrap().unwrap().kind, EventKind::Bookmark);
        assert_eq!(s.resource_version(), Some("9"));
        assert_eq!(s.next().unwrap().unwrap().kind, EventKind::Deleted);
        assert_eq!(s.resource_version(), Some("10"));
        assert!(s.next().is_none());
    }

    #[test]
    fn error_event_410_is_gone_and_ends_the_stream() {
        let mut s = stream(concat!(
            r#"{"type":"ERROR","object":{"kind":"Status","status":"Failure","message":"too old resource version: 1 (7)","reason":"Expired","code":410}}"#,
            "\n",
            r#"{"type":"ADDED","object":{"metadata":{}}}"#,
            "\n"
        ));
        let e = s.next().unwrap().unwrap_err();
        assert!(e.is_gone(), "{e}");
        assert!(e.to_string().contains("Expired"), "{e}");
        assert!(s.next().is_none());
    }

    #[test]
    fn malformed_events_are_errors() {
        for line in [
            "not json",
            r#"{"type":"ADDED"}"#,
            r#"{"object":{}}"#,
            r#"{"type":"WEIRD","object":{}}"#,
        ] {
            let e = decode_event(line).unwrap_err();
            assert_eq!(e.cni_code(), 6, "{line}: {e}");
        }
        let e = decode_event(
            r#"{"type":"ERROR","object":{"kind":"Status","code":500,"message":"boom"}}"#,
        )
        .unwrap_err();
        assert!(e.is_transient() && !e.is_gone());
    }
}
