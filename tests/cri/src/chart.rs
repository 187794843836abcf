//! Upstream's rendered Helm chart (`../shared/conformance/chart/*.yaml`), parsed, and a node that runs our
//! image exactly as that chart asks a kubelet to: a pod sandbox with its own network namespace, then the
//! `install-cni` container with the chart's command, args, env (ConfigMap `envFrom`, `fieldRef`s and
//! `resourceFieldRef`s resolved as kubelet resolves them), host-path mounts, service-account token and
//! security context (capabilities, user, privileged) — all read from the YAML, nothing re-typed.
//! The node that runs it is [`crate::chart_node`].

use crate::util::repo;
use k8s_cri::v1 as cri;
use serde_yaml::Value;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Where the API double listens (on the node namespace's `lo`).
pub const API_IP: &str = "10.89.0.1";
pub const NODE_NAME: &str = "node1";

/// One rendered scenario.
pub struct Chart {
    pub name: String,
    docs: Vec<Value>,
}

/// A scalar as text (strings, booleans, numbers; "" otherwise).
pub fn s(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        _ => String::new(),
    }
}

impl Chart {
    pub fn dir() -> PathBuf {
        match std::env::var_os("CONFORMANCE_DIR") {
            Some(d) if !d.is_empty() => PathBuf::from(d).join("chart"),
            _ => repo().join("../shared/conformance/chart"),
        }
    }

