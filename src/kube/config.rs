//! Client configuration: from a kubeconfig file (JSON, or the plain YAML our installer and upstream's write)
//! or from the in-cluster service account.
//!
//! Refused, with the field named: no `server` (we never fall back to `http://localhost:8080`, istio#55894),
//! `exec` and `auth-provider` users (we never run anything), `tokenFile` (never send a file named by the
//! kubeconfig as a credential; upstream's sanitizer refuses it too), basic auth, unreadable or empty CA files.
//! Certificate files (`certificate-authority`, `client-certificate`, `client-key`) are read, relative to the
//! kubeconfig's directory. A cluster's `proxy-url` is checked here and used by [`super::proxy`].

use std::path::{Path, PathBuf};

use crate::error::{Error, IoContext, Result};
use crate::json::{self, Object, Value};

use super::token::TokenSource;

pub(crate) use super::pem::{certs, check_certs, pem_items};

/// Default service-account directory.
pub const SA_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// Everything the transport needs. Its `Debug` never prints the client key.
#[derive(Clone)]
pub struct Config {
    /// `https://host:port` (or `http://`), no trailing slash, possibly with a path prefix.
    pub server: String,
    /// PEM bundle of the cluster CA; the ONLY trust roots used.
    pub ca_pem: Option<Vec<u8>>,
    /// The file `ca_pem` was read from (in-cluster `ca.crt`, a kubeconfig's `certificate-authority`):
    /// a long-running client takes its new certificates when it changes (`super::ca`).
    pub ca_file: Option<PathBuf>,
    /// Explicit `insecure-skip-tls-verify: true`.
    pub insecure: bool,
    /// PEM client certificate chain and key.
    pub client_cert_pem: Option<Vec<u8>>,
    pub client_key_pem: Option<Vec<u8>>,
    pub token: Option<TokenSource>,
    /// The cluster's `proxy-url` (scheme lower-cased): used instead of the environment's proxy
    /// ([`super::proxy::for_client`]).
    pub proxy_url: Option<String>,
    /// Where the configuration came from, for messages ("kubeconfig /path", "in-cluster").
    pub origin: String,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let len = |b: &Option<Vec<u8>>| b.as_ref().map(|b| format!("<{} bytes>", b.len()));
        f.debug_struct("Config")
            .field("server", &self.server)
            .field("ca_pem", &len(&self.ca_pem))
            .field("ca_file", &self.ca_file)
            .field("insecure", &self.insecure)
            .field("client_cert_pem", &len(&self.client_cert_pem))
            .field(
                "client_key_pem",
                &len(&self.client_key_pem).map(|_| "<redacted>"),
            )
            .field("token", &self.token)
            .field(
                "proxy_url",
                &self.proxy_url.as_deref().map(super::proxy::redacted),
            )
            .field("origin", &self.origin)
            .finish()
    }
}

fn bad(origin: &str, field: &str, why: &str) -> Error {
    Error::config(format!("{origin}: {field}: {why}"))
}

/// Standard base64 (whitespace ignored, padding optional).
pub fn base64_decode(s: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    let mut pad = false;
    for b in s.bytes() {
        let v = match b {
            b'A'..=b'Z' => b - b'A',
            b'a'..=b'z' => b - b'a' + 26,
            b'0'..=b'9' => b - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            b'=' => {
                pad = true;
                continue;
            }
            b' ' | b'\n' | b'\r' | b'\t' => continue,
            _ => return None,
        };
        if pad {
            return None;
        }
        acc = (acc << 6) | v as u32;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}

/// Parses kubeconfig text. JSON if it starts with `{`, else the YAML subset of `super::yaml`.
pub fn parse_document(text: &str, origin: &str) -> Result<Object> {
    if text.trim_start().starts_with('{') {
        return json::parse_object(text, origin);
    }
    match super::yaml::parse(text, origin) {
        Ok(Value::Object(o)) => Ok(o),
        Ok(_) => Err(Error::Decode(format!(
            "{origin}: not a kubeconfig (neither a JSON object nor a YAML mapping)"
        ))),
        Err(e) => Err(Error::Decode(format!(
            "{origin}: not JSON, and not the plain YAML a kubeconfig writer produces: {}",
            e.to_string()
                .trim_start_matches(origin)
                .trim_start_matches(": ")
        ))),
    }
}

/// The entry named `name` in the list `list` (`clusters`, `users`, `contexts`), returning its `key` object.
fn named<'a>(
    doc: &'a Object,
    list: &str,
    key: &str,
    name: &str,
    origin: &str,
) -> Result<&'a Object> {
    let items =
        json::arr_of(doc, list).ok_or_else(|| bad(origin, list, "missing or not a list"))?;
    for item in items {
        if let Value::Object(o) = item {
            if json::str_of(o, "name") == Some(name) {
                return json::obj_of(o, key).ok_or_else(|| {
                    bad(
                        origin,
                        &format!("{list}[{name}].{key}"),
                        "missing or not a mapping",
                    )
                });
            }
        }
    }
    Err(bad(origin, list, &format!("no entry named {name:?}")))
}

