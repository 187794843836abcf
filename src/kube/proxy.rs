//! Which proxy, if any, carries the API connections, decided once per client since a client talks to one
//! server: the kubeconfig cluster's `proxy-url` when set, else the environment read as client-go's
//! transport reads it (Go's `http.ProxyFromEnvironment`, golang.org/x/net/http/httpproxy).
//!
//! - `proxy-url` is checked as client-go's `clientcmd` checks it (`http`, `https` or `socks5`; anything else
//!   refuses the kubeconfig) and then used as client-go uses it (`http.ProxyURL`): for every request of
//!   that cluster, the environment and `NO_PROXY` not read. A `socks5` one is passed over for a direct
//!   connection with a warning, as a SOCKS proxy from the environment is (below).
//! - An `https://` server goes through `HTTPS_PROXY` (else `https_proxy`), an `http://` one through
//!   `HTTP_PROXY` (else `http_proxy`); `ALL_PROXY` is not read. (ureq's own reading took `ALL_PROXY`, then
//!   `HTTPS_PROXY`, then `HTTP_PROXY` for any scheme.)
//! - `NO_PROXY` (else `no_proxy`): comma-separated, each entry trimmed and lower-cased; `*` matches all; a
//!   CIDR (`10.96.0.0/12`, `fd00::/8`) matches the server's IP in it; an IP (optionally `:port`, IPv6 as
//!   `[addr]:port`) matches that IP; a name matches itself and its subdomains (`svc` matches
//!   `kubernetes.default.svc`), `.name` and `*.name` its subdomains only, each optionally `:port`. (ureq's
//!   own reading matched neither CIDRs nor entries with a space after the comma, so a node whose runtime
//!   has `NO_PROXY=localhost, 10.96.0.0/12` sent the plugin's API requests to the proxy.)
//! - A proxy without a scheme is `http://`; `http` and `https` proxies (any case) are supported (CONNECT);
//!   with a SOCKS (or any other) proxy the connection is direct, as before this reading, with a warning
//!   naming the variable (refusing it stopped every pod start of a node whose runtime carries one for image
//!   pulls).
//! - Deviation kept from before: Go never proxies `localhost` or a loopback IP from the environment; we do
//!   when a proxy is set and `NO_PROXY` does not exclude it. (Go's `proxy-url` proxies them too: no
//!   difference there.)

use std::net::IpAddr;

use ipnet::IpNet;

use crate::error::{Error, Result};

/// The first of `names` set to a non-empty value (Go's `getEnvAny`), with its name.
fn env_any<'a>(
    env: &impl Fn(&str) -> Option<String>,
    names: [&'a str; 2],
) -> Option<(&'a str, String)> {
    names
        .into_iter()
        .find_map(|n| env(n).filter(|v| !v.is_empty()).map(|v| (n, v)))
}

/// The server's host (IPv6 without brackets, lower-case) and port (the scheme's default when absent).
fn host_port(server: &str) -> Option<(String, u16, bool)> {
    let (https, rest) = match server.split_once("://")? {
        ("https", r) => (true, r),
        ("http", r) => (false, r),
        _ => return None,
    };
    let authority = rest.split('/').next()?;
    let (host, port) = match authority.strip_prefix('[') {
        Some(v6) => {
            let (h, after) = v6.split_once(']')?;
            (h, after.strip_prefix(':'))
        }
        None => match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        },
    };
    let port = match port {
        Some(p) => p.parse().ok()?,
        None if https => 443,
        None => 80,
    };
    Some((host.to_ascii_lowercase(), port, https))
}

/// Whether one `NO_PROXY` entry (already trimmed and lower-cased, not `*`) excludes `host:port`.
fn entry_matches(entry: &str, host: &str, ip: Option<IpAddr>, port: u16) -> bool {
    if let Ok(net) = entry.parse::<IpNet>() {
        return ip.is_some_and(|ip| net.contains(&ip));
    }
    // host:port, [v6]:port, or a bare host (an IPv6 literal has colons but no port).
    let (phost, pport) = if let Some(v6) = entry.strip_prefix('[') {
        match v6.split_once(']') {
            Some((h, rest)) => (h, rest.strip_prefix(':')),
            None => return false,
        }
    } else if entry.parse::<IpAddr>().is_ok() {
        (entry, None)
    } else {
        match entry.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (entry, None),
        }
    };
    let port_ok = pport.map_or(true, |p| p.parse::<u16>() == Ok(port));
    if phost.is_empty() {
        return false;
    }
    if let Ok(pip) = phost.parse::<IpAddr>() {
        return ip == Some(pip) && port_ok;
    }
    let phost = phost
        .strip_prefix('*')
        .filter(|p| p.starts_with('.'))
        .unwrap_or(phost);
    let name_match = match phost.strip_prefix('.') {
        // ".name": subdomains only.
        Some(_) => host.ends_with(phost),
        // "name": itself and its subdomains.
        None => host == phost || host.ends_with(&format!(".{phost}")),
    };
    name_match && port_ok
}

