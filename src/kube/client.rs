//! The API client the roles use: one cheap-to-clone handle per configuration.

use std::io::Read;
use std::path::Path;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use super::ca::CaFile;
use super::config::Config;
use super::request::{self, ListParams, Request, WatchParams};
use super::status::{self, ApiErrorExt, REASON_TLS_VERIFY};
use super::token::TokenSource;
use super::transport::{Timeouts, Transport};
use super::watch::WatchStream;
use crate::error::{Context, Error, Result};
use crate::json::{self, Object, Value};

/// One page of a pod list.
#[derive(Debug, Clone)]
pub struct PodList {
    pub items: Vec<Object>,
    /// `metadata.resourceVersion` of the list: watch from here.
    pub resource_version: String,
    /// `metadata.continue`: ask for the next page with it; `None` on the last page.
    pub continue_token: Option<String>,
}

/// Margin added to a watch's `timeoutSeconds` for the client-side bound.
pub const WATCH_MARGIN: Duration = Duration::from_secs(30);
/// `timeoutSeconds` sent when the caller gives none, so every watch has a bounded total time (client-go
/// picks 300..600 s at random).
pub const DEFAULT_WATCH_TIMEOUT: u32 = 300;

struct Inner {
    /// Replaced when the CA file changes ([`Client::transport`]).
    transport: RwLock<Arc<Transport>>,
    /// The configuration the transport is rebuilt from, and the CA file it watches.
    cfg: Config,
    ca: Option<CaFile>,
    token: Option<TokenSource>,
    timeouts: Timeouts,
}

/// A Kubernetes API client. Cloning shares the connection pool and the token source.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Client({})", self.inner.cfg.server)
    }
}

/// Parses a response body that must be a JSON object. Pages of pods may exceed `json::MAX_INPUT`, so the
/// bound is the transport's body limit; depth is bounded as everywhere.
fn parse_body(body: &[u8], what: &str) -> Result<Object> {
    let text = std::str::from_utf8(body)
        .map_err(|_| Error::Decode(format!("{what}: response is not UTF-8")))?;
    match json::parse_bounded(text, what, super::transport::MAX_BODY as usize)? {
        Value::Object(o) => Ok(o),
        _ => Err(Error::Decode(format!("{what}: expected a JSON object"))),
    }
}

impl Client {
    /// A client for `cfg` with the default timeouts (connect 5 s, total 30 s per request).
    pub fn from_config(cfg: Config) -> Result<Client> {
        Client::with_timeouts(cfg, Timeouts::default())
    }

    pub fn with_timeouts(cfg: Config, timeouts: Timeouts) -> Result<Client> {
        let transport = Transport::new(&cfg, timeouts)?;
        let ca = match (&cfg.ca_file, &cfg.ca_pem, cfg.insecure) {
            (Some(f), Some(pem), false) => Some(CaFile::new(f.clone(), pem.clone())),
            _ => None,
        };
        Ok(Client {
            inner: Arc::new(Inner {
                transport: RwLock::new(Arc::new(transport)),
                token: cfg.token.clone(),
                cfg,
                ca,
                timeouts,
            }),
        })
    }

    pub fn from_kubeconfig(path: &Path) -> Result<Client> {
        Client::from_config(Config::from_kubeconfig(path)?)
    }

    /// `KUBECONFIG` if set, else in-cluster.
    pub fn from_env() -> Result<Client> {
        Client::from_config(Config::from_env()?)
    }

    pub fn server(&self) -> &str {
        &self.inner.cfg.server
    }

    pub fn timeouts(&self) -> Timeouts {
        self.inner.timeouts
    }

    fn token(&self) -> Option<String> {
        self.inner.token.as_ref().map(TokenSource::get)
    }

    /// The transport, rebuilt first when the CA file changed (looked at every [`super::token::RECHECK`]
    /// at most).
    fn transport(&self) -> Arc<Transport> {
        self.reload_ca(false);
        let t = self.inner.transport.read();
        t.unwrap_or_else(|poisoned| poisoned.into_inner()).clone()
    }

    /// Rebuilds the transport with the CA file's certificates if they changed (`force`: look now, after a
    /// failed verification); true if it did.
    fn reload_ca(&self, force: bool) -> bool {
        let Some(pem) = self.inner.ca.as_ref().and_then(|ca| ca.changed(force)) else {
            return false;
        };
        let cfg = Config {
            ca_pem: Some(pem),
            ..self.inner.cfg.clone()
        };
        match Transport::new(&cfg, self.inner.timeouts) {
            Ok(t) => {
                let lock = self.inner.transport.write();
                let mut cur = lock.unwrap_or_else(|poisoned| poisoned.into_inner());
                *cur = Arc::new(t);
                true
            }
            Err(e) => {
                log::warn!("{}: keeping the CA in use: {e}", cfg.origin);
                false
            }
        }
    }

