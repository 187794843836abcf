//! The `REPAIR_*` settings the installer reads for the in-process repair agent: master names, and the
//! dashed release-1.9 names (`REPAIR_NODE-NAME`, ...) as aliases when the master name is unset. Malformed
//! values fail the installer at start like every other setting.

use super::config::{parse_bool, Env};
use crate::error::{Error, Result};

/// The repair agent's settings, read by the installer (REPAIR_ENABLED runs the agent in-process).
/// Names: master `REPAIR_<NAME>` (flag `--repair-<name>` upstream); the release-1.9 dashed env names
/// (`REPAIR_NODE-NAME`, …) are accepted as aliases when the master name is unset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepairSettings {
    /// REPAIR_ENABLED (true).
    pub enabled: bool,
    /// REPAIR_NODE_NAME / REPAIR_NODE-NAME (""; the DaemonSet sets it from spec.nodeName).
    pub node_name: String,
    /// REPAIR_LABEL_PODS / REPAIR_LABEL-PODS (false).
    pub label_pods: bool,
    /// REPAIR_DELETE_PODS / REPAIR_DELETE-PODS (false).
    pub delete_pods: bool,
    /// REPAIR_REPAIR_PODS (false, master's code default; the chart sets true; master only, env only).
    pub repair_pods: bool,
    /// REPAIR_BROKEN_POD_LABEL_KEY / REPAIR_BROKEN-POD-LABEL-KEY (cni.istio.io/uninitialized).
    pub broken_pod_label_key: String,
    /// REPAIR_BROKEN_POD_LABEL_VALUE / REPAIR_BROKEN-POD-LABEL-VALUE (true).
    pub broken_pod_label_value: String,
    /// REPAIR_SIDECAR_ANNOTATION / REPAIR_SIDECAR-ANNOTATION (sidecar.istio.io/status).
    pub sidecar_annotation: String,
    /// REPAIR_INIT_CONTAINER_NAME / REPAIR_INIT-CONTAINER-NAME (istio-validation).
    pub init_container_name: String,
    /// REPAIR_INIT_CONTAINER_TERMINATION_MESSAGE / REPAIR_INIT-CONTAINER-TERMINATION-MESSAGE ("").
    pub init_container_termination_message: String,
    /// REPAIR_INIT_CONTAINER_EXIT_CODE / REPAIR_INIT-CONTAINER-EXIT-CODE (126).
    pub init_container_exit_code: i32,
    /// REPAIR_LABEL_SELECTORS / REPAIR_LABEL-SELECTORS ("").
    pub label_selectors: String,
    /// REPAIR_FIELD_SELECTORS / REPAIR_FIELD-SELECTORS ("").
    pub field_selectors: String,
}

impl RepairSettings {
    /// The repair agent's options (field for field upstream's `RepairConfig`).
    pub fn to_options(&self) -> crate::repair::options::Options {
        crate::repair::options::Options {
            enabled: self.enabled,
            node_name: self.node_name.clone(),
            label_key: self.broken_pod_label_key.clone(),
            label_value: self.broken_pod_label_value.clone(),
            repair_pods: self.repair_pods,
            delete_pods: self.delete_pods,
            label_pods: self.label_pods,
            sidecar_annotation: self.sidecar_annotation.clone(),
            init_container_name: self.init_container_name.clone(),
            init_termination_msg: self.init_container_termination_message.clone(),
            init_exit_code: i64::from(self.init_container_exit_code),
            label_selectors: self.label_selectors.clone(),
            field_selectors: self.field_selectors.clone(),
        }
    }
}

/// A repair env value: master name, else the 1.9 dashed alias.
fn repair_env(env: Env<'_>, master: &str) -> Option<(String, String)> {
    if let Some(v) = env(master) {
        return Some((master.to_string(), v));
    }
    let suffix = master.strip_prefix("REPAIR_")?;
    let alias = format!("REPAIR_{}", suffix.replace('_', "-"));
    env(&alias).map(|v| (alias, v))
}

/// Parses the REPAIR_* settings.
pub fn repair_settings(env: Env<'_>) -> Result<RepairSettings> {
    let t = |var: &str, d: &str| {
        repair_env(env, var)
            .map(|(_, v)| v)
            .unwrap_or_else(|| d.into())
    };
    let b = |var: &str, d: bool| -> Result<bool> {
        match repair_env(env, var) {
            Some((_, v)) if v.trim().is_empty() => Ok(d),
            Some((n, v)) => parse_bool(&n, &v),
            None => Ok(d),
        }
    };
    let exit_code = match repair_env(env, "REPAIR_INIT_CONTAINER_EXIT_CODE") {
        Some((_, v)) if v.trim().is_empty() => 126,
        Some((n, v)) => v
            .trim()
            .parse::<i32>()
            .map_err(|_| Error::env(n, format!("{v:?} is not an integer exit code")))?,
        None => 126,
    };
    Ok(RepairSettings {
        enabled: b("REPAIR_ENABLED", true)?,
        node_name: t("REPAIR_NODE_NAME", ""),
        label_pods: b("REPAIR_LABEL_PODS", false)?,
        delete_pods: b("REPAIR_DELETE_PODS", false)?,
        repair_pods: b("REPAIR_REPAIR_PODS", false)?,
        broken_pod_label_key: t("REPAIR_BROKEN_POD_LABEL_KEY", "cni.istio.io/uninitialized"),
        broken_pod_label_value: t("REPAIR_BROKEN_POD_LABEL_VALUE", "true"),
        sidecar_annotation: t("REPAIR_SIDECAR_ANNOTATION", "sidecar.istio.io/status"),
        init_container_name: t("REPAIR_INIT_CONTAINER_NAME", "istio-validation"),
        init_container_termination_message: t("REPAIR_INIT_CONTAINER_TERMINATION_MESSAGE", ""),
        init_container_exit_code: exit_code,
        label_selectors: t("REPAIR_LABEL_SELECTORS", ""),
        field_selectors: t("REPAIR_FIELD_SELECTORS", ""),
    })
}