/// Whether `NO_PROXY`'s value excludes the server `host:port`.
pub fn excluded(no_proxy: &str, host: &str, port: u16) -> bool {
    let ip = host.parse::<IpAddr>().ok();
    no_proxy
        .split(',')
        .map(|e| e.trim().to_ascii_lowercase())
        .filter(|e| !e.is_empty())
        .any(|e| e == "*" || entry_matches(&e, host, ip, port))
}

/// The proxy URL for connections to `server`, from `env` (a variable's value by name), or `None` for a
/// direct connection.
pub fn choose(server: &str, env: impl Fn(&str) -> Option<String>) -> Option<String> {
    let (host, port, https) = host_port(server)?;
    let names = match https {
        true => ["HTTPS_PROXY", "https_proxy"],
        false => ["HTTP_PROXY", "http_proxy"],
    };
    let (var, proxy) = env_any(&env, names)?;
    if env_any(&env, ["NO_PROXY", "no_proxy"]).is_some_and(|(_, np)| excluded(&np, &host, port)) {
        return None;
    }
    let proxy = proxy.trim();
    match proxy.contains("://") {
        true => connect_or_direct(proxy, var, server, "exclude the server with NO_PROXY"),
        false => Some(format!("http://{proxy}")),
    }
}

/// `url`'s scheme, lower-cased as Go's `url.Parse` lower-cases it, and what follows its `://`.
pub(super) fn split_scheme(url: &str) -> Option<(String, &str)> {
    let (scheme, rest) = url.split_once("://")?;
    Some((scheme.to_ascii_lowercase(), rest))
}

/// `url` (`scheme://…`) when it is a CONNECT proxy (`http`, `https`, any case), with the scheme lower-cased
/// as Go's `url.Parse` does; `None` (a direct connection) for any other, with a warning naming `source`
/// and what silences it (`hint`).
fn connect_or_direct(url: &str, source: &str, server: &str, hint: &str) -> Option<String> {
    let (scheme, rest) = split_scheme(url)?;
    if scheme == "http" || scheme == "https" {
        return Some(format!("{scheme}://{rest}"));
    }
    // Connected directly, as before this reading (ureq passed a SOCKS proxy over): refusing it would stop
    // every sidecar pod of a node whose runtime carries one for its image pulls, and the connection is
    // verified against the cluster CA either way.
    log::warn!(
        "{source}: a {scheme} proxy is not supported for the API server {server} (only http:// and \
         https:// proxies): connecting directly; {hint} to silence this"
    );
    None
}

/// A kubeconfig's `proxy-url` (`field` names it in messages), checked as client-go's `clientcmd` checks it:
/// `http`, `https` or `socks5` (any case), with a host; empty is unset.
pub fn kubeconfig_proxy_url(url: &str, field: &str, origin: &str) -> Result<Option<String>> {
    let url = url.trim();
    if url.is_empty() {
        return Ok(None);
    }
    let bad = |why: String| Error::config(format!("{origin}: {field}: {why}"));
    let (scheme, rest) =
        split_scheme(url).ok_or_else(|| bad(format!("{:?} is not a URL", redacted(url))))?;
    if !matches!(scheme.as_str(), "http" | "https" | "socks5") {
        return Err(bad(format!(
            "unsupported scheme {scheme:?}, must be http, https, or socks5"
        )));
    }
    let authority = rest.split('/').next().unwrap_or("");
    if authority.rsplit('@').next().unwrap_or("").is_empty() {
        return Err(bad(format!("{:?} names no host", redacted(url))));
    }
    Ok(Some(format!("{scheme}://{rest}")))
}

/// `url` with its user information (a proxy's credentials) replaced, for messages and `Debug`.
pub fn redacted(url: &str) -> String {
    let start = url.find("://").map_or(0, |i| i + 3);
    let end = url[start..].find('/').map_or(url.len(), |i| start + i);
    match url[start..end].rfind('@') {
        Some(at) => format!("{}<redacted>{}", &url[..start], &url[start + at..]),
        None => url.to_string(),
    }
}

/// The proxy for a client of `server` configured by `origin`: its kubeconfig's `proxy-url` when set (as
/// client-go, the environment and `NO_PROXY` are then not read), else the environment's ([`from_env`]).
pub fn for_client(proxy_url: Option<&str>, server: &str, origin: &str) -> Option<String> {
    match proxy_url {
        Some(url) => connect_or_direct(url, &format!("{origin}: proxy-url"), server, "remove it"),
        None => from_env(server),
    }
}

