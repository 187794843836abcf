//! The one error type of the project, and its mapping to CNI error codes.
//!
//! Every fallible function returns [`Result`]. Messages are lower-case, context first, then the cause
//! ("read kubeconfig /var/run/istio-cni/istio-cni-kubeconfig: No such file or directory"), and name the
//! variable, field, annotation or file that was wrong, so a tired operator can act on them.

use std::fmt;

/// Everything that can go wrong, by what the operator has to do about it.
#[derive(Debug)]
pub enum Error {
    /// CNI code 1: the configuration's `cniVersion` is not one we support.
    IncompatibleVersion(String),
    /// CNI code 2: a field we understand has a value we do not support.
    UnsupportedField { field: String, value: String },
    /// CNI code 4: an environment variable is missing or invalid; names it.
    InvalidEnv { var: String, reason: String },
    /// CNI code 5: an I/O operation failed; `what` names the file or operation.
    Io {
        what: String,
        source: std::io::Error,
    },
    /// CNI code 6: input could not be decoded (JSON, CNI_ARGS, ...).
    Decode(String),
    /// CNI code 7: the network configuration is invalid.
    InvalidConfig(String),
    /// CNI code 50: the plugin is not ready to serve ADD (STATUS).
    NotAvailable(String),
    /// Code 100: a pod annotation (or proxy setting) has an invalid value.
    Annotation {
        key: String,
        value: String,
        reason: String,
    },
    /// Code 101: the Kubernetes API answered with an error or could not be reached.
    Api {
        status: u16,
        reason: String,
        message: String,
    },
    /// Code 102: an external command failed.
    Exec {
        cmd: String,
        status: String,
        stderr: String,
    },
    /// Code 103: applying or verifying redirection rules failed (CHECK lists what is missing).
    Rules(String),
    /// Code 999: anything else.
    Other(String),
    /// Context wrapped around an underlying error; the code is the source's.
    Context { context: String, source: Box<Error> },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn other(msg: impl Into<String>) -> Error {
        Error::Other(msg.into())
    }

    pub fn io(what: impl Into<String>, source: std::io::Error) -> Error {
        Error::Io {
            what: what.into(),
            source,
        }
    }

    pub fn env(var: impl Into<String>, reason: impl Into<String>) -> Error {
        Error::InvalidEnv {
            var: var.into(),
            reason: reason.into(),
        }
    }

    pub fn config(msg: impl Into<String>) -> Error {
        Error::InvalidConfig(msg.into())
    }

    /// The innermost error, skipping context layers.
    pub fn root(&self) -> &Error {
        match self {
            Error::Context { source, .. } => source.root(),
            e => e,
        }
    }

    /// The CNI error code (spec §"Error"); codes 100+ are ours.
    pub fn cni_code(&self) -> u32 {
        self.code_and_headline().0
    }

    /// A short headline for the CNI `msg` field; the full chain goes to `details`.
    pub fn headline(&self) -> &'static str {
        self.code_and_headline().1
    }

    fn code_and_headline(&self) -> (u32, &'static str) {
        match self.root() {
            Error::IncompatibleVersion(_) => (1, "incompatible CNI versions"),
            Error::UnsupportedField { .. } => (2, "unsupported field"),
            Error::InvalidEnv { .. } => (4, "invalid environment variable"),
            Error::Io { .. } => (5, "I/O failure"),
            Error::Decode(_) => (6, "decoding failure"),
            Error::InvalidConfig(_) => (7, "invalid network configuration"),
            Error::NotAvailable(_) => (50, "plugin not available"),
            Error::Annotation { .. } => (100, "invalid pod annotation"),
            Error::Api { .. } => (101, "kubernetes API error"),
            Error::Exec { .. } => (102, "command failed"),
            Error::Rules(_) => (103, "redirection rules"),
            Error::Other(_) | Error::Context { .. } => (999, "istio-cni error"),
        }
    }
}

/// How much of an input value an error quotes; longer values are cut there and their length is given.
pub const QUOTE_LIMIT: usize = 200;

/// `value` as `"..."`, at most [`QUOTE_LIMIT`] bytes of it (cut on a character boundary), then its length
/// when it was longer: an error never echoes a megabyte annotation back.
pub fn quoted(value: &str) -> String {
    if value.len() <= QUOTE_LIMIT {
        return format!("{value:?}");
    }
    format!("{:?}... ({} bytes)", head(value, QUOTE_LIMIT), value.len())
}

/// The longest start of `text` of at most `limit` bytes that ends on a character boundary.
fn head(text: &str, limit: usize) -> &str {
    let cut = (0..=limit).rev().find(|i| text.is_char_boundary(*i));
    &text[..cut.unwrap_or(0)]
}

