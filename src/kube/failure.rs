//! What a failed API request is called: ureq's, rustls' and the socket's errors as the `status::REASON_*`
//! the callers act on, with a detail for the message; and a streamed body (a watch) whose failures by time
//! say which limit ran out, or that the server stopped answering.

use std::io::Read;

use super::status::{self, REASON_BAD_RESPONSE};

/// A streamed body whose failures by time say which: ureq hands its own limits out as an opaque "other"
/// error, and a peer that stopped answering reads as a bare "Connection timed out".
pub(super) struct Named {
    pub(super) reader: ureq::BodyReader<'static>,
}

impl Read for Named {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.reader.read(buf).map_err(name_timeout)
    }
}

fn name_timeout(e: std::io::Error) -> std::io::Error {
    use std::io::{Error as IoError, ErrorKind};
    let what = match e.get_ref().and_then(|i| i.downcast_ref::<ureq::Error>()) {
        Some(ureq::Error::Timeout(t)) => format!("the request's time limit ran out ({t:?})"),
        _ if e.raw_os_error() == Some(nix::errno::Errno::ETIMEDOUT as i32) => {
            "the API server stopped answering (TCP keepalive probes or retransmissions unanswered: \
             connection timed out)"
                .into()
        }
        _ => return e,
    };
    IoError::new(ErrorKind::TimedOut, what)
}

fn rustls_reason(e: &rustls::Error) -> &'static str {
    use rustls::Error as R;
    match e {
        R::InvalidCertificate(_)
        | R::NoCertificatesPresented
        | R::UnsupportedNameType
        | R::InvalidCertRevocationList(_) => status::REASON_TLS_VERIFY,
        R::AlertReceived(a) => {
            use rustls::AlertDescription as A;
            match a {
                A::BadCertificate
                | A::UnknownCA
                | A::CertificateUnknown
                | A::CertificateExpired
                | A::CertificateRequired
                | A::UnsupportedCertificate
                | A::AccessDenied => status::REASON_TLS_VERIFY,
                _ => status::REASON_TLS,
            }
        }
        _ => status::REASON_TLS,
    }
}

fn io_reason(e: &std::io::Error) -> &'static str {
    use std::io::ErrorKind as K;
    if let Some(r) = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
        return rustls_reason(r);
    }
    match e.kind() {
        K::ConnectionRefused => status::REASON_REFUSED,
        K::ConnectionReset | K::ConnectionAborted | K::BrokenPipe | K::UnexpectedEof => {
            status::REASON_RESET
        }
        K::TimedOut | K::WouldBlock => status::REASON_TIMEOUT,
        K::AddrNotAvailable | K::NotConnected => status::REASON_CONNECT,
        _ => status::REASON_TRANSPORT,
    }
}

/// A transport reason (see `status::REASON_*`) and a detail for the message.
pub fn classify(e: &ureq::Error) -> (&'static str, String) {
    use ureq::Error as U;
    let reason = match e {
        U::Timeout(_) => status::REASON_TIMEOUT,
        U::Io(io) => io_reason(io),
        U::Rustls(r) => rustls_reason(r),
        U::Tls(_) | U::Pem(_) => status::REASON_TLS,
        U::HostNotFound => status::REASON_DNS,
        U::ConnectionFailed => status::REASON_CONNECT,
        U::Protocol(_) | U::LargeResponseHeader(..) | U::BodyExceedsLimit(_) => REASON_BAD_RESPONSE,
        _ => status::REASON_TRANSPORT,
    };
    let mut detail = e.to_string();
    // rustls appends a documentation link to some messages; keep the message itself.
    if let Some(i) = detail.find(": https://docs.rs/") {
        detail.truncate(i);
    }
    (reason, detail)
}