    /// After a failed certificate verification: whether the CA file has new certificates to try.
    fn retry_verification<T>(&self, res: &Result<T>) -> bool {
        matches!(res, Err(e) if e.api_reason() == Some(REASON_TLS_VERIFY)) && self.reload_ca(true)
    }

    /// Sends `req`; a 2xx gives the body, anything else the API error. A failed certificate verification
    /// re-reads a CA file, a 401 a rotating token file, once each, and if it changed retries within what is
    /// left of `total`.
    fn execute(&self, req: &Request, total: Duration) -> Result<Vec<u8>> {
        self.execute_hinted(req, total).0
    }

    /// [`Client::execute`], plus the server's `Retry-After` hint on a failure that carried one.
    fn execute_hinted(
        &self,
        req: &Request,
        total: Duration,
    ) -> (Result<Vec<u8>>, Option<Duration>) {
        let start = std::time::Instant::now();
        let mut res = self.transport().send(req, self.token().as_deref(), total);
        if self.retry_verification(&res) {
            let left = total.saturating_sub(start.elapsed());
            if !left.is_zero() {
                res = self.transport().send(req, self.token().as_deref(), left);
            }
        }
        let t = self.transport();
        if matches!(&res, Ok(r) if r.code == 401)
            && self.inner.token.as_ref().is_some_and(TokenSource::refresh)
        {
            let left = total.saturating_sub(start.elapsed());
            if !left.is_zero() {
                res = t.send(req, self.token().as_deref(), left);
            }
        }
        match res {
            Err(e) => (Err(e), None),
            Ok(r) if (200..300).contains(&r.code) => (Ok(r.body), None),
            Ok(r) => (
                Err(status::decode(r.code, &r.body).into_error()),
                r.retry_after,
            ),
        }
    }

    pub fn get_pod(&self, ns: &str, name: &str) -> Result<Object> {
        self.get_pod_within(ns, name, self.inner.timeouts.total)
    }

    /// [`Client::get_pod`] with an explicit total time limit for this one request.
    pub fn get_pod_within(&self, ns: &str, name: &str, total: Duration) -> Result<Object> {
        self.get_pod_attempt(ns, name, total).0
    }

    /// One pod GET bounded by `total` (connecting included), with the server's `Retry-After` hint when
    /// it failed with one: what [`super::get_pod_with_retry`] needs per attempt.
    pub fn get_pod_attempt(
        &self,
        ns: &str,
        name: &str,
        total: Duration,
    ) -> (Result<Object>, Option<Duration>) {
        let what = || format!("get pod {ns}/{name}");
        let req = match request::get_pod(ns, name).with_context(what) {
            Ok(r) => r,
            Err(e) => return (Err(e), None),
        };
        let (res, hint) = self.execute_hinted(&req, total);
        let res = res
            .with_context(what)
            .and_then(|body| parse_body(&body, &what()))
            .and_then(|pod| match super::pod::not_the_pod(&pod, ns, name, "") {
                None => Ok(pod),
                Some(why) => Err(status::not_the_object(format!("{}: {why}", what()))),
            });
        (res, hint)
    }

    /// Sends `req` (as built by [`request`]) bounded by `total`; `what` names it in errors.
    fn call(&self, req: Result<Request>, what: &str, total: Duration) -> Result<Vec<u8>> {
        let req = req.context(what)?;
        self.execute(&req, total).context(what)
    }

    /// `apps/v1` DaemonSet `ns/name`, bounded by `total`.
    pub fn get_daemonset_within(&self, ns: &str, name: &str, total: Duration) -> Result<Object> {
        let what = format!("get daemonset {ns}/{name}");
        parse_body(
            &self.call(request::get_daemonset(ns, name), &what, total)?,
            &what,
        )
    }

    /// Node `name`, bounded by `total`.
    pub fn get_node_within(&self, name: &str, total: Duration) -> Result<Object> {
        let what = format!("get node {name}");
        parse_body(&self.call(request::get_node(name), &what, total)?, &what)
    }

    /// Merge-patches `pods/{name}/status`; returns the updated pod.
    pub fn patch_pod_status(&self, ns: &str, name: &str, merge_patch: &Value) -> Result<Object> {
        let what = format!("patch pod {ns}/{name} status");
        let req = request::patch_pod_status(ns, name, merge_patch);
        parse_body(&self.call(req, &what, self.inner.timeouts.total)?, &what)
    }

    /// Deletes a pod, with optional uid / resourceVersion preconditions (409 Conflict on mismatch).
    pub fn delete_pod(
        &self,
        ns: &str,
        name: &str,
        uid: Option<&str>,
        resource_version: Option<&str>,
    ) -> Result<()> {
        let req = request::delete_pod(ns, name, uid, resource_version);
        let what = format!("delete pod {ns}/{name}");
        self.call(req, &what, self.inner.timeouts.total).map(drop)
    }

