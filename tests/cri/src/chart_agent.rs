//! The chart's agent pod on a [`ChartNode`], started and ended as kubelet does: a pod sandbox, the
//! `install-cni` container with the chart's command, args, env, mounts and security context, and our image.
//! [`ChartNode::start_agent`] is the one-off agent the scenarios use; [`ChartNode::start_daemon_pod`] and
//! [`ChartNode::end_daemon_pod`] are the pods a rolling DaemonSet makes and ends: each owned by the
//! chart's DaemonSet in the API, with its own service-account token bound to its pod object.

use crate::chart::{s, AgentPod, API_IP, NODE_NAME};
use crate::chart_node::{our_image_archive, ChartNode};
use crate::cri::{Cri, PodSpec};
use crate::util::run;
use k8s_cri::v1 as cri;
use serde_yaml::Value;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// One agent pod: its name, sandbox, container and IP, and what its container was created with (a
/// container restarted in place is created again from it).
#[derive(Debug, Clone)]
pub struct Agent {
    pub name: String,
    pub sandbox: String,
    pub container: String,
    pub ip: String,
    pub config: cri::ContainerConfig,
    pub sandbox_config: cri::PodSandboxConfig,
}

/// How an agent pod is started.
struct Start<'a> {
    name: String,
    /// Owned by the chart's DaemonSet (ownerReferences), with a token bound to the pod.
    daemon: bool,
    /// The directory the container log goes to.
    logs: PathBuf,
    extra_env: &'a [(&'a str, &'a str)],
}

impl ChartNode {
    /// Starts the chart's pod and container with our image: (sandbox id, container id, pod IP).
    pub async fn start_agent(&self) -> (String, String, String) {
        self.start_agent_with(&[]).await
    }

    /// [`ChartNode::start_agent`] with variables added after the chart's, replacing any of the same name (a
    /// test knob, e.g. a node root that does not exist, for a node whose iptables the agent cannot run).
    pub async fn start_agent_with(&self, extra_env: &[(&str, &str)]) -> (String, String, String) {
        let a = self
            .start_pod(Start {
                name: format!("istio-cni-node-{}", std::process::id() % 100000),
                daemon: false,
                logs: self.dir.join("logs"),
                extra_env,
            })
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        (a.sandbox, a.container, a.ip)
    }

    /// The chart's DaemonSet (as rendered) and this node (Linux) in the API: what an agent reads at SIGTERM
    /// to tell a rolling update from an uninstall.
    pub fn serve_daemonset_and_node(&self) {
        let ds = serde_json::to_value(self.chart.daemonset()).expect("DaemonSet as JSON");
        self.srv
            .add_daemonset(&ds.to_string())
            .expect("add DaemonSet");
        let node = serde_json::json!({"metadata": {"name": NODE_NAME,
            "labels": {"kubernetes.io/os": "linux", "kubernetes.io/hostname": NODE_NAME}}, "spec": {}});
        self.srv.add_node(&node.to_string()).expect("add node");
    }

    /// A pod of the chart's DaemonSet named `name` (`istio-cni-node-<suffix>`), as the controller creates it
    /// and kubelet runs it; its log is [`ChartNode::daemon_log`].
    pub async fn start_daemon_pod(&self, name: &str, extra_env: &[(&str, &str)]) -> Agent {
        self.try_start_daemon_pod(name, extra_env)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`ChartNode::start_daemon_pod`], the runtime's error instead of a panic (kubelet would retry).
    pub async fn try_start_daemon_pod(
        &self,
        name: &str,
        extra_env: &[(&str, &str)],
    ) -> Result<Agent, String> {
        self.start_pod(Start {
            name: name.to_string(),
            daemon: true,
            logs: self.dir.join(format!("logs-{name}")),
            extra_env,
        })
        .await
    }

    /// Ends a DaemonSet pod as kubelet does: StopContainer with the chart's grace period (SIGTERM, SIGKILL
    /// after 30 s), the sandbox stopped and removed, then the pod object deleted (its token with it).
    /// Returns how long StopContainer took (SIGTERM to exit).
    pub async fn end_daemon_pod(&self, a: &Agent) -> Duration {
        self.try_end_daemon_pod(a)
            .await
            .unwrap_or_else(|e| panic!("{e}\n{}", self.daemon_log(&a.name)))
    }