/// Free text that may embed input (a reason quoting a token of the value, a message): bounded the same way,
/// with room for the words around the value.
fn bounded(text: &str) -> std::borrow::Cow<'_, str> {
    const LIMIT: usize = 2 * QUOTE_LIMIT + 200;
    if text.len() <= LIMIT {
        return std::borrow::Cow::Borrowed(text);
    }
    std::borrow::Cow::Owned(format!(
        "{}... ({} bytes in all)",
        head(text, LIMIT),
        text.len()
    ))
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::IncompatibleVersion(m) => write!(f, "incompatible CNI versions: {m}"),
            Error::UnsupportedField { field, value } => {
                write!(
                    f,
                    "unsupported value {} for field {}",
                    quoted(value),
                    quoted(field)
                )
            }
            // The settings name a flag (`--x`) the same way when it was the flag that was given.
            Error::InvalidEnv { var, reason } if var.starts_with('-') => {
                write!(f, "flag {var}: {}", bounded(reason))
            }
            Error::InvalidEnv { var, reason } => {
                write!(f, "environment variable {var}: {}", bounded(reason))
            }
            Error::Io { what, source } => write!(f, "{what}: {source}"),
            Error::Decode(m)
            | Error::InvalidConfig(m)
            | Error::NotAvailable(m)
            | Error::Other(m) => write!(f, "{}", bounded(m)),
            Error::Annotation { key, value, reason } => {
                write!(
                    f,
                    "annotation {}={} is invalid: {}",
                    bounded(key),
                    quoted(value),
                    bounded(reason)
                )
            }
            Error::Api {
                status,
                reason,
                message,
            } => {
                if *status == 0 {
                    write!(f, "{}: {}", bounded(reason), bounded(message))
                } else {
                    write!(
                        f,
                        "kubernetes API answered {status} {}: {}",
                        bounded(reason),
                        bounded(message)
                    )
                }
            }
            Error::Exec {
                cmd,
                status,
                stderr,
            } => {
                let stderr = stderr.trim();
                if stderr.is_empty() {
                    write!(f, "{} failed ({status})", bounded(cmd))
                } else {
                    write!(f, "{} failed ({status}): {stderr}", bounded(cmd))
                }
            }
            // Our own list of rules (CHECK's findings): every line matters.
            Error::Rules(m) => write!(f, "{m}"),
            Error::Context { context, source } => write!(f, "{context}: {source}"),
        }
    }
}

impl std::error::Error for Error {}

/// Adds context to errors: `thing().context("read kubeconfig")?`.
pub trait Context<T> {
    fn context(self, ctx: impl Into<String>) -> Result<T>;
    fn with_context<F: FnOnce() -> String>(self, f: F) -> Result<T>;
}

impl<T> Context<T> for Result<T> {
    fn context(self, ctx: impl Into<String>) -> Result<T> {
        self.map_err(|e| Error::Context {
            context: ctx.into(),
            source: Box::new(e),
        })
    }
    fn with_context<F: FnOnce() -> String>(self, f: F) -> Result<T> {
        self.map_err(|e| Error::Context {
            context: f(),
            source: Box::new(e),
        })
    }
}

/// Attaches the path or operation to an `io::Error`.
pub trait IoContext<T> {
    fn io_context(self, what: impl FnOnce() -> String) -> Result<T>;
}

impl<T> IoContext<T> for std::result::Result<T, std::io::Error> {
    fn io_context(self, what: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|e| Error::io(what(), e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn context_keeps_the_code_of_the_cause() {
        let e: Result<()> = Err(Error::env("CNI_IFNAME", "missing"));
        let e = e.context("parse environment").unwrap_err();
        assert_eq!(e.cni_code(), 4);
        assert_eq!(
            e.to_string(),
            "parse environment: environment variable CNI_IFNAME: missing"
        );
    }

    #[test]
    fn annotation_errors_name_key_and_value() {
        let e = Error::Annotation {
            key: "traffic.sidecar.istio.io/excludeOutboundIPRanges".into(),
            value: "*".into(),
            reason: "wildcard not allowed".into(),
        };
        let s = e.to_string();
        assert!(
            s.contains("excludeOutboundIPRanges") && s.contains("\"*\""),
            "{s}"
        );
        assert_eq!(e.cni_code(), 100);
    }

    #[test]
    fn huge_values_are_quoted_bounded_with_their_length() {
        let huge = "9".repeat(1 << 20);
        let e = Error::Annotation {
            key: "traffic.sidecar.istio.io/includeInboundPorts".into(),
            value: huge.clone(),
            reason: format!("port {huge} is out of range (0-65535)"),
        };
        let e = Err::<(), _>(e).context("pod default/p").unwrap_err();
        let s = e.to_string();
        assert!(s.len() < 1200, "{} bytes", s.len());
        assert!(s.contains("includeInboundPorts"), "{s}");
        assert!(s.contains("1048576 bytes"), "{s}");
        assert!(s.contains(&"9".repeat(150)), "{s}");
        // The CNI error reply (what the runtime logs) is bounded with it: 2 MB before.
        let reply = crate::cni::result::error_reply(&e, "1.0.0");
        assert!(reply.len() < 1500, "{} bytes", reply.len());
        let e = Error::UnsupportedField {
            field: "f".into(),
            value: "é".repeat(300_000),
        };
        let s = e.to_string();
        assert!(s.len() < 600 && s.contains("600000 bytes"), "{s}");
        // Short values are quoted whole, without a length.
        let e = Error::Annotation {
            key: "k".into(),
            value: "80 -j ACCEPT".into(),
            reason: "\"80 -j ACCEPT\" is not a port number".into(),
        };
        assert_eq!(
            e.to_string(),
            "annotation k=\"80 -j ACCEPT\" is invalid: \"80 -j ACCEPT\" is not a port number"
        );
    }
}