    pub fn create_event(&self, ns: &str, event: &Value) -> Result<()> {
        let what = format!("create event in namespace {ns}");
        let req = request::create_event(ns, event);
        self.call(req, &what, self.inner.timeouts.total).map(drop)
    }
}

/// Where pods are listed and watched from: the API server ([`Client`]), or a scripted double in the tests
/// of the node's pod watch ([`super::podwatch`]).
pub trait PodSource {
    fn list_pods(&self, p: &ListParams) -> Result<PodList>;
    /// Opens a watch. A non-200 answer (410 included) is the `Err` here; events, `ERROR` events and
    /// stream failures come from the returned iterator.
    fn watch_pods(&self, p: &WatchParams) -> Result<WatchStream>;
}

impl PodSource for Client {
    fn list_pods(&self, p: &ListParams) -> Result<PodList> {
        let what = "list pods";
        let body = self.call(request::list_pods(p), what, self.inner.timeouts.total)?;
        let mut o = parse_body(&body, what)?;
        drop(body);
        // Move the items out of the parsed page instead of copying them: a LIST page is the agent's
        // largest allocation.
        let items = match o.remove("items") {
            Some(Value::Array(a)) => a
                .into_iter()
                .map(|i| match i {
                    Value::Object(o) => Ok(o),
                    _ => Err(Error::Decode(format!("{what}: an item is not an object"))),
                })
                .collect::<Result<Vec<_>>>()?,
            None | Some(Value::Null) => Vec::new(),
            Some(_) => return Err(Error::Decode(format!("{what}: \"items\" is not a list"))),
        };
        let meta = json::obj_of(&o, "metadata");
        let resource_version = meta
            .and_then(|m| json::str_of(m, "resourceVersion"))
            .unwrap_or("")
            .to_string();
        let continue_token = meta
            .and_then(|m| json::str_of(m, "continue"))
            .filter(|c| !c.is_empty())
            .map(str::to_string);
        Ok(PodList {
            items,
            resource_version,
            continue_token,
        })
    }

    /// Without `timeout_seconds`, [`DEFAULT_WATCH_TIMEOUT`] is sent; the client gives up [`WATCH_MARGIN`]
    /// after it. A server gone unheard ends it sooner, by TCP keepalive ([`Timeouts::keepalive`]).
    fn watch_pods(&self, p: &WatchParams) -> Result<super::WatchStream> {
        let what = "watch pods";
        let mut p = p.clone();
        let secs = *p.timeout_seconds.get_or_insert(DEFAULT_WATCH_TIMEOUT);
        let req = request::watch_pods(&p).context(what)?;
        let (total, per_read) = (Some(Duration::from_secs(secs.into()) + WATCH_MARGIN), None);
        let mut opened = self
            .transport()
            .stream(&req, self.token().as_deref(), total, per_read);
        if self.retry_verification(&opened) {
            opened = self
                .transport()
                .stream(&req, self.token().as_deref(), total, per_read);
        }
        let t = self.transport();
        let (mut code, mut reader) = opened.context(what)?;
        if code == 401 && self.inner.token.as_ref().is_some_and(TokenSource::refresh) {
            (code, reader) = t
                .stream(&req, self.token().as_deref(), total, per_read)
                .context(what)?;
        }
        if code != 200 {
            let mut body = Vec::new();
            let _ = reader.take(1 << 20).read_to_end(&mut body);
            return Err(status::decode(code, &body).into_error()).context(what);
        }
        Ok(WatchStream::new(
            reader,
            p.resource_version.clone(),
            format!("{what} ({})", self.server()),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_and_streams_can_move_between_threads() {
        fn send_sync<T: Send + Sync>() {}
        fn send<T: Send>() {}
        send_sync::<Client>();
        send::<WatchStream>();
    }

    #[test]
    fn large_bodies_are_parsed_with_a_depth_bound() {
        let big = format!(
            r#"{{"items":[{}],"metadata":{{"resourceVersion":"1"}}}}"#,
            vec![r#"{"metadata":{"name":"x"}}"#; 200_000].join(",")
        );
        assert!(big.len() > json::MAX_INPUT);
        let o = parse_body(big.as_bytes(), "list pods").unwrap();
        assert_eq!(json::arr_of(&o, "items").unwrap().len(), 200_000);
        let deep = format!("{}{}", "[".repeat(100), "]".repeat(100)) + &" ".repeat(json::MAX_INPUT);
        let e = parse_body(deep.as_bytes(), "list pods").unwrap_err();
        assert!(e.to_string().contains("nested deeper"), "{e}");
        assert!(parse_body(b"\xff\xfe", "get pod").is_err());
    }
}
