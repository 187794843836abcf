//! The node's one pod watch in `install-cni`: a LIST + WATCH of this node's pods
//! (`fieldSelector=spec.nodeName=<node>`, [`crate::kube::podwatch::watch_forever`]) that feeds the pod
//! cache the plugin asks first ([`crate::podcache`], on by default, `POD_CACHE_ENABLED=false` turns it
//! off) and, with `REPAIR_ENABLED=true`, the in-process repair agent, whose label and field selectors then
//! apply to each pod here instead of on the server. One watch per node, however many users.

use super::super::settings::options::Settings;
use crate::kube::podwatch::{self, Fanout, PodSink};
use crate::podcache::server::Cache;

/// The API client of the in-process agents: in-cluster, with the installer's service account dir and
/// service host.
pub(in crate::install) fn client(s: &Settings) -> crate::Result<crate::kube::Client> {
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
    if !s.agents.repair.enabled {
        log::info!("repair agent disabled (REPAIR_ENABLED=false)");
    }
    let node = s.node_name.clone();
    let audit = !s.agents.audit_interval.is_zero() && !node.is_empty();
    if !s.pod_cache && !s.agents.repair.enabled && !audit {
        return;
    }
    let cache_on = s.pod_cache && !node.is_empty();
    if s.pod_cache && node.is_empty() {
        log::warn!(
            "pod cache not started: no node name (set NODE_NAME from the pod's spec.nodeName)"
        );
    }
    if !s.agents.audit_interval.is_zero() && node.is_empty() {
        log::warn!(
            "audit not started: no node name (set NODE_NAME from the pod's spec.nodeName); no running pod's rules are verified"
        );
    }
    let (client, conf) = match client(s).and_then(|c| Ok((c, net_conf(s)?))) {
        Ok(c) => c,
        Err(e) => {
            log::error!("pod watch not started (no pod cache, no repair agent): {e}");
            return;
        }
    };
    let mut sinks: Vec<Box<dyn PodSink + Send>> = Vec::new();
    let mut cache = false;
    if let Some(c) = cache_on.then(|| start_cache(s)).flatten() {
        sinks.push(Box::new(c));
        cache = true;
    }
    let failed = |what: &str, e| {
        log::error!("{what} not started: {e}");
        Ok(())
    };
    let Ok(agents) = s.agents.start(&client, &conf, (true, audit), &failed) else {
        return;
    };
    if agents.repair {
        log::info!("repair agent started");
    }
    let Some(sel) = agents.selection(&s.agents, &node, cache) else {
        return;
    };
    let (repair, audited) = (agents.repair, agents.audit);
    sinks.extend(agents.sinks);
    let on = |b: bool| if b { "on" } else { "off" };
    log::info!(
        "pod watch: fieldSelector {:?} labelSelector {:?} (pod cache {}, repair {}, audit {}: {:?})",
        sel.field,
        sel.label.as_deref().unwrap_or(""),
        on(cache),
        on(repair),
        on(audited),
        s.agents.audit_interval
    );
    let sinks = Fanout::new(sinks);
    let spawned = std::thread::Builder::new()
        .name("pod-watch".into())
        .spawn(move || podwatch::watch_forever(&client, &sel, sinks));
    if let Err(e) = spawned {
        log::error!("pod watch not started: {e}");
    }
}

/// The plugin's configuration the in-process agents act with: the installer's entry, as ADD sees it.
pub(in crate::install) fn net_conf(s: &Settings) -> crate::Result<crate::cni::NetConf> {
    let excluded = s.exclude_namespaces.as_deref().unwrap_or_default();
    let run = s.run_dir.display().to_string();
    crate::cni::conf::for_agents(&run, &s.pod_namespace, excluded, s.native_nftables)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::install::settings::options::tests::resolve_with;

    fn settings(pairs: &[(&str, &str)]) -> Settings {
        let mut env = vec![("NODE_NAME", "n1"), ("REPAIR_LABEL_SELECTORS", "app=web")];
        env.extend_from_slice(pairs);
        resolve_with(&Default::default(), &env).unwrap()
    }

    #[test]
    fn the_agents_run_with_the_installers_plugin_configuration_and_the_host_proc() {
        let s = settings(&[
            ("NATIVE_NFTABLES", "true"),
            ("EXCLUDE_NAMESPACES", "kube-system,infra"),
            ("POD_NAMESPACE", "istio-system"),
            ("AUDIT_INTERVAL", "5s"),
        ]);
        assert_eq!(s.agents.host_proc, std::path::Path::new("/host/proc"));
        assert_eq!(s.agents.audit_interval, std::time::Duration::from_secs(5));
        let conf = net_conf(&s).unwrap();
        assert!(conf.native_nftables);
        assert_eq!(conf.exclude_namespaces, ["kube-system", "infra"]);
        assert_eq!(conf.pod_namespace, "istio-system");
        assert_eq!(conf.cni_agent_run_dir, s.run_dir.display().to_string());
        assert_eq!(
            settings(&[]).agents.audit_interval,
            crate::audit::DEFAULT_INTERVAL
        );
    }

    #[test]
    fn the_watch_lists_the_whole_node_unless_the_repair_agent_runs_alone() {
        let s = settings(&[]);
        let selection = |cache, repair, audit| {
            let agents = crate::agents::Agents {
                repair,
                audit,
                ..Default::default()
            };
            agents.selection(&s.agents, &s.node_name, cache)
        };
        for (cache, audit) in [(true, false), (false, true), (true, true)] {
            for repair in [false, true] {
                let sel = selection(cache, repair, audit).unwrap();
                assert_eq!((sel.label, sel.field.as_str()), (None, "spec.nodeName=n1"));
            }
        }
        // The repair agent alone: its selectors on the server.
        let sel = selection(false, true, false).unwrap();
        assert_eq!(sel.label.as_deref(), Some("app=web"));
        assert_eq!(sel.field, "spec.nodeName=n1");
        assert_eq!(sel.what, "repair");
        assert!(selection(false, false, false).is_none());
    }
}
