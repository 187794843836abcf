#!/usr/bin/env python3
"""scripts/bench.d: pod start under the real kubelet (stdlib only; scripts/bench runs it inside the cluster's
network namespace, `scripts/cluster exec`, once `scripts/cluster up` made the cluster).

The same sidecar pod (the stand-in istio-proxy as uid 1337 beside the test app, `sidecar.istio.io/status` as the
injector writes it, no init container so that it starts whether or not anything redirects it) is started in
batches of --batch pods at once, with the node's primary CNI alone (bridge + portmap from Debian's
containernetworking-plugins: our DaemonSet deleted, its uninstall having given the CNI config back) and with
ours chained (our DaemonSet from manifests/ Ready). The two arms alternate in ABBA blocks so that the machine's
drift and noise hit both alike; a warm-up batch (ours) comes first and is not counted.

Per pod: created (the POST's 201 answered) → Running and → Ready, seen on a watch of the namespace held open
throughout (the client's monotonic clock, milliseconds). Per batch: the kubelet's own timing of the runtime's
RunPodSandbox (network namespace, the CNI ADD of every plugin in the chain, the pause container), from the
histogram `kubelet_runtime_operations_duration_seconds{operation_type="run_podsandbox"}` on its /metrics
(through the API server's node proxy):
the mean per arm (Δsum ÷ Δcount) and the median and p90 interpolated in its buckets, as Prometheus'
histogram_quantile does.
"""

import argparse
import glob
import http.client
import json
import os
import ssl
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import fmt, log, machine, median  # noqa: E402

NS = "podstart"
# The kubelet's timing of its CRI calls, the RunPodSandbox ones. (1.34's kubelet_run_podsandbox_duration_seconds
# reads microseconds per sandbox on this node: not the call's duration.)
SANDBOX = ("kubelet_runtime_operations_duration_seconds", 'operation_type="run_podsandbox"')


class Api:
    """HTTPS to kube-apiserver with the admin's client certificate (a new connection per request)."""

    def __init__(self, pki):
        self.ctx = ssl.create_default_context(cafile=os.path.join(pki, "ca.crt"))
        self.ctx.load_cert_chain(os.path.join(pki, "admin.crt"), os.path.join(pki, "admin.key"))

    def conn(self, timeout=30):
        return http.client.HTTPSConnection("127.0.0.1", 6443, context=self.ctx, timeout=timeout)

    def call(self, method, path, body=None):
        c = self.conn()
        try:
            c.request(method, path, body=json.dumps(body) if body is not None else None,
                      headers={"Content-Type": "application/json"} if body is not None else {})
            r = c.getresponse()
            data = r.read()
            return r.status, data
        finally:
            c.close()

    def json(self, method, path, body=None, ok=(200, 201)):
        st, data = self.call(method, path, body)
        if st not in ok:
            raise SystemExit(f"{method} {path}: HTTP {st}: {data[:300]!r}")
        return json.loads(data)


class Watch(threading.Thread):
    """The namespace's pods, watched from a resourceVersion: first time each pod is seen Running and Ready,
    and when it is deleted."""

    def __init__(self, api, rv):
        super().__init__(daemon=True)
        self.api, self.rv = api, rv
        self.running, self.ready, self.deleted = {}, {}, set()
        self.cv = threading.Condition()
        self.error = None

    def run(self):
        try:
            while True:
                c = self.api.conn(timeout=None)
                c.request("GET", f"/api/v1/namespaces/{NS}/pods?watch=true&allowWatchBookmarks=true"
                                 f"&resourceVersion={self.rv}&timeoutSeconds=1800")
                r = c.getresponse()
                if r.status != 200:
                    raise RuntimeError(f"watch: HTTP {r.status}")
                while True:
                    line = r.readline()
                    if not line:
                        break
                    now = time.monotonic()
                    ev = json.loads(line)
                    o = ev["object"]
                    self.rv = o["metadata"].get("resourceVersion", self.rv)
                    if ev["type"] == "ERROR":
                        raise RuntimeError(f"watch: {o.get('message')}")
                    name = o["metadata"].get("name")
                    with self.cv:
                        if ev["type"] == "DELETED":
                            self.deleted.add(name)
                        elif ev["type"] in ("ADDED", "MODIFIED"):
                            st = o.get("status", {})
                            if st.get("phase") == "Running":
                                self.running.setdefault(name, now)
                            if any(c.get("type") == "Ready" and c.get("status") == "True"
                                   for c in st.get("conditions") or []):
                                self.ready.setdefault(name, now)
                        self.cv.notify_all()
                c.close()
        except Exception as e:  # noqa: BLE001 (reported by the waiter)
            with self.cv:
                self.error = e
                self.cv.notify_all()

    def wait(self, cond, timeout, what):
        end = time.monotonic() + timeout
        with self.cv:
            while not cond():
                if self.error:
                    raise SystemExit(str(self.error))
                left = end - time.monotonic()
                if left <= 0:
                    raise SystemExit(f"pod start: timed out waiting for {what}")
                self.cv.wait(left)


