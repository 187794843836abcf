//! The thin effectful part: a ureq agent with rustls (ring provider), the cluster CA as the only trust
//! root, optional client certificate, explicit connect and total timeouts, and the mapping of transport
//! failures to `Error::Api { status: 0, reason, .. }`.

use std::io::Read;
use std::sync::Arc;
use std::time::Duration;

use ureq::tls::{ClientCert, PemItem, PrivateKey, RootCerts, TlsConfig, TlsProvider};
use ureq::unversioned::resolver::{DefaultResolver, ResolvedSocketAddrs, Resolver};
use ureq::unversioned::transport::{
    ConnectProxyConnector, Connector, NextTimeout, RustlsConnector,
};
use ureq::{Agent, Proxy};

use super::config::{certs, pem_items, Config};
use super::failure::{classify, Named};
use super::request::{Method, Request};
use super::status;
use super::tcp::{Keepalive, TcpConnector, KEEPALIVE};
use crate::error::{Error, Result};

/// Largest response body read into memory (a page of pods); watch streams are read line by line.
pub const MAX_BODY: u64 = 64 << 20;

/// ureq's resolver, except that an IP-literal host (what `KUBERNETES_SERVICE_HOST` always is) resolves
/// inline: with a connect timeout set, the default resolver starts a lookup thread for every request, even
/// for a literal.
#[derive(Debug, Default)]
struct LiteralFirst(DefaultResolver);

/// The address of an IP-literal URI (`https://10.96.0.1:443/...`, `https://[fd00::1]:6443/...`).
fn literal_addr(uri: &ureq::http::Uri) -> Option<std::net::SocketAddr> {
    let host = uri.host()?.trim_start_matches('[').trim_end_matches(']');
    let ip: std::net::IpAddr = host.parse().ok()?;
    let port = uri
        .port_u16()
        .unwrap_or(if uri.scheme_str() == Some("http") {
            80
        } else {
            443
        });
    Some(std::net::SocketAddr::new(ip, port))
}

impl Resolver for LiteralFirst {
    fn resolve(
        &self,
        uri: &ureq::http::Uri,
        config: &ureq::config::Config,
        timeout: NextTimeout,
    ) -> std::result::Result<ResolvedSocketAddrs, ureq::Error> {
        match literal_addr(uri) {
            // Whatever URI ureq resolves (the server's, or a proxy's), a literal is its own address.
            Some(addr) => {
                let mut out = self.empty();
                out.push(addr);
                Ok(out)
            }
            _ => self.0.resolve(uri, config, timeout),
        }
    }
}

/// Per-request time limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// TCP connect (and DNS).
    pub connect: Duration,
    /// The whole request: connect, TLS, send, response headers and body.
    pub total: Duration,
    /// TCP keepalive on every connection ([`super::tcp::KEEPALIVE`]): a watch whose server went away
    /// unheard ends within about a minute. `None` for a process whose every request has a deadline of its
    /// own (the plugin): nothing to gain, four syscalls per connection saved.
    pub keepalive: Option<Keepalive>,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            connect: Duration::from_secs(5),
            total: Duration::from_secs(30),
            keepalive: Some(KEEPALIVE),
        }
    }
}

pub struct Transport {
    agent: Agent,
    server: String,
    connect: Duration,
}

/// A whole response: status, body and the server's `Retry-After` hint.
#[derive(Debug)]
pub struct Response {
    pub code: u16,
    pub body: Vec<u8>,
    pub retry_after: Option<Duration>,
}

/// Longest `Retry-After` we take literally; anything longer is clamped to it.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(600);

/// `Retry-After` in delta-seconds (what the API server sends with 429 and 503). HTTP dates and garbage
/// give `None`.
pub fn parse_retry_after(v: &str) -> Option<Duration> {
    let v = v.trim();
    if v.is_empty() || v.len() > 10 || !v.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let secs: u64 = v.parse().ok()?;
    Some(Duration::from_secs(secs).min(MAX_RETRY_AFTER))
}

