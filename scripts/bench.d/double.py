"""scripts/bench.d: the HTTPS Kubernetes API double (tests/kube-double) and the pod objects it serves.

Double: the double started for a run (its CA, token, kubeconfig and URL), admin requests (pods in, request log
out), and a node's directories for an agent pointed at it. pod_object: a small pod of the plugin cases;
repair_pod: a realistically sized injected pod (the repair agent's, the pod cache's and the scale storm's).
"""

import http.client
import json
import os
import shutil
import ssl
import subprocess
import time

from common import BenchError

NODE = "bench-node"  # the node of every plugin case's pods (what the node's pod cache serves)


def exchange(c, method, path, body, headers):
    """One request on the connection `c` (`body` sent as JSON): the answer's JSON, None when empty; a status of
    300 or more is an error."""
    c.request(method, path, body=None if body is None else json.dumps(body), headers=headers)
    r = c.getresponse()
    data = r.read()
    if r.status >= 300:
        raise BenchError(f"{method} {path}: {r.status} {data[:300]!r}")
    return json.loads(data) if data else None


class Double:
    """The HTTPS kube-double: `bookmark_ms` between bookmarks; `wrap` is a command prefix (e.g. setpriv)."""

    def __init__(self, exe, work, bookmark_ms=1000, wrap=()):
        self.work = work
        self.token = f"bench-token-{os.getpid()}"
        self.ca = os.path.join(work, "ca.pem")
        self.kubeconfig = os.path.join(work, "kubeconfig")
        ready = os.path.join(work, "double.ready")
        self.log = open(os.path.join(work, "double.log"), "w")
        self.proc = subprocess.Popen(
            [*wrap, exe, "--listen", "127.0.0.1:0", "--token", self.token, "--kubeconfig-out", self.kubeconfig,
             "--ca-out", self.ca, "--ready-file", ready, "--bookmark-interval-ms", str(bookmark_ms)],
            stdout=self.log, stderr=self.log, stdin=subprocess.DEVNULL)
        deadline = time.time() + 30
        while not os.path.exists(ready):
            if self.proc.poll() is not None or time.time() > deadline:
                raise BenchError(f"kube-double did not start; see {self.log.name}")
            time.sleep(0.02)
        time.sleep(0.02)
        self.url = open(ready).read().strip()
        hostport = self.url.split("://", 1)[1]
        self.host, self.port = hostport.rsplit(":", 1)
        self.ctx = ssl.create_default_context(cafile=self.ca)
        self.ctx.check_hostname = False
        self.on_node = 0  # pods on the bench node (what the pod cache must hold)

    def request(self, method, path, body=None):
        c = http.client.HTTPSConnection(self.host, int(self.port), context=self.ctx, timeout=30)
        try:
            hdr = {"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"}
            return exchange(c, method, path, body, hdr)
        finally:
            c.close()

    def add_pods(self, pods):
        self.on_node += sum(1 for p in pods if p.get("spec", {}).get("nodeName") == NODE)
        for i in range(0, len(pods), 500):
            self.request("POST", "/_double/pods", pods[i:i + 500])

    def run_dir(self, d):
        """A plugin run dir (cni_agent_run_dir) `d`, holding the kubeconfig for this double."""
        os.makedirs(d)
        shutil.copy(self.kubeconfig, os.path.join(d, "istio-cni-kubeconfig"))
        return d

    def node_dirs(self, d, namespace=None):
        """A node's directories under `d` for an agent pointed at this double: (conf, bin, run, sa), the
        service-account dir holding its CA and token (and `namespace`, when given)."""
        dirs = tuple(os.path.join(d, x) for x in ("conf", "bin", "run", "sa"))
        for x in dirs:
            os.makedirs(x)
        sa = dirs[3]
        shutil.copy(self.ca, os.path.join(sa, "ca.crt"))
        with open(os.path.join(sa, "token"), "w") as f:
            f.write(self.token)
        if namespace is not None:
            with open(os.path.join(sa, "namespace"), "w") as f:
                f.write(namespace)
        return dirs

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def pod_object(name, ns="default", sidecar=True, ips=("10.0.0.2",), annotations=None, env=None,
               node=NODE, labels=None):
    ann = {}
    if sidecar:
        ann["sidecar.istio.io/status"] = "{}"
    ann.update(annotations or {})
    containers = [{"name": "app", "image": "app"}]
    if sidecar:
        containers.append({"name": "istio-proxy", "image": "proxyv2", "args": ["proxy", "sidecar"],
                           "env": env or []})
    init = [{"name": "istio-validation", "image": "proxyv2"}] if sidecar else []
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "annotations": ann, "labels": labels or {"app": name}},
        "spec": {"nodeName": node, "containers": containers, "initContainers": init},
        "status": {"phase": "Running", "podIP": ips[0], "podIPs": [{"ip": i} for i in ips]},
    }