def pod(name, image_app, image_proxy):
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": {"app": "podstart"},
                     "annotations": {"sidecar.istio.io/status": json.dumps(
                         {"initContainers": ["istio-validation"], "containers": ["istio-proxy"],
                          "revision": "default"})}},
        "spec": {
            "terminationGracePeriodSeconds": 1, "automountServiceAccountToken": False,
            "containers": [
                {"name": "app", "image": image_app, "imagePullPolicy": "Never", "args": ["sleep"]},
                {"name": "istio-proxy", "image": image_proxy, "imagePullPolicy": "Never",
                 "args": ["proxy", "sidecar"],
                 "securityContext": {"runAsUser": 1337, "runAsGroup": 1337, "runAsNonRoot": True}},
            ],
        },
    }


def histogram(text, series):
    """Δ-able totals of a Prometheus histogram (name, a label that must be on the line) summed over its label
    sets: (buckets {le: count}, sum, count)."""
    name, label = series
    buckets, total, count = {}, 0.0, 0.0
    for line in text.splitlines():
        if label not in line:
            continue
        if line.startswith(name + "_bucket{"):
            labels, v = line[len(name) + 8:].rsplit("} ", 1)
            le = [x.split("=", 1)[1].strip('"') for x in labels.split(",") if x.startswith("le=")][0]
            le = float("inf") if le == "+Inf" else float(le)
            buckets[le] = buckets.get(le, 0.0) + float(v)
        elif line.startswith(name + "_sum"):
            total += float(line.rsplit(" ", 1)[1])
        elif line.startswith(name + "_count"):
            count += float(line.rsplit(" ", 1)[1])
    return buckets, total, count


def bucket_quantile(q, buckets):
    """histogram_quantile: linear interpolation inside the bucket holding the q-th observation."""
    les = sorted(buckets)
    if not les or buckets[les[-1]] <= 0:
        return None
    rank = q * buckets[les[-1]]
    prev_le, prev_c = 0.0, 0.0
    for le in les:
        c = buckets[le]
        if c >= rank:
            if le == float("inf"):
                return prev_le
            return prev_le + (le - prev_le) * ((rank - prev_c) / (c - prev_c) if c > prev_c else 0)
        prev_le, prev_c = le, c
    return None


def p90(vals):
    s = sorted(vals)
    return s[min(len(s) - 1, int(0.9 * len(s) + 0.5) - 1)] if s else None


