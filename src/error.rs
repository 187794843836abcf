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
    /// CNI code 3: the container is unknown.
    UnknownContainer(String),
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
    /// CNI code 11: transient; the runtime may retry later.
    TryAgain(String),
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
        match self.root() {
            Error::IncompatibleVersion(_) => 1,
            Error::UnsupportedField { .. } => 2,
            Error::UnknownContainer(_) => 3,
            Error::InvalidEnv { .. } => 4,
            Error::Io { .. } => 5,
            Error::Decode(_) => 6,
            Error::InvalidConfig(_) => 7,
            Error::TryAgain(_) => 11,
            Error::NotAvailable(_) => 50,
            Error::Annotation { .. } => 100,
            Error::Api { .. } => 101,
            Error::Exec { .. } => 102,
            Error::Rules(_) => 103,
            Error::Other(_) => 999,
            Error::Context { .. } => 999,
        }
    }

    /// A short headline for the CNI `msg` field; the full chain goes to `details`.
    pub fn headline(&self) -> &'static str {
        match self.root() {
            Error::IncompatibleVersion(_) => "incompatible CNI versions",
            Error::UnsupportedField { .. } => "unsupported field",
            Error::UnknownContainer(_) => "unknown container",
            Error::InvalidEnv { .. } => "invalid environment variable",
            Error::Io { .. } => "I/O failure",
            Error::Decode(_) => "decoding failure",
            Error::InvalidConfig(_) => "invalid network configuration",
            Error::TryAgain(_) => "try again later",
            Error::NotAvailable(_) => "plugin not available",
            Error::Annotation { .. } => "invalid pod annotation",
            Error::Api { .. } => "kubernetes API error",
            Error::Exec { .. } => "command failed",
            Error::Rules(_) => "redirection rules",
            Error::Other(_) | Error::Context { .. } => "istio-cni error",
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::IncompatibleVersion(m) => write!(f, "incompatible CNI versions: {m}"),
            Error::UnsupportedField { field, value } => {
                write!(f, "unsupported value {value:?} for field {field:?}")
            }
            Error::UnknownContainer(m) => write!(f, "unknown container: {m}"),
            Error::InvalidEnv { var, reason } => write!(f, "environment variable {var}: {reason}"),
            Error::Io { what, source } => write!(f, "{what}: {source}"),
            Error::Decode(m) => write!(f, "{m}"),
            Error::InvalidConfig(m) => write!(f, "{m}"),
            Error::TryAgain(m) => write!(f, "{m}"),
            Error::NotAvailable(m) => write!(f, "{m}"),
            Error::Annotation { key, value, reason } => {
                write!(f, "annotation {key}={value:?} is invalid: {reason}")
            }
            Error::Api {
                status,
                reason,
                message,
            } => {
                if *status == 0 {
                    write!(f, "{reason}: {message}")
                } else {
                    write!(f, "kubernetes API answered {status} {reason}: {message}")
                }
            }
            Error::Exec {
                cmd,
                status,
                stderr,
            } => {
                let stderr = stderr.trim();
                if stderr.is_empty() {
                    write!(f, "{cmd} failed ({status})")
                } else {
                    write!(f, "{cmd} failed ({status}): {stderr}")
                }
            }
            Error::Rules(m) => write!(f, "{m}"),
            Error::Other(m) => write!(f, "{m}"),
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
}
