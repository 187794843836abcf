//! The node's one pod watch in `install-cni`: a LIST + WATCH of this node's pods
//! (`fieldSelector=spec.nodeName=<node>`, [`crate::repair::listwatch::watch_forever`]) that feeds the pod
//! cache the plugin asks first ([`crate::podcache`], on by default, `POD_CACHE_ENABLED=false` turns it
//! off) and, with `REPAIR_ENABLED=true`, the in-process repair agent, whose label and field selectors then
//! apply to each pod here instead of on the server. One watch per node, however many users.

use super::options::Settings;
use crate::json::{self, Object};
use crate::podcache::{reduce, server::Cache};
use crate::repair::controller::RepairSink;
use crate::repair::listwatch::{self, PodSink, Selection};
use std::path::PathBuf;

/// What the node's watch feeds.
struct NodeSink {
    cache: Option<Cache>,
    repair: Option<RepairSink>,
    synced_logged: bool,
    caught_up_logged: bool,
}

impl PodSink for NodeSink {
    fn list_begun(&mut self) {
        if let Some(c) = &self.cache {
            c.update(|s| s.list_begun());
        }
        if let Some(r) = &mut self.repair {
            r.list_begun();
        }
    }

    fn pod(&mut self, pod: Object) {
        if let Some(c) = &self.cache {
            // Reduced outside the lock: the server never waits for the reduction.
            let r = reduce::reduce(&pod);
            c.update(|s| s.apply(r));
        }
        if let Some(r) = &mut self.repair {
            r.pod(pod);
        }
    }

    fn gone(&mut self, pod: &Object) {
        if let Some(c) = &self.cache {
            let meta = json::obj_of(pod, "metadata");
            let field = |k: &str| meta.and_then(|m| json::str_of(m, k)).unwrap_or("");
            c.update(|s| s.delete(field("namespace"), field("name"), field("uid")));
        }
        if let Some(r) = &mut self.repair {
            r.gone(pod);
        }
    }

    fn list_done(&mut self) {
        if let Some(c) = &self.cache {
            let n = c.update(|s| {
                s.list_done();
                s.len()
            });
            if !self.synced_logged {
                self.synced_logged = true;
                log::info!("pod cache: synced, {n} pods of this node");
            }
        }
        if let Some(r) = &mut self.repair {
            r.list_done();
        }
    }

    fn watch_up(&mut self, restart: bool) {
        if let Some(c) = &self.cache {
            // Not live yet: what the watch missed may still be on its way (`caught_up`).
            c.update(|s| s.watch_open());
            if restart {
                crate::podcache::metrics::watch_restarted();
            }
        }
    }

    fn wants_catch_up(&self) -> bool {
        self.cache.is_some()
    }

    fn caught_up(&mut self) {
        if let Some(c) = &self.cache {
            c.update(|s| s.caught_up());
            if !self.caught_up_logged {
                self.caught_up_logged = true;
                log::info!(
                    "pod cache: caught up with the API server; answering lookups by name too"
                );
            }
        }
    }

    fn watch_down(&mut self) {
        if let Some(c) = &self.cache {
            c.update(|s| s.watch_closed());
        }
    }
}

/// The API client of the in-process agents: in-cluster, with the installer's service account dir and
/// service host.
fn client(s: &Settings) -> crate::Result<crate::kube::Client> {
    crate::kube::Config::in_cluster_from(
        Some(s.k8s_host.clone()),
        Some(s.k8s_port.clone()),
        &s.service_account_dir,
    )
    .and_then(crate::kube::Client::from_config)
}

/// Starts the pod cache (socket in the run dir) and the repair agent as configured, and the one watch
/// feeding them. A failure is logged and the installer keeps running: without the socket the plugin
/// reads pods from the API server as before.
pub fn start(s: &Settings) {
    if !s.pod_cache {
        log::info!("pod cache disabled (POD_CACHE_ENABLED=false): the plugin reads every pod from the API server");
    }
    if !s.repair.enabled {
        log::info!("repair agent disabled (REPAIR_ENABLED=false)");
    }
    if !s.pod_cache && !s.repair.enabled {
        return;
    }
    let node = s.watch_node.clone();
    let cache_on = s.pod_cache && !node.is_empty();
    if s.pod_cache && node.is_empty() {
        log::warn!(
            "pod cache not started: no node name (set NODE_NAME from the pod's spec.nodeName)"
        );
    }
    let client = match client(s) {
        Ok(c) => c,
        Err(e) => {
            log::error!("pod watch not started (no pod cache, no repair agent): {e}");
            return;
        }
    };
    let repair = if s.repair.enabled {
        let rt = crate::repair::Runtime {
            host_proc: PathBuf::from(crate::repair::options::DEFAULT_HOST_PROC),
            cni_agent_run_dir: s.run_dir.display().to_string(),
            native_nftables: s.native_nftables,
            monitoring_port: None,
            run_as_daemon: true,
        };
        match crate::repair::start_in_installer(client.clone(), s.repair.clone(), rt) {
            Ok(sink) => {
                log::info!("repair agent started");
                Some(sink)
            }
            Err(e) => {
                log::error!("repair agent not started: {e}");
                None
            }
        }
    } else {
        None
    };
    let cache = if cache_on { start_cache(s) } else { None };
    let sel = match (&cache, &repair) {
        (Some(_), _) => Selection {
            label: None,
            field: format!("spec.nodeName={node}"),
            what: "pod watch",
        },
        (None, Some(_)) => Selection::of_repair(&s.repair),
        (None, None) => return,
    };
    let mut sink = NodeSink {
        cache,
        repair,
        synced_logged: false,
        caught_up_logged: false,
    };
    log::info!(
        "pod watch: fieldSelector {:?} labelSelector {:?} (pod cache {}, repair {})",
        sel.field,
        sel.label.as_deref().unwrap_or(""),
        if sink.cache.is_some() { "on" } else { "off" },
        if sink.repair.is_some() { "on" } else { "off" }
    );
    let spawned = std::thread::Builder::new()
        .name("pod-watch".into())
        .spawn(move || listwatch::watch_forever(&client, &sel, &mut sink));
    if let Err(e) = spawned {
        log::error!("pod watch not started: {e}");
    }
}

/// The cache and its server on `<run dir>/pod-cache.sock`.
fn start_cache(s: &Settings) -> Option<Cache> {
    let path = crate::rundir::RunDir::new(&s.run_dir).pod_cache_socket();
    let started = Cache::new().and_then(|c| {
        crate::podcache::server::serve(c.clone(), path.clone())?;
        Ok(c)
    });
    match started {
        Ok(c) => {
            log::info!("pod cache on {}", path.display());
            Some(c)
        }
        Err(e) => {
            log::error!("pod cache not started: {e}");
            None
        }
    }
}