class Arms:
    """Switches the node between the primary CNI alone and ours chained (scripts/cluster's deployed manifests)."""

    def __init__(self, a):
        self.a = a
        self.kubectl = [os.path.join(a.repo, "scripts", "cluster"), "kubectl"]

    def k(self, *args, timeout=300):
        subprocess.run(self.kubectl + list(args), check=True, timeout=timeout, stdout=subprocess.DEVNULL)

    @staticmethod
    def chained():
        """Whether a CNI config file on the node chains our plugin (`"type": "istio-cni"`; the primary's
        network is named istio-cni-cluster, so its text alone does not say)."""
        for f in glob.glob("/etc/cni/net.d/*.conflist"):
            try:
                with open(f) as fh:
                    plugins = json.load(fh).get("plugins") or []
            except (OSError, ValueError, AttributeError):
                continue
            if any(isinstance(p, dict) and p.get("type") == "istio-cni" for p in plugins):
                return True
        return False

    def set(self, arm):
        deployed = os.path.join(self.a.cluster_dir, "deployed.yaml")
        if arm == "ours":
            self.k("apply", "-f", deployed)
            self.k("-n", "kube-system", "rollout", "status", "ds/istio-cni-node", "--timeout=180s")
            want = True
        else:
            self.k("delete", "-f", deployed, "--ignore-not-found", "--wait=true", "--timeout=120s")
            want = False
        end = time.monotonic() + 60
        while self.chained() != want:
            if time.monotonic() > end:
                raise SystemExit(f"pod start: the CNI config {'lacks' if want else 'still has'} our entry")
            time.sleep(0.2)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repo", required=True)
    ap.add_argument("--cluster-dir", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--pods", type=int, default=30, help="pods per arm")
    ap.add_argument("--batch", type=int, default=5, help="pods started at once")
    a = ap.parse_args()
    api = Api(os.path.join(a.cluster_dir, "pki"))
    node = api.json("GET", "/api/v1/nodes")["items"][0]["metadata"]["name"]
    ds = api.json("GET", "/apis/apps/v1/namespaces/kube-system/daemonsets/istio-cni-node")
    images = {c["name"]: c["image"] for c in ds["spec"]["template"]["spec"]["containers"]}
    log(f"pod start: node {node}, our image {list(images.values())}")
    st, _ = api.call("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                    "metadata": {"name": NS}})
    if st not in (201, 409):
        raise SystemExit(f"pod start: namespace {NS}: HTTP {st}")
    rv = api.json("GET", f"/api/v1/namespaces/{NS}/pods")["metadata"]["resourceVersion"]
    w = Watch(api, rv)
    w.start()
    arms = Arms(a)
    current = "ours"
    if not Arms.chained():
        raise SystemExit("pod start: our DaemonSet is not installed (scripts/cluster up deploys it)")
    nbatches = -(-a.pods // a.batch)
    block = ["ours", "alone", "alone", "ours"]
    order = ["warmup"] + [block[i % 4] for i in range(2 * nbatches)]
    res = {"alone": {"running": [], "ready": [], "buckets": {}, "sum": 0.0, "count": 0.0, "batches": 0},
           "ours": {"running": [], "ready": [], "buckets": {}, "sum": 0.0, "count": 0.0, "batches": 0}}
    seq = 0
    for i, arm in enumerate(order):
        want = "ours" if arm == "warmup" else arm
        if want != current:
            log(f"pod start: switching to {'our DaemonSet' if want == 'ours' else 'the primary CNI alone'}")
            arms.set(want)
            current = want
        time.sleep(2)  # settle after the switch or the last batch's deletions
        metrics = lambda: api.call("GET", f"/api/v1/nodes/{node}/proxy/metrics")[1].decode()  # noqa: E731
        b0 = histogram(metrics(), SANDBOX)
        names, created = [], {}
        for _ in range(a.batch):
            seq += 1
            name = f"ps-{seq:03d}"
            api.json("POST", f"/api/v1/namespaces/{NS}/pods", pod(name, "localhost/testapp:cluster",
                                                                 "localhost/istio-proxy:cluster"))
            created[name] = time.monotonic()
            names.append(name)
        w.wait(lambda: all(n in w.ready for n in names), 300, f"batch {i} Ready")
        b1 = histogram(metrics(), SANDBOX)
        for n in names:
            api.call("DELETE", f"/api/v1/namespaces/{NS}/pods/{n}")
        w.wait(lambda: all(n in w.deleted for n in names), 300, f"batch {i} deleted")
        if arm == "warmup":
            continue
        r = res[arm]
        r["running"] += [(w.running[n] - created[n]) * 1000 for n in names]
        r["ready"] += [(w.ready[n] - created[n]) * 1000 for n in names]
        for le, c in b1[0].items():
            r["buckets"][le] = r["buckets"].get(le, 0.0) + c - b0[0].get(le, 0.0)
        r["sum"] += b1[1] - b0[1]
        r["count"] += b1[2] - b0[2]
        r["batches"] += 1
        log(f"pod start: batch {i} ({arm}): created → Running median {fmt(median(r['running'][-a.batch:]))} ms")
    if current != "ours":
        arms.set("ours")
    api.call("DELETE", f"/api/v1/namespaces/{NS}")
    doc = {"machine": machine(), "node": node, "pods_per_arm": nbatches * a.batch, "batch": a.batch,
           "order": order, "arms": {}}
    for arm, r in res.items():
        doc["arms"][arm] = {
            "running_ms": r["running"], "ready_ms": r["ready"],
            "running_median_ms": median(r["running"]), "running_p90_ms": p90(r["running"]),
            "ready_median_ms": median(r["ready"]), "ready_p90_ms": p90(r["ready"]),
            "sandbox_count": r["count"],
            "sandbox_mean_ms": r["sum"] / r["count"] * 1000 if r["count"] else None,
            "sandbox_median_ms": (bucket_quantile(0.5, r["buckets"]) or 0) * 1000 if r["count"] else None,
            "sandbox_p90_ms": (bucket_quantile(0.9, r["buckets"]) or 0) * 1000 if r["count"] else None,
            "sandbox_buckets": {str(k): v for k, v in sorted(r["buckets"].items())},
        }
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "podstart.json"), "w") as f:
        json.dump(doc, f, indent=2)
    md = markdown(doc)
    with open(os.path.join(a.out, "podstart.md"), "w") as f:
        f.write(md)
    print(md)


def markdown(doc):
    m = doc["machine"]
    out = [f"Pod start under the real kubelet (scripts/cluster: node {doc['node']}), measured {m['date']} on "
           f"{m['nproc']} × {m['cpu']} (load average at the end {m['loadavg_at_end'][0]:.2f}): "
           f"{doc['pods_per_arm']} pods per arm in batches of {doc['batch']} started at once, the arms in ABBA "
           f"blocks after one warm-up batch. Running and Ready are seen when the kubelet's PLEG (a relist every "
           f"second) notices the containers, so those columns move in steps of about a second; RunPodSandbox is "
           f"the kubelet's own timing of the CRI call (network namespace, every CNI plugin's ADD, the pause "
           f"container).", "",
           "| pod start (sidecar pod, no init container) | created → Running median / p90 ms | "
           "created → Ready median / p90 ms | RunPodSandbox mean ms | its median / p90 ms (interpolated in the buckets) |",
           "|---|---:|---:|---:|---:|"]
    label = {"alone": "primary CNI alone (bridge + portmap)", "ours": "with ours chained (redirected)"}
    for arm in ("alone", "ours"):
        r = doc["arms"][arm]
        out.append(f"| {label[arm]} | {fmt(r['running_median_ms'], 0)} / {fmt(r['running_p90_ms'], 0)} | "
                   f"{fmt(r['ready_median_ms'], 0)} / {fmt(r['ready_p90_ms'], 0)} | {fmt(r['sandbox_mean_ms'], 0)} | "
                   f"{fmt(r['sandbox_median_ms'], 0)} / {fmt(r['sandbox_p90_ms'], 0)} |")
    a, o = doc["arms"]["alone"], doc["arms"]["ours"]
    if a["running_median_ms"] and o["running_median_ms"]:
        out.append(f"| ours − alone | {fmt(o['running_median_ms'] - a['running_median_ms'], 0)} / "
                   f"{fmt(o['running_p90_ms'] - a['running_p90_ms'], 0)} | "
                   f"{fmt(o['ready_median_ms'] - a['ready_median_ms'], 0)} / "
                   f"{fmt(o['ready_p90_ms'] - a['ready_p90_ms'], 0)} | "
                   f"{fmt((o['sandbox_mean_ms'] or 0) - (a['sandbox_mean_ms'] or 0), 0)} | |")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    main()