    /// [`ChartNode::end_daemon_pod`], the runtime's error instead of a panic.
    pub async fn try_end_daemon_pod(&self, a: &Agent) -> Result<Duration, String> {
        let t = Instant::now();
        self.cri
            .stop_container(&a.container, 30)
            .await
            .map_err(|e| format!("StopContainer {}: {e}", a.name))?;
        let took = t.elapsed();
        self.cri
            .stop(&a.sandbox)
            .await
            .map_err(|e| format!("StopPodSandbox {}: {e}", a.name))?;
        self.cri
            .remove(&a.sandbox)
            .await
            .map_err(|e| format!("RemovePodSandbox {}: {e}", a.name))?;
        let _ = self.srv.delete_pod("istio-system", &a.name);
        Ok(took)
    }

    /// The container restarted in place, as kubelet does after it exited (`restartPolicy: Always`): a new
    /// container (the next attempt) in the same sandbox, created from the same configuration, started; the
    /// exited one removed. Returns the agent with its new container.
    pub async fn restart_agent_container(&self, a: &Agent) -> Result<Agent, String> {
        let mut config = a.config.clone();
        if let Some(m) = config.metadata.as_mut() {
            m.attempt += 1;
        }
        let cid = self
            .cri
            .create_container(&a.sandbox, config.clone(), &a.sandbox_config)
            .await
            .map_err(|e| format!("CreateContainer {} (restart): {e}", a.name))?;
        self.cri
            .start_container(&cid)
            .await
            .map_err(|e| format!("StartContainer {} (restart): {e}", a.name))?;
        let _ = self.cri.remove_container(&a.container).await;
        Ok(Agent {
            container: cid,
            config,
            ..a.clone()
        })
    }

    /// The agent container's process id on the host (None when it is not running).
    pub async fn agent_pid(&self, a: &Agent) -> Option<u32> {
        match self.cri.container_state(&a.container).await {
            Ok((1, _, pid)) => pid,
            _ => None,
        }
    }

