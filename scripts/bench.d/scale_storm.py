"""scripts/bench --scale: the pod-start storm. Imported by scale.py.

Storm: M pods created in the double one by one (at most `--ahead` before the ADDs), bound to node i mod N, and
for each, no sooner than `--lag` after its creation, the ADD a runtime would exec, by `--workers` threads: in
a fresh namespace for a sample of them (ADD p50/p99), in a small pool of already programmed namespaces for the
others. CacheProbe: the time from a pod's creation to its presence in the node's pod cache.
"""

import concurrent.futures
import json
import os
import socket
import threading
import time
from collections import deque

from common import PATH_ENV, BenchError
from double import repair_pod
from scale_nodes import ns_addr


class CacheProbe:
    """Time from a pod's creation in the double to its presence in the node's pod cache. The probe asks the
    node's `pod-cache.sock` (protocol v1: one JSON request line, reply lines) for the pod before it exists: the
    agent answers `wait` and holds the request for the pod's watch event (up to its unseen-pod wait, 200 ms).
    Then the pod is created; the hit's arrival minus the moment the create request was sent is the time. A pod
    still unseen when the agent gives up is asked again until it is there."""

    LIMIT = 10.0

    def __init__(self, agent, ns, name, uid):
        self.path = os.path.join(agent.run, "pod-cache.sock")
        self.line = json.dumps({"v": 1, "namespace": ns, "name": name, "uid": uid}, separators=(",", ":")) + "\n"
        self.sock = self._ask()
        first = self._read()
        if first.get("result") != "wait":
            raise BenchError(f"pod cache of {agent.node}: expected `wait` for a pod not created yet, got {first}")

    def _ask(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.LIMIT)
        s.connect(self.path)
        s.sendall(self.line.encode())
        self.buf = b""
        return s

    def _read(self):
        while b"\n" not in self.buf:
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise BenchError(f"{self.path}: closed without a reply")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def finish(self, t_created):
        deadline = t_created + self.LIMIT
        while True:
            r = self._read()
            if r.get("result") == "hit":
                self.sock.close()
                return (time.perf_counter() - t_created) * 1000
            if r.get("result") != "wait":
                self.sock.close()
                if time.perf_counter() > deadline:
                    raise BenchError(f"{self.path}: pod not in the cache {self.LIMIT} s after its creation: {r}")
                self.sock = self._ask()


def pod_object(i, node, uid):
    p = repair_pod(i, node, False)
    p["metadata"]["name"] = f"storm-{i}"
    p["metadata"]["generateName"] = "storm-"
    p["metadata"]["uid"] = uid
    p["status"]["phase"] = "Pending"
    return p