def repair_pod(i, node, broken):
    """A realistically sized injected pod (~7 KB of JSON), as tests/unprivileged/repair_rss.rs builds them."""
    env = [{"name": f"ISTIO_META_VAR_{k}", "value": f"value-{k}-{i}-abcdefghijklmnopqrstuvwxyz"} for k in range(30)]
    vols = [{"name": f"vol-{k}", "emptyDir": {"medium": "Memory"}} for k in range(8)]
    if broken:
        init_state = {"state": {"waiting": {"reason": "CrashLoopBackOff",
                                            "message": "back-off 5m0s restarting failed container"}},
                      "lastState": {"terminated": {"exitCode": 126, "reason": "Error",
                                                   "startedAt": "2026-11-22T03:00:00Z",
                                                   "finishedAt": "2026-11-22T03:00:05Z"}}}
    else:
        init_state = {"state": {"terminated": {"exitCode": 0, "reason": "Completed",
                                               "startedAt": "2026-11-22T03:00:00Z",
                                               "finishedAt": "2026-11-22T03:00:01Z"}}, "lastState": {}}
    status_ann = json.dumps({"initContainers": ["istio-validation"], "containers": ["istio-proxy"],
                             "volumes": ["workload-socket", "credential-socket", "workload-certs", "istio-envoy",
                                         "istio-data", "istio-podinfo", "istio-token", "istiod-ca-cert"],
                             "imagePullSecrets": None, "revision": "default"})
    img = "docker.io/istio/proxyv2:1.24.0"
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"app-{i}", "namespace": f"ns-{i % 17}", "generateName": "app-",
                     "labels": {"app": f"app-{i}", "version": "v1", "security.istio.io/tlsMode": "istio",
                                "service.istio.io/canonical-name": f"app-{i}", "pod-template-hash": "5d8f7c9b4"},
                     "annotations": {"sidecar.istio.io/status": status_ann,
                                     "kubectl.kubernetes.io/default-container": "app", "istio.io/rev": "default",
                                     "prometheus.io/scrape": "true", "prometheus.io/port": "15020",
                                     "prometheus.io/path": "/stats/prometheus"},
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "app-5d8f7c9b4",
                                          "uid": f"6f1c2a9e-0000-4000-8000-{i:012d}", "controller": True,
                                          "blockOwnerDeletion": True}]},
        "spec": {"nodeName": node, "serviceAccountName": "default", "volumes": vols,
                 "initContainers": [{"name": "istio-validation", "image": img,
                                     "args": ["istio-iptables", "-p", "15001", "-z", "15006", "-u", "1337", "-m",
                                              "REDIRECT", "-i", "*", "-x", "", "-b", "*", "-d", "15090,15021,15020",
                                              "--run-validation", "--skip-rule-apply"]}],
                 "containers": [{"name": "app", "image": "example/app:1.0",
                                 "ports": [{"containerPort": 8080, "protocol": "TCP"}]},
                                {"name": "istio-proxy", "image": img,
                                 "args": ["proxy", "sidecar", "--domain", "$(POD_NAMESPACE).svc.cluster.local"],
                                 "env": env}]},
        "status": {"phase": "Pending", "podIP": f"10.{100 + i // 65536}.{(i // 256) % 256}.{i % 256}",
                   "hostIP": "192.168.1.10",
                   "initContainerStatuses": [dict({"name": "istio-validation", "ready": False, "restartCount": 3,
                                                   "image": img, "imageID": img,
                                                   "containerID": f"containerd://{i:064d}"}, **init_state)],
                   "containerStatuses": [{"name": "app", "state": {"waiting": {"reason": "PodInitializing"}},
                                          "lastState": {}, "ready": False, "restartCount": 0,
                                          "image": "example/app:1.0", "imageID": ""}]},
    }
