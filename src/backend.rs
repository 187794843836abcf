//! The seam below the plugin's ADD/CHECK and the repair agent: one rule backend per mode, both fed by the
//! same pure pod plan ([`crate::plugin::sidecar::plan`]: decision → redirect → [`CaptureConfig`]).
//! iptables applies the rendered `iptables-restore` documents (with its host backend probe record);
//! nftables applies one netlink batch built from the same configuration (no host binary, no record).

use crate::cni::NetConf;
use crate::error::{Context, Result};
use crate::iptables::apply::{self as ipt, Plan};
use crate::redirect::CaptureConfig;
use std::path::Path;
use std::time::Instant;

/// What one pod needs, in both backends' terms (built once, purely).
#[derive(Debug, Clone)]
pub struct PodRules {
    /// The shared configuration (the nftables backend generates from it).
    pub capture: CaptureConfig,
    /// The iptables documents rendered from it.
    pub plan: Plan,
    /// `"REDIRECT mode, IPv4"` and the like, for the decision log.
    pub summary: String,
}

/// Programs and verifies a pod's namespace.
pub trait RuleBackend {
    /// `iptables-nft`, `iptables-legacy`, … or `nftables`, for logs.
    fn name(&self) -> String;
    /// Applies `rules` in the namespace at `netns_path`; returns the decision-log text.
    fn apply(&self, netns_path: &str, rules: PodRules, built_us: u128) -> Result<String>;
    /// CHECK: the namespace holds exactly our rules.
    fn verify(&self, netns_path: &str, rules: PodRules) -> Result<()>;
}

/// iptables through `iptables-restore` (the backend the installer probed, from the run dir).
pub struct Iptables(pub crate::iptables::Backend);

/// nf_tables over `NETLINK_NETFILTER` (`native_nftables: true`).
pub struct Nftables;

/// The backend the configuration selects.
pub fn for_conf(conf: &NetConf) -> Result<Box<dyn RuleBackend>> {
    if conf.native_nftables {
        return Ok(Box::new(Nftables));
    }
    let b = crate::iptables::backend::for_plugin(Path::new(&conf.cni_agent_run_dir))?;
    Ok(Box::new(Iptables(b)))
}

impl RuleBackend for Iptables {
    fn name(&self) -> String {
        format!("iptables ({})", self.0.name())
    }

    fn apply(&self, netns_path: &str, rules: PodRules, built_us: u128) -> Result<String> {
        let report = ipt::apply(netns_path, self.0, rules.plan)
            .context("program the pod's network namespace")?;
        let steps: Vec<String> = report
            .iter()
            .map(|(f, o, us)| format!("{} {:?} in {:.1} ms", f.name(), o, *us as f64 / 1000.0))
            .collect();
        Ok(format!(
            "redirected ({}, iptables backend {}): rules built in {:.2} ms, {}",
            rules.summary,
            self.0.name(),
            built_us as f64 / 1000.0,
            steps.join(", ")
        ))
    }

    fn verify(&self, netns_path: &str, rules: PodRules) -> Result<()> {
        ipt::check(netns_path, self.0, rules.plan.docs)
    }
}

impl RuleBackend for Nftables {
    fn name(&self) -> String {
        "nftables".into()
    }

    fn apply(&self, netns_path: &str, rules: PodRules, built_us: u128) -> Result<String> {
        let t = Instant::now();
        let cfg = &rules.capture;
        let rs = crate::nftables::generate(cfg)?.ruleset();
        let outcome =
            crate::nftables::apply::apply(netns_path, rs, cfg.enable_ipv6, cfg.tproxy_route())?;
        Ok(format!(
            "redirected ({}, nftables): rules built in {:.2} ms, {:?} in {:.1} ms",
            rules.summary,
            built_us as f64 / 1000.0,
            outcome,
            t.elapsed().as_micros() as f64 / 1000.0
        ))
    }

    fn verify(&self, netns_path: &str, rules: PodRules) -> Result<()> {
        let rs = crate::nftables::generate(&rules.capture)?.ruleset();
        crate::nftables::apply::check(netns_path, rs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn native_nftables_selects_the_netlink_backend_without_probing_iptables() {
        // The run dir does not exist: the iptables backend would have to probe, nftables never looks.
        let conf = crate::cni::conf::parse(
            r#"{"cniVersion":"1.0.0","name":"n","type":"istio-cni","native_nftables":true,
                "cni_agent_run_dir":"/nonexistent/istio-cni-run"}"#,
        )
        .unwrap();
        assert_eq!(for_conf(&conf).unwrap().name(), "nftables");
    }
}
