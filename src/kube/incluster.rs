//! The in-cluster configuration: `KUBERNETES_SERVICE_HOST`/`_PORT` and the service account's token and CA,
//! as client-go's `rest.InClusterConfig`; or `KUBECONFIG` when set.

use std::path::{Path, PathBuf};

use super::config::{check_certs, Config, SA_DIR};
use super::token::TokenSource;
use crate::error::{Error, IoContext, Result};

impl Config {
    /// The in-cluster configuration: `KUBERNETES_SERVICE_HOST`/`_PORT`, the service account's token and CA.
    pub fn in_cluster() -> Result<Config> {
        Config::in_cluster_from(
            std::env::var("KUBERNETES_SERVICE_HOST").ok(),
            std::env::var("KUBERNETES_SERVICE_PORT").ok(),
            Path::new(SA_DIR),
        )
    }

    /// [`Config::in_cluster`] with explicit inputs (tests, and callers with their own environment).
    pub fn in_cluster_from(
        host: Option<String>,
        port: Option<String>,
        sa_dir: &Path,
    ) -> Result<Config> {
        let set = |v: Option<String>, var| {
            v.filter(|v| !v.is_empty())
                .ok_or_else(|| Error::env(var, "not set; is this not running within a pod?"))
        };
        let host = set(host, "KUBERNETES_SERVICE_HOST")?;
        let port = set(port, "KUBERNETES_SERVICE_PORT")?;
        if port.parse::<u16>().map_or(true, |p| p == 0) {
            return Err(Error::env(
                "KUBERNETES_SERVICE_PORT",
                format!("{port:?} is not a port number"),
            ));
        }
        let origin = "in-cluster configuration".to_string();
        let host_part = if host.contains(':') && !host.starts_with('[') {
            format!("[{host}]")
        } else {
            host
        };
        let ca_path = sa_dir.join("ca.crt");
        let ca = std::fs::read(&ca_path)
            .io_context(|| format!("{origin}: read {}", ca_path.display()))?;
        check_certs(&ca, &origin, &ca_path.display().to_string())?;
        let token = TokenSource::file(sa_dir.join("token"), "service-account token", &origin)?;
        Ok(Config {
            server: format!("https://{host_part}:{port}"),
            ca_pem: Some(ca),
            ca_file: Some(ca_path),
            insecure: false,
            client_cert_pem: None,
            client_key_pem: None,
            token: Some(token),
            proxy_url: None,
            origin,
        })
    }

    /// `KUBECONFIG` when set (a single path), otherwise in-cluster, like client-go's default rest config.
    pub fn from_env() -> Result<Config> {
        match std::env::var_os("KUBECONFIG").filter(|k| !k.is_empty()) {
            Some(p) => Config::from_kubeconfig(&PathBuf::from(p)),
            None => Config::in_cluster(),
        }
    }
}
