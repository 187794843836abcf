//! Settings of the release-1.9 and maistra-2.0 installers that upstream master registers but never reads
//! (or dropped): we refuse each at start with a message that names the modern setting replacing it, so an
//! operator migrating an old chart learns at once instead of running with a setting silently ignored.
//! An empty value counts as unset, as release-1.9 (no `AllowEmptyEnv`) read it.

use crate::error::{Error, Result};
use crate::settings::{flag_name, Env};

/// (name, why it is refused and what replaces it)
const REFUSED: &[(&str, &str)] = &[
    (
        "CNI_NETWORK_CONFIG",
        "this is the release-1.9/maistra template of the istio-cni entry, which this installer (like upstream \
         master) builds from its settings instead: EXCLUDE_NAMESPACES replaces kubernetes.exclude_namespaces, \
         PLUGIN_LOG_LEVEL replaces log_level/__LOG_LEVEL__, and the kubeconfig (__KUBECONFIG_FILEPATH__) is \
         <CNI_AGENT_RUN_DIR>/istio-cni-kubeconfig; remove the variable",
    ),
    (
        "CNI_NETWORK_CONFIG_FILE",
        "this names a release-1.9/maistra template file of the istio-cni entry, which this installer (like \
         upstream master) builds from its settings instead: EXCLUDE_NAMESPACES replaces \
         kubernetes.exclude_namespaces, PLUGIN_LOG_LEVEL replaces log_level/__LOG_LEVEL__, and the kubeconfig \
         (__KUBECONFIG_FILEPATH__) is <CNI_AGENT_RUN_DIR>/istio-cni-kubeconfig; remove the variable",
    ),
    (
        "KUBECFG_FILE_NAME",
        "this named the plugin's kubeconfig in the CNI conf dir (release-1.9/maistra); it is now \
         <CNI_AGENT_RUN_DIR>/istio-cni-kubeconfig, outside the conf dir: set CNI_AGENT_RUN_DIR to move it \
         and remove this variable",
    ),
];

/// Refuses the first legacy setting given as a flag (`flags`: name → value) or a non-empty env var.
pub fn refuse_legacy(flags: &[(&str, &Option<String>)], env: Env<'_>) -> Result<()> {
    for (var, why) in REFUSED {
        let from_flag = flags
            .iter()
            .find(|(n, v)| n == var && v.as_deref().is_some_and(|v| !v.trim().is_empty()))
            .map(|_| flag_name(var));
        let from_env = env(var)
            .filter(|v| !v.trim().is_empty())
            .map(|_| var.to_string());
        if let Some(name) = from_flag.or(from_env) {
            return Err(Error::env(&name, format!("not supported: {why}")));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_is_refused_naming_its_replacement() {
        for (var, modern) in [
            ("CNI_NETWORK_CONFIG", "EXCLUDE_NAMESPACES"),
            ("CNI_NETWORK_CONFIG_FILE", "PLUGIN_LOG_LEVEL"),
            ("KUBECFG_FILE_NAME", "CNI_AGENT_RUN_DIR"),
        ] {
            let env = |k: &str| (k == var).then(|| "{\"type\":\"istio-cni\"}".to_string());
            let e = refuse_legacy(&[], &env).unwrap_err().to_string();
            assert!(e.contains(var) && e.contains(modern), "{e}");
        }
        let empty = |_: &str| Some(String::new());
        assert!(refuse_legacy(&[], &empty).is_ok());
        let none = |_: &str| None;
        let v = Some("ZZZ-istio-cni-kubeconfig".to_string());
        let e = refuse_legacy(&[("KUBECFG_FILE_NAME", &v)], &none)
            .unwrap_err()
            .to_string();
        assert!(e.contains("--kubecfg-file-name"), "{e}");
    }
}
