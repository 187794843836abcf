//! The plugin's network configuration (stdin): the standard CNI keys, Istio's current keys
//! (`exclude_namespaces`, `cni_agent_run_dir`, `plugin_log_level`, `pod_namespace`, `native_nftables`,
//! `ambient_enabled`, read only to refuse ambient mode), our
//! `pod_lookup_timeout_seconds` and `pod_cache`, and the
//! legacy 1.9/maistra ones (`log_level`, `kubernetes{kubeconfig, exclude_namespaces, cni_bin_dir, intercept_type}`).
//! Unknown keys are ignored, as Go's `json.Unmarshal` does.
//!
//! Keys are matched exactly, not with Go's case-insensitive struct-field rules (`json::go_struct`), on
//! purpose: libcni hands a plugin its entry re-marshalled from a map with `name`, `cniVersion` and
//! `prevResult` set under exactly those keys (the ones the runtime itself goes by), and the installer keeps
//! our entry byte-exact (any other spelling of a key is reinstalled away), so the exact key is the value
//! the runtime used. A Go plugin would take a later `cniVerſion` over the runtime's `cniVersion`.

use super::version;
use crate::error::{Error, Result};
use crate::json::{self, Object, Value};
use std::time::Duration;

/// Where the installer puts the plugin's kubeconfig, log socket and backend file.
pub const DEFAULT_AGENT_RUN_DIR: &str = crate::rundir::DEFAULT;
/// Set (`true`) in our entry of the installer's owned file while the node has no primary CNI configuration:
/// there is no network to chain onto, so ADD refuses every pod (fail closed), DEL and CHECK go on as usual.
pub const NO_PRIMARY_KEY: &str = "no_primary";
/// How long ADD keeps retrying a transient pod lookup failure (upstream: 30 attempts, 1 s apart).
pub const DEFAULT_POD_LOOKUP_DEADLINE: Duration = Duration::from_secs(30);

#[derive(Debug, Clone)]
pub struct NetConf {
    pub cni_version: String,
    pub name: String,
    pub plugin_type: String,
    pub exclude_namespaces: Vec<String>,
    pub cni_agent_run_dir: String,
    pub log_level: Option<String>,
    pub pod_namespace: String,
    pub native_nftables: bool,
    /// `ambient_enabled` (upstream's ambient mode, not implemented here): ADD refuses every pod past the
    /// shortcuts while it is true, since upstream would hand an ambient pod to its node agent for capture
    /// and skipping it would start the pod uncaptured. Our installer always writes `false`.
    pub ambient_enabled: bool,
    /// Ask the installer's pod cache first (`pod_cache`, default true; the installer writes `false` when
    /// `POD_CACHE_ENABLED=false`, and the plugin then never touches the cache socket).
    pub pod_cache: bool,
    /// Explicit kubeconfig path (legacy `kubernetes.kubeconfig`); default `<run dir>/istio-cni-kubeconfig`.
    pub kubeconfig: Option<String>,
    /// Total time ADD may spend on transient pod-lookup failures (`pod_lookup_timeout_seconds`).
    pub pod_lookup_deadline: Duration,
    /// The previous plugin's result, kept raw; converted by [`super::result`].
    pub prev_result: Option<Value>,
    /// The whole configuration as received.
    pub raw: Object,
}

impl NetConf {
    /// The agent run dir the installer writes ([`crate::rundir`]).
    pub fn run_dir(&self) -> crate::rundir::RunDir {
        crate::rundir::RunDir::new(&self.cni_agent_run_dir)
    }
    pub fn kubeconfig_path(&self) -> String {
        match &self.kubeconfig {
            Some(p) if !p.is_empty() => p.clone(),
            _ => self.run_dir().kubeconfig().display().to_string(),
        }
    }
}