class Storm:
    def __init__(self, a, double, agents, nss, work, cache):
        self.a, self.double, self.agents, self.work, self.cache = a, double, agents, work, cache
        self.m = a.pods_per_node * len(agents)
        k = min(self.m, a.sample)
        self.stride = max(1, self.m // k) if k else 0
        self.fresh = nss.make(k) if k else []
        self.pool = nss.make(min(a.pool, self.m))
        self.created = [None] * self.m
        self.started = 0
        self.cv = threading.Condition()
        self.queue = deque()
        self.done_creating = False
        self.fresh_ms, self.pool_ms, self.failures, self.propagation_ms = [], [], [], []
        self.stdin_dir = os.path.join(work, "stdin")
        os.makedirs(self.stdin_dir, exist_ok=True)

    def netns_of(self, i):
        if self.stride and i % self.stride == 0 and i // self.stride < len(self.fresh):
            return self.fresh[i // self.stride], True
        return self.pool[i % len(self.pool)], False

    def uid(self, i):
        return f"5c0a1e00-0000-4000-8000-{i:012d}"

    def create(self):
        for i in range(self.m):
            with self.cv:
                while i - self.started > self.a.ahead:
                    self.cv.wait(0.05)
            agent = self.agents[i % len(self.agents)]
            pod = pod_object(i, agent.node, self.uid(i))
            probe = None
            if self.cache and self.stride and i % self.stride == self.stride // 2:
                probe = CacheProbe(agent, pod["metadata"]["namespace"], pod["metadata"]["name"], self.uid(i))
            t_sent = time.perf_counter()
            self.double.admin("POST", "/_double/pods", [pod])
            if probe:
                self.propagation_ms.append(probe.finish(t_sent))
            t = time.perf_counter()
            with self.cv:
                self.created[i] = t
                self.queue.append(i)
                self.cv.notify_all()
        with self.cv:
            self.done_creating = True
            self.cv.notify_all()

    def add(self, i, slot):
        agent = self.agents[i % len(self.agents)]
        ns, fresh = self.netns_of(i)
        path = f"/run/netns/{ns}"
        conf = dict(agent.netconf, prevResult={
            "cniVersion": agent.netconf["cniVersion"], "interfaces": [{"name": "eth0", "sandbox": path}],
            "ips": [{"address": f"{ns_addr(ns)}/32", "interface": 0}]})
        stdin = os.path.join(self.stdin_dir, f"w{slot}.json")
        out = os.path.join(self.stdin_dir, f"w{slot}.out")
        with open(stdin, "w") as f:
            json.dump(conf, f)
        pod_ns = f"ns-{i % 17}"
        env = {"PATH": PATH_ENV, "CNI_COMMAND": "ADD", "CNI_CONTAINERID": f"sandbox-{i}", "CNI_NETNS": path,
               "CNI_IFNAME": "eth0", "CNI_PATH": agent.bin,
               "CNI_ARGS": f"IgnoreUnknown=1;K8S_POD_NAMESPACE={pod_ns};K8S_POD_NAME=storm-{i};"
                           f"K8S_POD_INFRA_CONTAINER_ID=sandbox-{i};K8S_POD_UID={self.uid(i)}"}
        exe = os.path.join(agent.bin, "istio-cni")
        fa = [(os.POSIX_SPAWN_OPEN, 0, stdin, os.O_RDONLY, 0),
              (os.POSIX_SPAWN_OPEN, 1, out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600),
              (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0)]
        t0 = time.perf_counter_ns()
        pid = os.posix_spawn(exe, [exe], env, file_actions=fa)
        _, status = os.waitpid(pid, 0)
        ms = (time.perf_counter_ns() - t0) / 1e6
        if os.waitstatus_to_exitcode(status) != 0:
            self.failures.append(f"storm-{i} on {agent.node}: {open(out).read()[:600]}")
        (self.fresh_ms if fresh else self.pool_ms).append(ms)

    def worker(self, slot):
        while True:
            with self.cv:
                while not self.queue and not self.done_creating:
                    self.cv.wait(0.05)
                if not self.queue:
                    return
                i = self.queue.popleft()
                self.started += 1
                self.cv.notify_all()
            # A runtime's ADD comes after the kubelet saw the binding and made the sandbox.
            wait = self.created[i] + self.a.lag - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            self.add(i, slot)

    def run(self):
        t0 = time.perf_counter()
        creator = threading.Thread(target=self.create, name="storm-create")
        creator.start()
        with concurrent.futures.ThreadPoolExecutor(max_workers=self.a.workers) as ex:
            list(ex.map(self.worker, range(self.a.workers)))
        creator.join()
        wall = time.perf_counter() - t0
        if self.failures:
            raise BenchError(f"{len(self.failures)} of {self.m} ADDs failed, e.g. {self.failures[0]}")
        return wall


def calibrate_creates(double, count):
    """Double CPU seconds per pod created (for a node nobody watches), to tell creating pods from serving them."""
    c0 = double.stats()["cpu_seconds"]
    for i in range(count):
        double.admin("POST", "/_double/pods", [pod_object(10_000_000 + i, "node-unwatched", f"cal-{i}")])
    return (double.stats()["cpu_seconds"] - c0) / count