fn client_cert(cfg: &Config) -> Result<Option<ClientCert>> {
    let (Some(cert), Some(key)) = (&cfg.client_cert_pem, &cfg.client_key_pem) else {
        return Ok(None);
    };
    let chain = certs(cert, &cfg.origin, "client-certificate")?;
    let key: PrivateKey<'static> = pem_items(key, &cfg.origin, "client-key")?
        .into_iter()
        .find_map(|i| match i {
            PemItem::PrivateKey(k) => Some(k),
            _ => None,
        })
        .ok_or_else(|| {
            Error::config(format!(
                "{}: client-key: no PEM private key found",
                cfg.origin
            ))
        })?;
    Ok(Some(ClientCert::new_with_certs(&chain, key)))
}

impl Transport {
    pub fn new(cfg: &Config, timeouts: Timeouts) -> Result<Transport> {
        let mut tls = TlsConfig::builder()
            .provider(TlsProvider::Rustls)
            .unversioned_rustls_crypto_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .client_cert(client_cert(cfg)?);
        if cfg.insecure {
            log::warn!(
                "{}: insecure-skip-tls-verify is set: the API server's certificate is NOT verified",
                cfg.origin
            );
            tls = tls.disable_verification(true);
        } else if let Some(ca) = &cfg.ca_pem {
            let roots = certs(ca, &cfg.origin, "certificate-authority")?;
            tls = tls.root_certs(RootCerts::Specific(Arc::new(roots)));
        } else if cfg.server.starts_with("https://") {
            return Err(Error::config(format!(
                "{}: cluster.certificate-authority: missing; there is no CA to verify {} against \
                 (only an explicit insecure-skip-tls-verify: true skips verification)",
                cfg.origin, cfg.server
            )));
        }
        // Decided here, as client-go decides it (super::proxy): the kubeconfig's proxy-url, else the
        // environment, not by ureq's own reading of it, which matched no CIDR in NO_PROXY and took
        // HTTP_PROXY/ALL_PROXY for https.
        let chosen = super::proxy::for_client(cfg.proxy_url.as_deref(), &cfg.server, &cfg.origin);
        let proxy = match chosen {
            Some(url) => Some(Proxy::new(&url).map_err(|e| {
                let from = match cfg.proxy_url {
                    Some(_) => "proxy-url",
                    None => "the environment's proxy",
                };
                Error::config(format!(
                    "{}: {from} {} for {}: {e}",
                    cfg.origin,
                    super::proxy::redacted(&url),
                    cfg.server
                ))
            })?),
            None => None,
        };
        let config = Agent::config_builder()
            .proxy(proxy)
            .tls_config(tls.build())
            .http_status_as_error(false)
            .max_redirects(0)
            .timeout_connect(Some(timeouts.connect))
            .timeout_global(Some(timeouts.total))
            .user_agent(concat!("istio-cni-node/", env!("CARGO_PKG_VERSION")))
            .accept("application/json")
            // ureq allocates and zero-fills both buffers per connection (128 KiB each by default): most of a
            // short-lived plugin's API-call instructions. Requests and response headers are a few KB; bodies
            // stream through, so 16 KiB is plenty.
            .input_buffer_size(16 * 1024)
            .output_buffer_size(16 * 1024)
            .build();
        // ureq's default chain, but for the TCP connector (ours sets keepalive) and SOCKS (never
        // supported): an HTTPS_PROXY from the environment is honoured, as by client-go (the proxy above).
        let connector =
            ().chain(ConnectProxyConnector::default())
                .chain(TcpConnector(timeouts.keepalive))
                .chain(RustlsConnector::default());
        let agent = Agent::with_parts(config, connector, LiteralFirst::default());
        Ok(Transport {
            agent,
            server: cfg.server.clone(),
            connect: timeouts.connect,
        })
    }

    pub fn server(&self) -> &str {
        &self.server
    }

    /// Sends `req` and returns the status, the response body (at most [`MAX_BODY`] bytes) and the
    /// `Retry-After` hint. `total` bounds the whole request, connecting included.
    pub fn send(&self, req: &Request, token: Option<&str>, total: Duration) -> Result<Response> {
        let res = self.call(req, token, Some(total), None)?;
        let retry_after = res
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(parse_retry_after);
        let code = res.status().as_u16();
        let body = res
            .into_body()
            .with_config()
            .limit(MAX_BODY)
            .read_to_vec()
            .map_err(|e| self.map_err(req, e, Some(total)))?;
        Ok(Response {
            code,
            body,
            retry_after,
        })
    }

