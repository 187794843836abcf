//! The plugin's kubeconfig (installer.md §2.8), rendered purely.
//!
//! Upstream master writes YAML through client-go; we write JSON with the same fields and values (JSON is
//! valid YAML, so kubectl reads it, and the plugin reads it without a YAML parser): sorted keys, 2-space
//! indent, one trailing newline. The server URL brackets only IPv6 hosts (`net.JoinHostPort`). The cluster
//! carries `certificate-authority-data` (standard base64 of the CA file) xor `insecure-skip-tls-verify`.
//! Difference from upstream: trailing newlines of the token file are dropped (a bearer token with a
//! newline is an invalid HTTP header).

use crate::error::{Error, Result};
use crate::json::{self, Array, Object, Value};

/// The inputs of the kubeconfig. Its `Debug` shows the token's length only.
#[derive(Clone)]
pub struct KubeconfigInputs<'a> {
    /// KUBERNETES_SERVICE_PROTOCOL; "" means https.
    pub protocol: &'a str,
    pub host: &'a str,
    pub port: &'a str,
    /// The CA file's bytes, `None` with SKIP_TLS_VERIFY.
    pub ca: Option<&'a [u8]>,
    pub skip_tls_verify: bool,
    pub token: &'a [u8],
}

impl std::fmt::Debug for KubeconfigInputs<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeconfigInputs")
            .field("protocol", &self.protocol)
            .field("host", &self.host)
            .field("port", &self.port)
            .field("ca", &self.ca.map(|c| format!("<{} bytes>", c.len())))
            .field("skip_tls_verify", &self.skip_tls_verify)
            .field("token", &format!("<redacted, {} bytes>", self.token.len()))
            .finish()
    }
}