/// [`choose`] from this process's environment.
pub fn from_env(server: &str) -> Option<String> {
    choose(server, |k| std::env::var(k).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    const P: &str = "http://proxy:3128";

    #[test]
    fn the_scheme_picks_the_variable() {
        let https = env(&[("HTTPS_PROXY", P)]);
        assert_eq!(choose("https://10.96.0.1:443", &https).as_deref(), Some(P));
        assert_eq!(choose("http://10.96.0.1:80", &https), None);
        let http = env(&[("HTTP_PROXY", P), ("ALL_PROXY", P), ("all_proxy", P)]);
        assert_eq!(choose("https://10.96.0.1:443", &http), None);
        assert_eq!(choose("http://10.96.0.1", &http).as_deref(), Some(P));
        let lower = env(&[("HTTPS_PROXY", ""), ("https_proxy", "proxy:3128")]);
        assert_eq!(choose("https://h", &lower).as_deref(), Some(P));
        assert_eq!(choose("https://h", env(&[])), None);
    }

    #[test]
    fn no_proxy_entries_as_go_reads_them() {
        let ex = |np: &str, host: &str, port: u16| excluded(np, host, port);
        // CIDRs, with spaces after the commas.
        assert!(ex("localhost, 10.96.0.0/12", "10.96.0.1", 443));
        assert!(ex("fd00::/8", "fd00::1", 443));
        assert!(!ex("10.96.0.0/12", "10.112.0.1", 443));
        assert!(!ex("10.96.0.0/12", "kubernetes.default.svc", 443));
        // IPs, with and without a port.
        assert!(ex(" 10.96.0.1 ", "10.96.0.1", 443));
        assert!(ex("10.96.0.1:443", "10.96.0.1", 443));
        assert!(!ex("10.96.0.1:6443", "10.96.0.1", 443));
        assert!(ex("fd00::1", "fd00::1", 443));
        assert!(ex("[fd00::1]:443", "fd00::1", 443));
        assert!(!ex("[fd00::1]:80", "fd00::1", 443));
        // Names: itself and subdomains; a leading dot or *. only subdomains; case-insensitive.
        assert!(ex("svc", "kubernetes.default.svc", 443));
        assert!(ex("Default.SVC", "default.svc", 443));
        assert!(ex(".svc", "kubernetes.default.svc", 443));
        assert!(!ex(".default.svc", "default.svc", 443));
        assert!(ex("*.default.svc", "kubernetes.default.svc", 443));
        assert!(!ex("*.default.svc", "default.svc", 443));
        assert!(!ex("fault.svc", "default.svc", 443));
        assert!(ex("default.svc:443", "default.svc", 443));
        assert!(!ex("default.svc:80", "default.svc", 443));
        assert!(ex("a, *", "anything", 1));
        assert!(!ex("", "h", 443));
        assert!(!ex(" , ,", "h", 443));
    }

    #[test]
    fn no_proxy_excludes_the_server() {
        let e = env(&[("HTTPS_PROXY", P), ("NO_PROXY", "example.com, 10.0.0.0/8")]);
        assert_eq!(choose("https://10.96.0.1:443", &e), None);
        assert_eq!(choose("https://192.168.1.1:443", &e).as_deref(), Some(P));
        let v6 = env(&[("HTTPS_PROXY", P), ("no_proxy", "fd00::/64")]);
        assert_eq!(choose("https://[fd00::1]:6443", &v6), None);
        assert_eq!(choose("https://[fd01::1]:6443", &v6).as_deref(), Some(P));
        let port = env(&[("HTTPS_PROXY", P), ("NO_PROXY", "api.example:6443")]);
        assert_eq!(choose("https://api.example:6443/prefix", &port), None);
        assert_eq!(
            choose("https://api.example/prefix", &port).as_deref(),
            Some(P)
        );
    }

    // Go's url.Parse lower-cases the scheme: HTTP://proxy is an http proxy, not an unknown scheme passed
    // over for a direct connection.
    #[test]
    fn the_proxy_scheme_is_read_case_insensitively() {
        let e = env(&[("HTTPS_PROXY", "HTTP://proxy:3128")]);
        assert_eq!(choose("https://10.96.0.1", &e).as_deref(), Some(P));
        let e = env(&[("HTTPS_PROXY", "Https://proxy:3128")]);
        assert_eq!(
            choose("https://10.96.0.1", &e).as_deref(),
            Some("https://proxy:3128")
        );
    }

    #[test]
    fn socks_is_passed_over_for_a_direct_connection() {
        let e = env(&[("https_proxy", "socks5://s:1080")]);
        assert_eq!(choose("https://10.96.0.1", &e), None);
        let bypassed = env(&[("https_proxy", "socks5://s:1080"), ("NO_PROXY", "*")]);
        assert_eq!(choose("https://10.96.0.1", &bypassed), None);
    }
}