/// The context to use: `current-context`, or the only context when that is unset.
fn context<'a>(doc: &'a Object, origin: &str) -> Result<&'a Object> {
    match json::opt_string(doc, "current-context", origin)? {
        Some(c) if !c.is_empty() => named(doc, "contexts", "context", &c, origin),
        _ => match json::arr_of(doc, "contexts").map(|a| a.as_slice()) {
            Some([Value::Object(only)]) => json::obj_of(only, "context")
                .ok_or_else(|| bad(origin, "contexts[0].context", "missing or not a mapping")),
            _ => Err(bad(
                origin,
                "current-context",
                "not set and there is not exactly one context",
            )),
        },
    }
}

/// Where a kubeconfig's file references resolve (its directory), and whether the files must be root's
/// alone as the kubeconfig itself ([`Config::from_trusted_kubeconfig`]).
struct Refs<'a> {
    dir: &'a Path,
    trusted: bool,
}

/// Reads a file named by a kubeconfig field, relative paths against the kubeconfig's directory.
fn read_ref(base: &Refs<'_>, field: &str, file: &str, origin: &str) -> Result<Vec<u8>> {
    let p = base.dir.join(file);
    let data = match base.trusted {
        true => crate::fsutil::read_trusted(&p, &format!("{origin}: {field}:"))?.into_bytes(),
        false => {
            std::fs::read(&p).io_context(|| format!("{origin}: {field}: read {}", p.display()))?
        }
    };
    if data.iter().all(|b| b.is_ascii_whitespace()) {
        return Err(bad(origin, field, &format!("{} is empty", p.display())));
    }
    Ok(data)
}

/// `<field>-data` (base64) or `<field>` (a file); data wins, as in client-go.
fn data_or_file(o: &Object, field: &str, base: &Refs<'_>, origin: &str) -> Result<Option<Vec<u8>>> {
    Ok(data_or_path(o, field, base, origin)?.map(|(bytes, _)| bytes))
}

/// [`data_or_file`], with the file's path when the bytes came from one.
fn data_or_path(
    o: &Object,
    field: &str,
    base: &Refs<'_>,
    origin: &str,
) -> Result<Option<(Vec<u8>, Option<PathBuf>)>> {
    let data_key = format!("{field}-data");
    if let Some(d) = json::opt_string(o, &data_key, origin)?.filter(|d| !d.is_empty()) {
        let bytes = base64_decode(&d).ok_or_else(|| bad(origin, &data_key, "not valid base64"))?;
        if bytes.is_empty() {
            return Err(bad(origin, &data_key, "empty"));
        }
        return Ok(Some((bytes, None)));
    }
    match json::opt_string(o, field, origin)?.filter(|f| !f.is_empty()) {
        Some(f) => Ok(Some((
            read_ref(base, field, &f, origin)?,
            Some(base.dir.join(f)),
        ))),
        None => Ok(None),
    }
}

impl Config {
    /// Reads and validates a kubeconfig file.
    pub fn from_kubeconfig(path: &Path) -> Result<Config> {
        let origin = format!("kubeconfig {}", path.display());
        let text = std::fs::read_to_string(path).io_context(|| format!("read {origin}"))?;
        let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
        Config::from_kubeconfig_text(&text, &base, &origin)
    }

    /// [`Config::from_kubeconfig`] for a process that acts on it as root (the plugin: the API server it
    /// names decides whether a pod is redirected): refused unless root (or this process's user) owns the
    /// file and nobody else may write it ([`crate::fsutil::read_trusted`]).
    pub fn from_trusted_kubeconfig(path: &Path) -> Result<Config> {
        let origin = format!("kubeconfig {}", path.display());
        let text = crate::fsutil::read_trusted(path, "kubeconfig")?;
        let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        // The files it names (a CA, a client certificate) are held to the same rule.
        Config::parse(
            &text,
            &Refs {
                dir: &dir,
                trusted: true,
            },
            &origin,
        )
    }

    /// Parses kubeconfig text; relative file references resolve against `base`.
    pub fn from_kubeconfig_text(text: &str, base: &Path, origin: &str) -> Result<Config> {
        Config::parse(
            text,
            &Refs {
                dir: base,
                trusted: false,
            },
            origin,
        )
    }