    /// Sends `req` and returns the status and a reader over the (streamed) body. `total` bounds the
    /// whole stream; `per_read` bounds the silence between two reads.
    pub fn stream(
        &self,
        req: &Request,
        token: Option<&str>,
        total: Option<Duration>,
        per_read: Option<Duration>,
    ) -> Result<(u16, Box<dyn Read + Send>)> {
        let res = self.call(req, token, total, per_read)?;
        let code = res.status().as_u16();
        let reader = res.into_body().into_with_config().limit(u64::MAX).reader();
        Ok((code, Box::new(Named { reader })))
    }

    fn call(
        &self,
        req: &Request,
        token: Option<&str>,
        total: Option<Duration>,
        per_read: Option<Duration>,
    ) -> Result<ureq::http::Response<ureq::Body>> {
        let url = format!("{}{}", self.server, req.path);
        let auth = token.map(|t| format!("Bearer {t}"));
        macro_rules! finish {
            ($b:expr) => {{
                let mut b = $b;
                if let Some(a) = &auth {
                    b = b.header("Authorization", a.as_str());
                }
                b.config()
                    .timeout_global(total)
                    // A request given less time than the agent's connect limit connects within it too.
                    .timeout_connect(Some(total.map_or(self.connect, |t| t.min(self.connect))))
                    .timeout_per_read(per_read)
                    .build()
            }};
        }
        let res = match req.method {
            Method::Get => finish!(self.agent.get(&url)).call(),
            Method::Post | Method::Patch | Method::Delete => {
                let b = match req.method {
                    Method::Post => self.agent.post(&url),
                    Method::Patch => self.agent.patch(&url),
                    _ => self.agent.delete(&url).force_send_body(),
                };
                let b = b.content_type(req.content_type.unwrap_or("application/json"));
                finish!(b).send(req.body.as_deref().unwrap_or("").as_bytes())
            }
        };
        res.map_err(|e| self.map_err(req, e, total))
    }

    fn map_err(&self, req: &Request, e: ureq::Error, total: Option<Duration>) -> Error {
        let (reason, mut detail) = classify(&e);
        if let (ureq::Error::Timeout(_), Some(t)) = (&e, total) {
            detail = format!(
                "{detail} (limit {:.1}s for the whole request)",
                t.as_secs_f64()
            );
        }
        let what = format!(
            "{} {}{}",
            req.method.as_str(),
            self.server,
            strip_query(&req.path)
        );
        status::transport(reason, format!("{what}: {detail}"))
    }
}

fn strip_query(p: &str) -> &str {
    p.split('?').next().unwrap_or(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ip_literals_resolve_inline() {
        let uri = |s: &str| s.parse::<ureq::http::Uri>().unwrap();
        for (url, want) in [
            ("https://10.96.0.1:443/api", Some("10.96.0.1:443")),
            ("https://10.96.0.1/api", Some("10.96.0.1:443")),
            ("https://[fd00::1]:6443/x", Some("[fd00::1]:6443")),
            ("http://127.0.0.1/x", Some("127.0.0.1:80")),
            ("https://kubernetes.default.svc/x", None),
        ] {
            let want = want.map(|w| w.parse().unwrap());
            assert_eq!(literal_addr(&uri(url)), want, "{url}");
        }
    }

    #[test]
    fn retry_after_in_seconds_only() {
        let s = |n| Some(Duration::from_secs(n));
        assert_eq!(parse_retry_after("1"), s(1));
        assert_eq!(parse_retry_after(" 30 "), s(30));
        assert_eq!(parse_retry_after("0"), s(0));
        assert_eq!(parse_retry_after("99999"), Some(MAX_RETRY_AFTER));
        for bad in [
            "",
            "-1",
            "1.5",
            "Wed, 21 Oct 2015 07:28:00 GMT",
            "99999999999999999999",
        ] {
            assert_eq!(parse_retry_after(bad), None, "{bad}");
        }
    }
}