/// What ADD sees from the installer's entry, for the node's agents (a repaired pod is programmed with it, a
/// pod audited against it): the run dir, the agent's namespace, the excluded ones, the backend.
pub fn for_agents(run_dir: &str, pod_ns: &str, excluded: &[String], nft: bool) -> Result<NetConf> {
    let mut s = String::from(
        r#"{"cniVersion":"1.0.0","name":"istio-cni","type":"istio-cni","cni_agent_run_dir":"#,
    );
    json::write_string(&mut s, run_dir);
    s.push_str(r#","pod_namespace":"#);
    json::write_string(&mut s, pod_ns);
    s.push_str(r#","exclude_namespaces":["#);
    for (i, n) in excluded.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        json::write_string(&mut s, n);
    }
    s.push_str(&format!(r#"],"native_nftables":{nft}}}"#));
    crate::error::Context::context(parse(&s), "repair: plugin configuration")
}

const WHAT: &str = "network configuration";

/// Parses and validates the configuration: bad JSON is code 6, a missing or invalid `name` code 7, an
/// unsupported `cniVersion` code 1.
pub fn parse(stdin: &str) -> Result<NetConf> {
    let raw = json::parse_object(stdin, WHAT)?;
    let cni_version = json::opt_string(&raw, "cniVersion", WHAT)?
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| "0.1.0".to_string());
    let name = json::opt_string(&raw, "name", WHAT)?.unwrap_or_default();
    if name.is_empty() {
        return Err(Error::config("missing network name"));
    }
    validate_network_name(&name)?;
    version::check_supported(&cni_version)?;
    let plugin_type = json::opt_string(&raw, "type", WHAT)?.unwrap_or_default();

    let legacy = match raw.get("kubernetes") {
        None | Some(Value::Null) => None,
        Some(Value::Object(o)) => Some(o),
        Some(_) => {
            return Err(Error::Decode(format!(
                "{WHAT}: field \"kubernetes\" must be an object"
            )))
        }
    };
    let legacy_str = |k: &str| -> Result<Option<String>> {
        match legacy {
            Some(o) => json::opt_string(o, k, "network configuration \"kubernetes\""),
            None => Ok(None),
        }
    };

    let mut exclude_namespaces =
        json::opt_string_list(&raw, "exclude_namespaces", WHAT)?.unwrap_or_default();
    if let Some(o) = legacy {
        if let Some(l) = json::opt_string_list(
            o,
            "exclude_namespaces",
            "network configuration \"kubernetes\"",
        )? {
            exclude_namespaces.extend(l);
        }
    }
    if let Some(t) = legacy_str("intercept_type")? {
        if !t.is_empty() && t != "iptables" {
            return Err(Error::UnsupportedField {
                field: "kubernetes.intercept_type".into(),
                value: t,
            });
        }
    }
    legacy_str("cni_bin_dir")?; // accepted for compatibility; the rules are applied in-process

    let cni_agent_run_dir = json::opt_string(&raw, "cni_agent_run_dir", WHAT)?
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| DEFAULT_AGENT_RUN_DIR.to_string());
    let log_level = match json::opt_string(&raw, "plugin_log_level", WHAT)? {
        Some(l) if !l.is_empty() => Some(l),
        _ => json::opt_string(&raw, "log_level", WHAT)?.filter(|l| !l.is_empty()),
    };
    let pod_lookup_deadline = pod_lookup_deadline(&raw)?;

    Ok(NetConf {
        cni_version,
        name,
        plugin_type,
        exclude_namespaces,
        cni_agent_run_dir,
        log_level,
        pod_namespace: json::opt_string(&raw, "pod_namespace", WHAT)?.unwrap_or_default(),
        native_nftables: json::opt_bool(&raw, "native_nftables", WHAT)?.unwrap_or(false),
        ambient_enabled: json::opt_bool(&raw, "ambient_enabled", WHAT)?.unwrap_or(false),
        pod_cache: json::opt_bool(&raw, "pod_cache", WHAT)?.unwrap_or(true),
        kubeconfig: legacy_str("kubeconfig")?,
        pod_lookup_deadline,
        prev_result: match raw.get("prevResult") {
            None | Some(Value::Null) => None,
            Some(v) => Some(v.clone()),
        },
        raw,
    })
}

/// `pod_lookup_timeout_seconds`: seconds in (0, 600], [`DEFAULT_POD_LOOKUP_DEADLINE`] when absent.
fn pod_lookup_deadline(raw: &Object) -> Result<Duration> {
    Ok(match raw.get("pod_lookup_timeout_seconds") {
        None | Some(Value::Null) => DEFAULT_POD_LOOKUP_DEADLINE,
        Some(Value::Number(n)) => {
            let secs = match n {
                json::Number::U64(u) => *u as f64,
                json::Number::I64(i) => *i as f64,
                json::Number::F64(f) => *f,
            };
            if !(secs > 0.0 && secs <= 600.0) {
                return Err(Error::config(format!(
                    "pod_lookup_timeout_seconds must be between 0 and 600, got {secs}"
                )));
            }
            Duration::from_secs_f64(secs)
        }
        Some(_) => {
            return Err(Error::Decode(format!(
                "{WHAT}: pod_lookup_timeout_seconds must be a number"
            )))
        }
    })
}

/// `^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$` (libcni `ValidateNetworkName`).
pub fn validate_network_name(name: &str) -> Result<()> {
    let mut c = name.chars();
    let ok = matches!(c.next(), Some(x) if x.is_ascii_alphanumeric())
        && c.all(|x| x.is_ascii_alphanumeric() || matches!(x, '_' | '.' | '-'));
    if ok {
        Ok(())
    } else {
        Err(Error::config(format!(
            "invalid network name {name:?}: must match [a-zA-Z0-9][a-zA-Z0-9_.-]*"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn current_keys() {
        let c = parse(
            r#"{"cniVersion":"1.0.0","name":"k8s-pod-network","type":"istio-cni",
                "exclude_namespaces":["kube-system","istio-system"],"cni_agent_run_dir":"/tmp/x/",
                "plugin_log_level":"debug","pod_namespace":"istio-system","native_nftables":false,
                "some_unknown":{"deep":[1,2]}}"#,
        )
        .unwrap();
        assert_eq!(c.exclude_namespaces, vec!["kube-system", "istio-system"]);
        assert_eq!(c.kubeconfig_path(), "/tmp/x/istio-cni-kubeconfig");
        assert_eq!(c.log_level.as_deref(), Some("debug"));
        assert_eq!(c.pod_namespace, "istio-system");
        assert_eq!(c.pod_lookup_deadline, DEFAULT_POD_LOOKUP_DEADLINE);
        assert!(c.prev_result.is_none());
        assert!(c.pod_cache);
        let off = parse(r#"{"cniVersion":"1.0.0","name":"n","pod_cache":false}"#).unwrap();
        assert!(!off.pod_cache);
        assert!(parse(r#"{"cniVersion":"1.0.0","name":"n","pod_cache":"no"}"#).is_err());
    }

    #[test]
    fn legacy_keys() {
        let c = parse(
            r#"{"cniVersion":"0.3.1","name":"n","type":"istio-cni","log_level":"info",
                "kubernetes":{"kubeconfig":"/etc/cni/net.d/ZZZ-istio-cni-kubeconfig","cni_bin_dir":"/opt/cni/bin",
                "exclude_namespaces":["istio-system"],"intercept_type":"iptables","k8s_api_root":"x"}}"#,
        )
        .unwrap();
        assert_eq!(c.exclude_namespaces, vec!["istio-system"]);
        assert_eq!(
            c.kubeconfig_path(),
            "/etc/cni/net.d/ZZZ-istio-cni-kubeconfig"
        );
        assert_eq!(c.log_level.as_deref(), Some("info"));
        assert_eq!(c.cni_agent_run_dir, DEFAULT_AGENT_RUN_DIR);
    }

    #[test]
    fn unsupported_intercept_type_is_code_2() {
        let e =
            parse(r#"{"cniVersion":"0.3.1","name":"n","kubernetes":{"intercept_type":"ebpf"}}"#)
                .unwrap_err();
        assert_eq!(e.cni_code(), 2);
        assert!(e.to_string().contains("intercept_type"));
    }

    #[test]
    fn protocol_errors() {
        for (text, code) in [
            ("not json", 6),
            (r#"{"cniVersion":"1.0.0"}"#, 7),
            (r#"{"cniVersion":"1.0.0","name":""}"#, 7),
            (r#"{"cniVersion":"1.0.0","name":"-bad"}"#, 7),
            (r#"{"cniVersion":"9.9.9","name":"n"}"#, 1),
            (
                r#"{"cniVersion":"1.0.0","name":"n","exclude_namespaces":"x"}"#,
                6,
            ),
            (
                r#"{"cniVersion":"1.0.0","name":"n","pod_lookup_timeout_seconds":0}"#,
                7,
            ),
        ] {
            assert_eq!(parse(text).unwrap_err().cni_code(), code, "{text}");
        }
    }

    #[test]
    fn missing_version_means_0_1_0() {
        assert_eq!(parse(r#"{"name":"n"}"#).unwrap().cni_version, "0.1.0");
    }

    #[test]
    fn lookup_deadline_is_configurable() {
        let c =
            parse(r#"{"cniVersion":"1.0.0","name":"n","pod_lookup_timeout_seconds":2.5}"#).unwrap();
        assert_eq!(c.pod_lookup_deadline, Duration::from_millis(2500));
    }
}