/// Standard base64 with padding.
pub fn base64(data: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(T[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// `<proto>://<host>:<port>`, the host bracketed when it is IPv6 (contains a colon).
pub fn server_url(protocol: &str, host: &str, port: &str) -> String {
    let proto = if protocol.is_empty() {
        "https"
    } else {
        protocol
    };
    if host.contains(':') {
        format!("{proto}://[{host}]:{port}")
    } else {
        format!("{proto}://{host}:{port}")
    }
}

fn obj(pairs: Vec<(&str, Value)>) -> Value {
    let mut o = Object::new();
    for (k, v) in pairs {
        o.insert(k.to_string(), v);
    }
    Value::Object(o)
}

fn arr(items: Vec<Value>) -> Value {
    Value::Array(items.into_iter().collect::<Array>())
}

/// Renders the kubeconfig, or upstream's error when the service host or port is unset.
pub fn render(i: &KubeconfigInputs<'_>) -> Result<String> {
    if i.host.is_empty() {
        return Err(Error::env(
            "KUBERNETES_SERVICE_HOST",
            "KUBERNETES_SERVICE_HOST not set. Is this not running within a pod?",
        ));
    }
    if i.port.is_empty() {
        return Err(Error::env(
            "KUBERNETES_SERVICE_PORT",
            "KUBERNETES_SERVICE_PORT not set. Is this not running within a pod?",
        ));
    }
    let mut cluster = vec![(
        "server",
        json::string(&server_url(i.protocol, i.host, i.port)),
    )];
    if i.skip_tls_verify {
        cluster.push(("insecure-skip-tls-verify", Value::Bool(true)));
    } else {
        let ca = i.ca.ok_or_else(|| {
            Error::config("kubeconfig: no CA data and SKIP_TLS_VERIFY is not set")
        })?;
        cluster.push(("certificate-authority-data", json::string(&base64(ca))));
    }
    let token = std::str::from_utf8(i.token)
        .map_err(|_| Error::Decode("service account token: not UTF-8".into()))?
        .trim_end_matches(['\n', '\r']);
    let doc = obj(vec![
        ("apiVersion", json::string("v1")),
        ("kind", json::string("Config")),
        (
            "clusters",
            arr(vec![obj(vec![
                ("name", json::string("local")),
                ("cluster", obj(cluster)),
            ])]),
        ),
        (
            "contexts",
            arr(vec![obj(vec![
                ("name", json::string("istio-cni-context")),
                (
                    "context",
                    obj(vec![
                        ("cluster", json::string("local")),
                        ("user", json::string("istio-cni")),
                    ]),
                ),
            ])]),
        ),
        ("current-context", json::string("istio-cni-context")),
        (
            "users",
            arr(vec![obj(vec![
                ("name", json::string("istio-cni")),
                ("user", obj(vec![("token", json::string(token))])),
            ])]),
        ),
    ]);
    let mut s = json::to_pretty(&doc, "  ");
    s.push('\n');
    Ok(s)
}

/// Refuses a kubeconfig the plugin could not use, before it is written (upstream writes it and reports
/// ready while every sidecar pod's ADD fails): a CA without a PEM certificate (empty, or not PEM), an empty
/// token, or anything our own reader refuses (e.g. a `KUBERNETES_SERVICE_PROTOCOL` other than http(s)).
/// `ca_file` and `token_file` name the inputs in messages.
pub fn check_usable(
    text: &str,
    i: &KubeconfigInputs<'_>,
    ca_file: &str,
    token_file: &str,
) -> Result<()> {
    if let Some(ca) = i.ca {
        let what = format!("CA file {ca_file}");
        if crate::kube::config::certs(ca, &what, "PEM")?.is_empty() {
            return Err(Error::config(format!(
                "{what} holds no PEM certificate: the plugin could verify no API server with it \
                 (only SKIP_TLS_VERIFY=true skips verification)"
            )));
        }
    }
    if i.token.iter().all(u8::is_ascii_whitespace) {
        return Err(Error::config(format!(
            "service account token {token_file} is empty"
        )));
    }
    let origin = "the plugin's kubeconfig (it would refuse it)";
    crate::kube::Config::from_kubeconfig_text(text, std::path::Path::new("/"), origin).map(drop)
}

/// SHA-256 of `data` as lower-case hex (rustls' ring provider; no extra crate).
pub fn sha256_hex(data: &[u8]) -> String {
    let suite = rustls::crypto::ring::cipher_suite::TLS13_AES_128_GCM_SHA256;
    match suite.tls13() {
        Some(s) => s
            .common
            .hash_provider
            .hash(data)
            .as_ref()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect(),
        None => String::from("unavailable"),
    }
}

/// What the log says about a written kubeconfig: the server and the CA's fingerprint (the first 16 hex
/// digits of its SHA-256), never the CA blob or the token.
pub fn log_summary(inputs: &KubeconfigInputs<'_>) -> String {
    let server = server_url(inputs.protocol, inputs.host, inputs.port);
    match inputs.ca {
        Some(ca) => {
            let h = sha256_hex(ca);
            format!("server {server}, CA sha256:{}", h.get(..16).unwrap_or(&h))
        }
        None => format!("server {server}, insecure-skip-tls-verify"),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn debug_never_shows_the_token() {
        let i = super::KubeconfigInputs {
            protocol: "",
            host: "h",
            port: "443",
            ca: None,
            skip_tls_verify: true,
            token: b"eyJhbGciOiJSUzI1NiJ9.secret",
        };
        let shown = format!("{i:?}");
        assert!(
            !shown.contains("secret") && !shown.contains("101, 121"),
            "{shown}"
        );
        assert!(shown.contains("<redacted, 27 bytes>"), "{shown}");
    }

    use super::*;

    #[test]
    fn what_the_plugin_would_refuse_is_not_written() {
        // A PEM certificate block (its DER is not looked into here).
        let ca = b"-----BEGIN CERTIFICATE-----\nMAMCAQE=\n-----END CERTIFICATE-----\n".to_vec();
        let ok = KubeconfigInputs {
            protocol: "",
            host: "10.96.0.1",
            port: "443",
            ca: Some(&ca),
            skip_tls_verify: false,
            token: b"t",
        };
        let check = |i: &KubeconfigInputs<'_>| {
            check_usable(&render(i).unwrap(), i, "/sa/ca.crt", "/sa/token")
                .map_err(|e| e.to_string())
        };
        assert_eq!(check(&ok), Ok(()));
        let skip = KubeconfigInputs {
            ca: None,
            skip_tls_verify: true,
            ..ok.clone()
        };
        assert_eq!(check(&skip), Ok(()));
        for bad_ca in [&b""[..], b"\n", b"not a certificate\n"] {
            let e = check(&KubeconfigInputs {
                ca: Some(bad_ca),
                ..ok.clone()
            })
            .unwrap_err();
            assert!(e.contains("/sa/ca.crt holds no PEM certificate"), "{e}");
        }
        let e = check(&KubeconfigInputs {
            token: b"\n",
            ..ok.clone()
        })
        .unwrap_err();
        assert!(e.contains("/sa/token is empty"), "{e}");
        let e = check(&KubeconfigInputs {
            protocol: "ftp",
            ..ok.clone()
        })
        .unwrap_err();
        assert!(
            e.contains("ftp://10.96.0.1:443") && e.contains("would refuse"),
            "{e}"
        );
    }

    #[test]
    fn base64_matches_rfc4648() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"foobar"), "Zm9vYmFy");
    }

    #[test]
    fn only_ipv6_is_bracketed() {
        assert_eq!(server_url("", "10.96.0.1", "443"), "https://10.96.0.1:443");
        assert_eq!(server_url("", "fd00::1", "443"), "https://[fd00::1]:443");
        assert_eq!(server_url("http", "h", "80"), "http://h:80");
    }

    #[test]
    fn log_summary_has_server_and_fingerprint_only() {
        let ca = b"-----BEGIN CERTIFICATE-----\nMIIBAAAA\n-----END CERTIFICATE-----\n";
        let i = KubeconfigInputs {
            protocol: "",
            host: "10.96.0.1",
            port: "443",
            ca: Some(ca),
            skip_tls_verify: false,
            token: b"secret",
        };
        let s = log_summary(&i);
        assert!(
            s.starts_with("server https://10.96.0.1:443, CA sha256:"),
            "{s}"
        );
        assert!(
            !s.contains("secret") && !s.contains("MIIB") && !s.contains(&base64(ca)),
            "{s}"
        );
        assert_eq!(
            s.len(),
            "server https://10.96.0.1:443, CA sha256:".len() + 16
        );
        // FIPS 180-2 test vector.
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
