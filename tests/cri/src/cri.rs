//! The CRI client, as kubelet uses it: runtime.v1 over containerd's unix socket (k8s-cri's generated tonic
//! client). Async; tests run on tokio.

use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use k8s_cri::v1::*;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use tonic::transport::{Channel, Endpoint, Uri};

#[derive(Clone)]
pub struct Cri {
    pub rt: RuntimeServiceClient<Channel>,
}

/// What the tests ask for a pod: metadata, labels and annotations (as kubelet copies them from the pod).
#[derive(Clone, Debug, Default)]
pub struct PodSpec {
    pub name: String,
    pub namespace: String,
    pub uid: String,
    pub annotations: HashMap<String, String>,
    /// The sandbox attempt (kubelet counts up when it makes a pod's sandbox again).
    pub attempt: u32,
}

/// The runtime's view of a sandbox.
#[derive(Debug)]
pub struct SandboxView {
    pub ready: bool,
    pub ip: String,
    pub netns: Option<String>,
}

impl Cri {
    pub async fn connect(socket: &Path) -> Cri {
        let path: PathBuf = socket.to_path_buf();
        let channel = Endpoint::try_from("http://[::]:50051")
            .expect("endpoint")
            .connect_with_connector(tower::service_fn(move |_: Uri| {
                let path = path.clone();
                async move {
                    Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(
                        tokio::net::UnixStream::connect(path).await?,
                    ))
                }
            }))
            .await
            .expect("connect to containerd's CRI socket");
        Cri {
            rt: RuntimeServiceClient::new(channel),
        }
    }

    pub fn sandbox_config(pod: &PodSpec) -> PodSandboxConfig {
        PodSandboxConfig {
            metadata: Some(PodSandboxMetadata {
                name: pod.name.clone(),
                uid: pod.uid.clone(),
                namespace: pod.namespace.clone(),
                attempt: pod.attempt,
            }),
            hostname: pod.name.clone(),
            annotations: pod.annotations.clone(),
            labels: HashMap::from([
                ("io.kubernetes.pod.name".to_string(), pod.name.clone()),
                (
                    "io.kubernetes.pod.namespace".to_string(),
                    pod.namespace.clone(),
                ),
                ("io.kubernetes.pod.uid".to_string(), pod.uid.clone()),
            ]),
            linux: Some(LinuxPodSandboxConfig {
                // Where the kubelet's cgroupfs driver puts a pod: the agent finds a pod's namespace by it.
                cgroup_parent: format!("/kubepods/besteffort/pod{}", pod.uid),
                security_context: Some(LinuxSandboxSecurityContext {
                    namespace_options: Some(NamespaceOption {
                        network: NamespaceMode::Pod as i32,
                        pid: NamespaceMode::Container as i32,
                        ipc: NamespaceMode::Pod as i32,
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// RunPodSandbox: the sandbox id, or the runtime's error message.
    pub async fn run_pod(&self, pod: &PodSpec) -> Result<String, String> {
        let mut rt = self.rt.clone();
        rt.run_pod_sandbox(RunPodSandboxRequest {
            config: Some(Cri::sandbox_config(pod)),
            runtime_handler: String::new(),
        })
        .await
        .map(|r| r.into_inner().pod_sandbox_id)
        .map_err(|s| s.message().to_string())
    }

    /// PodSandboxStatus (verbose): ready, IP, and the netns path from the runtime spec in `info`.
    pub async fn status(&self, id: &str) -> Result<SandboxView, String> {
        let mut rt = self.rt.clone();
        let r = rt
            .pod_sandbox_status(PodSandboxStatusRequest {
                pod_sandbox_id: id.to_string(),
                verbose: true,
            })
            .await
            .map_err(|s| s.message().to_string())?
            .into_inner();
        let st = r.status.ok_or("no status")?;
        let netns = r
            .info
            .get("info")
            .and_then(|i| serde_json::from_str::<serde_json::Value>(i).ok())
            .and_then(|v| {
                v["runtimeSpec"]["linux"]["namespaces"]
                    .as_array()?
                    .iter()
                    .find(|n| n["type"] == "network")?["path"]
                    .as_str()
                    .map(str::to_string)
            });
        Ok(SandboxView {
            ready: st.state == PodSandboxState::SandboxReady as i32,
            ip: st.network.map(|n| n.ip).unwrap_or_default(),
            netns,
        })
    }

    pub async fn stop(&self, id: &str) -> Result<(), String> {
        let mut rt = self.rt.clone();
        rt.stop_pod_sandbox(StopPodSandboxRequest {
            pod_sandbox_id: id.to_string(),
        })
        .await
        .map(|_| ())
        .map_err(|s| s.message().to_string())
    }

    pub async fn remove(&self, id: &str) -> Result<(), String> {
        let mut rt = self.rt.clone();
        rt.remove_pod_sandbox(RemovePodSandboxRequest {
            pod_sandbox_id: id.to_string(),
        })
        .await
        .map(|_| ())
        .map_err(|s| s.message().to_string())
    }

    /// Every sandbox id the runtime knows.
    pub async fn list(&self) -> Vec<String> {
        let mut rt = self.rt.clone();
        rt.list_pod_sandbox(ListPodSandboxRequest { filter: None })
            .await
            .expect("ListPodSandbox")
            .into_inner()
            .items
            .into_iter()
            .map(|s| s.id)
            .collect()
    }

    /// The sandboxes of the pod with this uid (any state), as kubelet finds them before re-creating one.
    pub async fn list_for_uid(&self, uid: &str) -> Result<Vec<String>, String> {
        let mut rt = self.rt.clone();
        let filter = PodSandboxFilter {
            label_selector: HashMap::from([("io.kubernetes.pod.uid".to_string(), uid.to_string())]),
            ..Default::default()
        };
        rt.list_pod_sandbox(ListPodSandboxRequest {
            filter: Some(filter),
        })
        .await
        .map(|r| r.into_inner().items.into_iter().map(|s| s.id).collect())
        .map_err(|s| s.message().to_string())
    }

    /// Every sandbox the runtime knows, with its pod name, state and creation time (ns since the epoch).
    pub async fn list_detailed(&self) -> Result<Vec<(String, String, bool, i64)>, String> {
        let mut rt = self.rt.clone();
        rt.list_pod_sandbox(ListPodSandboxRequest { filter: None })
            .await
            .map(|r| {
                r.into_inner()
                    .items
                    .into_iter()
                    .map(|s| {
                        (
                            s.id,
                            s.metadata.map(|m| m.name).unwrap_or_default(),
                            s.state == PodSandboxState::SandboxReady as i32,
                            s.created_at,
                        )
                    })
                    .collect()
            })
            .map_err(|s| s.message().to_string())
    }

    pub async fn create_container(
        &self,
        sandbox_id: &str,
        config: ContainerConfig,
        sandbox: &PodSandboxConfig,
    ) -> Result<String, String> {
        let mut rt = self.rt.clone();
        rt.create_container(CreateContainerRequest {
            pod_sandbox_id: sandbox_id.to_string(),
            config: Some(config),
            sandbox_config: Some(sandbox.clone()),
        })
        .await
        .map(|r| r.into_inner().container_id)
        .map_err(|s| s.message().to_string())
    }

    pub async fn start_container(&self, id: &str) -> Result<(), String> {
        let mut rt = self.rt.clone();
        rt.start_container(StartContainerRequest {
            container_id: id.to_string(),
        })
        .await
        .map(|_| ())
        .map_err(|s| s.message().to_string())
    }

    /// StopContainer with kubelet's grace period (SIGTERM, then SIGKILL after `timeout` seconds).
    pub async fn stop_container(&self, id: &str, timeout: i64) -> Result<(), String> {
        let mut rt = self.rt.clone();
        rt.stop_container(StopContainerRequest {
            container_id: id.to_string(),
            timeout,
        })
        .await
        .map(|_| ())
        .map_err(|s| s.message().to_string())
    }

    pub async fn remove_container(&self, id: &str) -> Result<(), String> {
        let mut rt = self.rt.clone();
        rt.remove_container(RemoveContainerRequest {
            container_id: id.to_string(),
        })
        .await
        .map(|_| ())
        .map_err(|s| s.message().to_string())
    }

    /// The container's state (CONTAINER_RUNNING = 1, EXITED = 2), exit code and host pid (verbose info).
    pub async fn container_state(&self, id: &str) -> Result<(i32, i32, Option<u32>), String> {
        let mut rt = self.rt.clone();
        let r = rt
            .container_status(ContainerStatusRequest {
                container_id: id.to_string(),
                verbose: true,
            })
            .await
            .map_err(|s| s.message().to_string())?
            .into_inner();
        let st = r.status.ok_or("no status")?;
        let pid = r
            .info
            .get("info")
            .and_then(|i| serde_json::from_str::<serde_json::Value>(i).ok())
            .and_then(|v| v["pid"].as_u64())
            .map(|p| p as u32);
        Ok((st.state, st.exit_code, pid))
    }
}

/// Best effort, from a drop (a failed test): stops and removes every sandbox still there, through the CRI,
/// on a thread with its own runtime (the drop may run inside the test's runtime).
pub fn remove_all_sandboxes(sock: PathBuf) {
    let _ = std::thread::spawn(move || {
        let Ok(rt) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        else {
            return;
        };
        rt.block_on(async {
            let cri = Cri::connect(&sock).await;
            for id in cri.list().await {
                let _ = cri.stop(&id).await;
                let _ = cri.remove(&id).await;
            }
        });
    })
    .join();
}

/// A pod UID as the API server makes them (hex digits and dashes, what a kubelet cgroup path can name),
/// unique per call.
pub fn pod_uid(name: &str) -> String {
    // FNV-1a over the name, the pid and a count of the UIDs made.
    static MADE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let tail = std::process::id()
        .to_le_bytes()
        .into_iter()
        .chain(n.to_le_bytes());
    for b in name.bytes().chain(tail) {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    format!(
        "{:08x}-{:04x}-4000-8000-{:012x}",
        h >> 32,
        (h >> 16) & 0xffff,
        h & 0xffff_ffff_ffff
    )
}