    pub fn load(name: &str) -> Chart {
        let path = Chart::dir().join(format!("{name}.yaml"));
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e} (set CONFORMANCE_DIR)", path.display()));
        let docs = serde_yaml::Deserializer::from_str(&text)
            .map(|d| {
                serde::Deserialize::deserialize(d).unwrap_or_else(|e| panic!("{name}.yaml: {e}"))
            })
            .filter(|v: &Value| !v.is_null())
            .collect();
        Chart {
            name: name.into(),
            docs,
        }
    }

    fn kind(&self, kind: &str, name: &str) -> &Value {
        self.docs
            .iter()
            .find(|d| {
                d["kind"].as_str() == Some(kind) && d["metadata"]["name"].as_str() == Some(name)
            })
            .unwrap_or_else(|| panic!("{}: no {kind} {name}", self.name))
    }

    pub fn daemonset(&self) -> &Value {
        self.kind("DaemonSet", "istio-cni-node")
    }

    pub fn pod_spec(&self) -> &Value {
        &self.daemonset()["spec"]["template"]["spec"]
    }

    pub fn container(&self) -> &Value {
        self.pod_spec()["containers"]
            .as_sequence()
            .and_then(|c| c.iter().find(|c| c["name"].as_str() == Some("install-cni")))
            .unwrap_or_else(|| panic!("{}: no install-cni container", self.name))
    }

    /// A ConfigMap's data.
    pub fn config_map(&self, name: &str) -> BTreeMap<String, String> {
        self.kind("ConfigMap", name)["data"]
            .as_mapping()
            .map(|m| m.iter().map(|(k, v)| (s(k), s(v))).collect())
            .unwrap_or_default()
    }

    /// The `istio-cni-config` value of `key`.
    pub fn setting(&self, key: &str) -> Option<String> {
        self.config_map("istio-cni-config").get(key).cloned()
    }

    /// The host path of volume `name`.
    pub fn host_path(&self, volume: &str) -> Option<String> {
        self.pod_spec()["volumes"]
            .as_sequence()?
            .iter()
            .find(|v| v["name"].as_str() == Some(volume))?["hostPath"]["path"]
            .as_str()
            .map(str::to_string)
    }

    /// Every host path the pod's volumes name.
    pub fn host_paths(&self) -> Vec<String> {
        self.pod_spec()["volumes"]
            .as_sequence()
            .map(|vs| {
                vs.iter()
                    .filter_map(|v| v["hostPath"]["path"].as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The pod's image reference (to be replaced by ours: hub and tag).
    pub fn image(&self) -> String {
        s(&self.container()["image"])
    }

    /// The environment kubelet gives the container, in kubelet's precedence: service variables, then
    /// `envFrom`, then `env` (later wins).
    pub fn env(&self, pod: &AgentPod) -> Vec<(String, String)> {
        let mut env: Vec<(String, String)> = Vec::new();
        let mut set = |k: String, v: String| {
            env.retain(|(x, _)| *x != k);
            env.push((k, v));
        };
        for (k, v) in &pod.service_env {
            set(k.clone(), v.clone());
        }
        let c = self.container();
        for from in c["envFrom"].as_sequence().into_iter().flatten() {
            let cm = s(&from["configMapRef"]["name"]);
            assert!(
                !cm.is_empty(),
                "{}: envFrom other than a configMapRef",
                self.name
            );
            for (k, v) in self.config_map(&cm) {
                set(k, v);
            }
        }
        for e in c["env"].as_sequence().into_iter().flatten() {
            let name = s(&e["name"]);
            let vf = &e["valueFrom"];
            let value = if !vf.is_null() {
                if !vf["fieldRef"].is_null() {
                    match vf["fieldRef"]["fieldPath"].as_str() {
                        Some("spec.nodeName") => NODE_NAME.to_string(),
                        Some("metadata.name") => pod.name.clone(),
                        Some("metadata.namespace") => pod.namespace.clone(),
                        Some("metadata.uid") => pod.uid.clone(),
                        Some("status.podIP") => pod.ip.clone(),
                        Some("spec.serviceAccountName") => {
                            s(&self.pod_spec()["serviceAccountName"])
                        }
                        other => panic!(
                            "{}: fieldRef {other:?} not resolved by this kubelet",
                            self.name
                        ),
                    }
                } else if !vf["resourceFieldRef"].is_null() {
                    // No limits in the chart: kubelet gives the node's allocatable amount.
                    match vf["resourceFieldRef"]["resource"].as_str() {
                        Some("limits.memory") => node_memory_bytes().to_string(),
                        Some("limits.cpu") => std::thread::available_parallelism()
                            .map(|n| n.get())
                            .unwrap_or(1)
                            .to_string(),
                        other => panic!("{}: resourceFieldRef {other:?}", self.name),
                    }
                } else {
                    panic!("{}: env {name}: unsupported valueFrom {vf:?}", self.name)
                }
            } else {
                s(&e["value"])
            };
            set(name, value);
        }
        env
    }

    /// The container's mounts: each volumeMount's host path (containerd resolves it in the node's view).
    pub fn mounts(&self) -> Vec<cri::Mount> {
        let c = self.container();
        c["volumeMounts"]
            .as_sequence()
            .into_iter()
            .flatten()
            .map(|m| {
                let vol = s(&m["name"]);
                let host = self
                    .host_path(&vol)
                    .unwrap_or_else(|| panic!("{}: volume {vol} is not a hostPath", self.name));
                cri::Mount {
                    container_path: s(&m["mountPath"]),
                    host_path: host,
                    readonly: m["readOnly"].as_bool().unwrap_or(false),
                    ..Default::default()
                }
            })
            .collect()
    }

    /// The container's security context as kubelet hands it to the runtime.
    pub fn security_context(&self) -> cri::LinuxContainerSecurityContext {
        let sc = &self.container()["securityContext"];
        let list = |v: &Value| -> Vec<String> {
            v.as_sequence()
                .map(|l| l.iter().map(s).collect())
                .unwrap_or_default()
        };
        cri::LinuxContainerSecurityContext {
            capabilities: Some(cri::Capability {
                add_capabilities: list(&sc["capabilities"]["add"]),
                drop_capabilities: list(&sc["capabilities"]["drop"]),
                ..Default::default()
            }),
            privileged: sc["privileged"].as_bool().unwrap_or(false),
            run_as_user: sc["runAsUser"]
                .as_i64()
                .map(|value| cri::Int64Value { value }),
            run_as_group: sc["runAsGroup"]
                .as_i64()
                .map(|value| cri::Int64Value { value }),
            namespace_options: Some(cri::NamespaceOption {
                network: cri::NamespaceMode::Pod as i32,
                pid: cri::NamespaceMode::Container as i32,
                ipc: cri::NamespaceMode::Pod as i32,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// The capability names the chart adds (for checking the process's effective set).
    pub fn added_capabilities(&self) -> Vec<String> {
        self.security_context()
            .capabilities
            .map(|c| c.add_capabilities)
            .unwrap_or_default()
    }
}

fn node_memory_bytes() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map(|kb| kb * 1024)
        .unwrap_or(0)
}

/// The capability bits of the names (`NET_ADMIN`, ...).
pub fn cap_mask(names: &[String]) -> u64 {
    names
        .iter()
        .map(|n| {
            let bit = match n.as_str() {
                "CHOWN" => 0,
                "DAC_OVERRIDE" => 1,
                "NET_ADMIN" => 12,
                "NET_RAW" => 13,
                "SYS_CHROOT" => 18,
                "SYS_PTRACE" => 19,
                "SYS_ADMIN" => 21,
                other => panic!("capability {other} not in this table"),
            };
            1u64 << bit
        })
        .fold(0, |a, b| a | b)
}

/// The agent's pod, as the API knows it (for fieldRefs).
pub struct AgentPod {
    pub name: String,
    pub namespace: String,
    pub uid: String,
    pub ip: String,
    pub service_env: Vec<(String, String)>,
}
