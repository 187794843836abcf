//! The workload pods on a [`ChartNode`]: sidecar pods served by the API double and run through CRI, and the
//! rules read back in their network namespaces (through the node's mount view, where containerd's netns
//! mounts are).

use crate::chart::NODE_NAME;
use crate::chart_node::ChartNode;
use crate::cri::PodSpec;
use crate::util::run;

impl ChartNode {
    /// Runs argv in the node's mount view and the network namespace at `netns`.
    pub fn in_pod_netns(&self, netns: &str, argv: &[&str]) -> std::process::Output {
        let net = format!("--net={netns}");
        let mut a = vec!["nsenter", net.as_str()];
        a.extend_from_slice(argv);
        self.in_node_mounts(&a)
    }

    /// Runs argv in the node's mount view (where containerd's mounts are).
    pub fn in_node_mounts(&self, argv: &[&str]) -> std::process::Output {
        let pid = self.holder_pid();
        let mnt = format!("--mount=/proc/{pid}/ns/mnt");
        // Our root, not the namespace's (they differ when the tests run chrooted).
        let root = format!("--root=/proc/{pid}/root");
        let mut a = vec![mnt.as_str(), root.as_str(), "--"];
        a.extend_from_slice(argv);
        run("nsenter", &a)
    }

    /// Like [`ChartNode::rules`], but an error when the namespace could not be read (gone, nsenter failed):
    /// a pod is never counted unredirected (nor redirected) on a failed read.
    pub fn try_rules(&self, netns: &str) -> Result<String, String> {
        let prog = self.iptables_save();
        let ipt = self.in_pod_netns(netns, &[prog]);
        if !ipt.status.success() {
            return Err(format!(
                "{prog} in {netns}: {}",
                String::from_utf8_lossy(&ipt.stderr).trim()
            ));
        }
        let nft = self.in_pod_netns(netns, &["nft", "list", "ruleset"]);
        if !nft.status.success() {
            return Err(format!(
                "nft list ruleset in {netns}: {}",
                String::from_utf8_lossy(&nft.stderr).trim()
            ));
        }
        Ok(format!(
            "{}{}",
            String::from_utf8_lossy(&ipt.stdout),
            String::from_utf8_lossy(&nft.stdout)
        ))
    }

    /// The pod netns's rules: the iptables rules (the backend the plugin recorded), then the nftables
    /// listing of our `inet istio-*` tables (native_nftables mode); "" when nothing can be read.
    pub fn rules(&self, netns: &str) -> String {
        let mut out = self.iptables_rules(netns);
        out.push_str(&String::from_utf8_lossy(
            &self.in_pod_netns(netns, &["nft", "list", "ruleset"]).stdout,
        ));
        out
    }

    fn iptables_rules(&self, netns: &str) -> String {
        String::from_utf8_lossy(&self.in_pod_netns(netns, &[self.iptables_save()]).stdout)
            .into_owned()
    }

    /// The `iptables-*-save` of the backend the plugin recorded in the run dir (nft when none is).
    fn iptables_save(&self) -> &'static str {
        let backend = std::fs::read_to_string(self.host(&self.run_dir).join("iptables-backend"))
            .unwrap_or_else(|_| "nft".into());
        if backend.trim() == "legacy" {
            "iptables-legacy-save"
        } else {
            "iptables-nft-save"
        }
    }

    /// A workload pod with a sidecar, served by the double on this node (status filled in later).
    pub fn sidecar_pod(&self, name: &str) -> PodSpec {
        let uid = crate::cri::pod_uid(name);
        self.put_pod(name, &uid, "", false);
        PodSpec {
            name: name.into(),
            namespace: "default".into(),
            uid,
            annotations: [("sidecar.istio.io/status".to_string(), "{}".to_string())].into(),
            attempt: 0,
        }
    }

    /// (Re)writes the workload pod's API object; `broken`: istio-validation failed with 126 (what the
    /// repair agent looks for).
    pub fn put_pod(&self, name: &str, uid: &str, ip: &str, broken: bool) {
        let mut status = serde_json::json!({"phase": "Pending"});
        if !ip.is_empty() {
            status["podIP"] = ip.into();
            status["podIPs"] = serde_json::json!([{"ip": ip}]);
        }
        if broken {
            status["initContainerStatuses"] = serde_json::json!([{
                "name": "istio-validation", "ready": false, "restartCount": 2,
                "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                "lastState": {"terminated": {"exitCode": 126, "reason": "Error"}}}]);
        }
        let pod = serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "uid": uid,
                         "annotations": {"sidecar.istio.io/status": "{}"}},
            "spec": {"nodeName": NODE_NAME,
                     "initContainers": [{"name": "istio-validation"}],
                     "containers": [{"name": "app"}, {"name": "istio-proxy", "args": ["proxy", "sidecar"]}]},
            "status": status,
        });
        self.srv.add_pod(&pod.to_string()).expect("add pod");
    }

    /// Runs a workload sandbox: (id, netns, ip).
    pub async fn run_pod(&self, pod: &PodSpec) -> Result<(String, String, String), String> {
        let id = self.cri.run_pod(pod).await?;
        let st = self.cri.status(&id).await?;
        assert!(st.ready);
        Ok((id, st.netns.expect("netns"), st.ip))
    }
}