    /// The log of DaemonSet pod `name`.
    pub fn daemon_log(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.join(format!("logs-{name}/install-cni.log")))
            .unwrap_or_default()
    }

    async fn start_pod(&self, start: Start<'_>) -> Result<Agent, String> {
        let (_, image) = our_image_archive();
        let name = start.name;
        let uid = format!("uid-{name}");
        let tmpl = &self.chart.daemonset()["spec"]["template"]["metadata"];
        let to_map = |v: &Value| -> std::collections::HashMap<String, String> {
            v.as_mapping()
                .map(|m| m.iter().map(|(k, v)| (s(k), s(v))).collect())
                .unwrap_or_default()
        };
        let spec = PodSpec {
            name: name.clone(),
            namespace: "istio-system".into(),
            uid: uid.clone(),
            annotations: to_map(&tmpl["annotations"]),
            attempt: 0,
        };
        let mut sandbox = Cri::sandbox_config(&spec);
        sandbox.labels.extend(to_map(&tmpl["labels"]));
        std::fs::create_dir_all(&start.logs).unwrap();
        sandbox.log_directory = start.logs.to_string_lossy().into_owned();
        // The pod object first, as the controller creates it before kubelet runs it.
        let mut pod = serde_json::json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "istio-system", "uid": uid,
                         "labels": to_map(&tmpl["labels"])},
            "spec": {"nodeName": NODE_NAME, "containers": [{"name": "install-cni"}]},
            "status": {}});
        if start.daemon {
            pod["metadata"]["ownerReferences"] = serde_json::json!([{"apiVersion": "apps/v1",
                "kind": "DaemonSet", "name": "istio-cni-node", "uid": "uid-istio-cni-node",
                "controller": true, "blockOwnerDeletion": true}]);
        }
        self.srv.add_pod(&pod.to_string()).unwrap();
        let mut rt = self.cri.rt.clone();
        let sid = rt
            .run_pod_sandbox(cri::RunPodSandboxRequest {
                config: Some(sandbox.clone()),
                runtime_handler: String::new(),
            })
            .await
            .map_err(|e| format!("RunPodSandbox for the agent pod {name}: {}", e.message()))?
            .into_inner()
            .pod_sandbox_id;
        // Everything after the sandbox in one block: on an error the sandbox is stopped and removed, so a
        // retry under the same name and attempt is not refused as already reserved.
        let rest = async {
            let ip = self
                .cri
                .status(&sid)
                .await
                .map_err(|e| format!("PodSandboxStatus of the agent pod {name}: {e}"))?
                .ip;
            pod["status"]["podIP"] = ip.clone().into();
            self.srv.add_pod(&pod.to_string()).unwrap();
            // The service-account volume: the shared token, or (a DaemonSet pod) one bound to this pod.
            let sa = if start.daemon {
                let sa = self.dir.join(format!("sa-{name}"));
                std::fs::create_dir_all(&sa).unwrap();
                let token = format!("token-{name}");
                std::fs::write(sa.join("token"), &token).unwrap();
                std::fs::write(sa.join("ca.crt"), self.srv.ca_pem()).unwrap();
                std::fs::write(sa.join("namespace"), "istio-system").unwrap();
                self.srv.bind_token(&token, "istio-system", &name);
                sa
            } else {
                self.dir.join("sa")
            };
            let port = self.srv.addr().port().to_string();
            let agent = AgentPod {
                name: name.clone(),
                namespace: "istio-system".into(),
                uid,
                ip: ip.clone(),
                service_env: vec![
                    ("KUBERNETES_SERVICE_HOST".into(), API_IP.into()),
                    ("KUBERNETES_SERVICE_PORT".into(), port.clone()),
                    ("KUBERNETES_SERVICE_PORT_HTTPS".into(), port),
                ],
            };
            let c = self.chart.container();
            let list = |v: &Value| -> Vec<String> {
                v.as_sequence()
                    .map(|l| l.iter().map(s).collect())
                    .unwrap_or_default()
            };
            let mut mounts = self.chart.mounts();
            mounts.push(cri::Mount {
                container_path: "/var/run/secrets/kubernetes.io/serviceaccount".into(),
                host_path: sa.to_string_lossy().into_owned(),
                readonly: true,
                ..Default::default()
            });
            let config = cri::ContainerConfig {
                metadata: Some(cri::ContainerMetadata {
                    name: "install-cni".into(),
                    attempt: 0,
                }),
                image: Some(cri::ImageSpec {
                    image: image.clone(),
                    ..Default::default()
                }),
                command: list(&c["command"]),
                args: list(&c["args"]),
                // The test's variables win over the chart's (a container must not see a name twice: which
                // one a process reads would depend on its libc).
                envs: self
                    .chart
                    .env(&agent)
                    .into_iter()
                    .filter(|(k, _)| !start.extra_env.iter().any(|(x, _)| x == k))
                    .chain(
                        start
                            .extra_env
                            .iter()
                            .map(|(k, v)| (k.to_string(), v.to_string())),
                    )
                    .map(|(key, value)| cri::KeyValue { key, value })
                    .collect(),
                mounts,
                log_path: "install-cni.log".into(),
                linux: Some(cri::LinuxContainerConfig {
                    security_context: Some(self.chart.security_context()),
                    ..Default::default()
                }),
                ..Default::default()
            };
            let cid = self
                .cri
                .create_container(&sid, config.clone(), &sandbox)
                .await
                .map_err(|e| format!("CreateContainer install-cni ({name}): {e}"))?;
            self.cri
                .start_container(&cid)
                .await
                .map_err(|e| format!("StartContainer install-cni ({name}): {e}"))?;
            Ok(Agent {
                name,
                sandbox: sid.clone(),
                container: cid,
                ip,
                config,
                sandbox_config: sandbox,
            })
        }
        .await;
        if rest.is_err() {
            let _ = self.cri.stop(&sid).await;
            let _ = self.cri.remove(&sid).await;
        }
        rest
    }

    /// The agent's log (CRI format, one line per log line).
    pub fn agent_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("logs/install-cni.log")).unwrap_or_default()
    }

    /// GET http://<ip>:8000/readyz from the node (kubelet's probe): the HTTP status, "000" if none.
    pub fn readyz(&self, ip: &str) -> String {
        let out = run(
            "nsenter",
            &[
                &format!("--net={}", self.ns.path()),
                "curl",
                "-s",
                "-m",
                "1",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                &format!("http://{ip}:8000/readyz"),
            ],
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }
}