    fn parse(text: &str, base: &Refs<'_>, origin: &str) -> Result<Config> {
        let doc = parse_document(text, origin)?;
        let ctx = context(&doc, origin)?;
        let cluster_name = json::opt_string(ctx, "cluster", origin)?
            .filter(|c| !c.is_empty())
            .ok_or_else(|| bad(origin, "context.cluster", "missing"))?;
        let cluster = named(&doc, "clusters", "cluster", &cluster_name, origin)?;
        let server = json::opt_string(cluster, "server", origin)?
            .filter(|s| !s.trim().is_empty())
            .ok_or_else(|| {
                bad(
                    origin,
                    &format!("clusters[{cluster_name}].cluster.server"),
                    "missing; refusing to guess a server (no localhost:8080 fallback)",
                )
            })?;
        let server = normalise_server(&server, origin)?;
        let proxy_field = format!("clusters[{cluster_name}].cluster.proxy-url");
        let proxy_url = match json::opt_string(cluster, "proxy-url", origin)? {
            Some(url) => super::proxy::kubeconfig_proxy_url(&url, &proxy_field, origin)?,
            None => None,
        };
        let insecure =
            json::opt_bool(cluster, "insecure-skip-tls-verify", origin)?.unwrap_or(false);
        let (ca_pem, ca_file) = match data_or_path(cluster, "certificate-authority", base, origin)?
        {
            // A trusted kubeconfig's CA file was checked as it was read; it is not read again
            // unchecked (the plugin, its one reader, is one process per CNI call: nothing to reload).
            Some((pem, file)) => (Some(pem), file.filter(|_| !base.trusted)),
            None => (None, None),
        };
        if let Some(ca) = &ca_pem {
            check_certs(ca, origin, "certificate-authority")?;
        }
        if insecure && ca_pem.is_some() {
            return Err(bad(
                origin,
                "insecure-skip-tls-verify",
                "set together with a certificate authority; choose one",
            ));
        }
        let mut cfg = Config {
            server,
            ca_pem,
            ca_file,
            insecure,
            client_cert_pem: None,
            client_key_pem: None,
            token: None,
            proxy_url,
            origin: origin.to_string(),
        };
        if let Some(user) = json::opt_string(ctx, "user", origin)?.filter(|u| !u.is_empty()) {
            cfg.read_user(named(&doc, "users", "user", &user, origin)?, base)?;
        }
        Ok(cfg)
    }

    fn read_user(&mut self, user: &Object, base: &Refs<'_>) -> Result<()> {
        let origin = self.origin.clone();
        for refused in ["exec", "auth-provider"] {
            if matches!(user.get(refused), Some(v) if !matches!(v, Value::Null)) {
                return Err(bad(
                    &origin,
                    &format!("user.{refused}"),
                    "credential plugins are not supported (nothing is ever executed); use a token or a client certificate",
                ));
            }
        }
        for refused in ["username", "password"] {
            if json::opt_string(user, refused, &origin)?.is_some_and(|s| !s.is_empty()) {
                return Err(bad(
                    &origin,
                    &format!("user.{refused}"),
                    "basic authentication is not supported",
                ));
            }
        }
        // Like upstream's sanitizeKubeConfig: a kubeconfig must not make us read an arbitrary file and send
        // it to a server as a credential. Our installer writes the token inline and rewrites the file on
        // rotation; long-running roles use the in-cluster token, which is re-read when it changes.
        if json::opt_string(user, "tokenFile", &origin)?.is_some_and(|f| !f.is_empty()) {
            return Err(bad(
                &origin,
                "user.tokenFile",
                "not supported (a kubeconfig may not point the client at a file to send as a credential); \
                 put the token inline",
            ));
        }
        self.token = json::opt_string(user, "token", &origin)?
            .filter(|t| !t.trim().is_empty())
            .map(|t| TokenSource::fixed(t.trim().to_string()));
        self.client_cert_pem = data_or_file(user, "client-certificate", base, &origin)?;
        self.client_key_pem = data_or_file(user, "client-key", base, &origin)?;
        match (&self.client_cert_pem, &self.client_key_pem) {
            (Some(c), Some(_)) => check_certs(c, &origin, "client-certificate"),
            (None, None) => Ok(()),
            (Some(_), None) => Err(bad(
                &origin,
                "client-key",
                "missing (client-certificate is set)",
            )),
            (None, Some(_)) => Err(bad(
                &origin,
                "client-certificate",
                "missing (client-key is set)",
            )),
        }
    }
}

/// Checks the scheme and host of `server`, lower-cases the scheme (as Go's `url.Parse`: client-go takes
/// `HTTPS://`) and drops a trailing `/`.
fn normalise_server(server: &str, origin: &str) -> Result<String> {
    let s = server.trim().trim_end_matches('/');
    let (scheme, rest) = super::proxy::split_scheme(s)
        .filter(|(scheme, _)| scheme == "https" || scheme == "http")
        .ok_or_else(|| {
            bad(
                origin,
                "cluster.server",
                &format!("{server:?} is not an http(s) URL"),
            )
        })?;
    let authority = rest.split('/').next().unwrap_or("");
    if authority.is_empty() || authority.contains('@') || rest.contains(['?', '#', ' ']) {
        return Err(bad(
            origin,
            "cluster.server",
            &format!("{server:?} is not a valid server URL"),
        ));
    }
    Ok(format!("{scheme}://{rest}"))
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
