#!/usr/bin/env python3
"""scripts/bench --scale N[,N...]: N node agents on this machine against one API double, then a pod-start storm.

Per N, twice (POD_CACHE_ENABLED=false first, upstream's behaviour: one TLS GET per pod start; then with the pod
cache): a fresh HTTPS kube-double (bookmarks every 60 s, as an API server sends them); N `install-cni` processes
(pod watch + repair agent in-process, pod cache on or off, nftables mode so no iptables backend is probed), each
with its own conf/bin/run/service-account dirs, node name `node-<i>`, any free health and metrics ports (read
from its log), started in batches until ready and watching; then M = pods-per-node x N pods created in the double
one by one, bound to node i mod N, and for each, no sooner than `--lag` after its creation, an ADD exec'd as a
runtime execs it: the node's bin dir's `istio-cni`, the istio-cni entry of the conflist the node's installer
wrote (plus name, cniVersion and a prevResult), CNI_ARGS with the pod's name, namespace and UID, CNI_NETNS a
namespace. A sample of the pods (`--sample` per run, spread evenly) get a fresh namespace of their own: their
ADDs program real rules and give the ADD p50/p99; the others are ADDed into a small pool of namespaces whose
rules are already there (a re-ADD that changes nothing), so every pod start looks its pod up exactly as a real
one does while 20,000 fresh namespaces are not needed. The API requests, TLS handshakes and double CPU are
counted over the whole storm from the double's own counters (GET /_double/stats; the harness's admin
connections are subtracted).

Results: target/bench/scale.json ({"runs": [...]}, with the date and commit), scale.md (the table) and scale.svg
(matplotlib: API requests per pod start, ADD p50, API server CPU, agent RSS; date and commit on it).
Run by scripts/bench (as root, with the bench's Python environment); `--replot SCALE_JSON --out DIR` only
draws a run's figure again.
"""

import argparse
import concurrent.futures
import http.client
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402  (its Double, log, BenchError, PATH_ENV)
from agents import _cpu_s, _http_get as http_get, _repair_pod, _status_kb  # noqa: E402
from report import median, pct  # noqa: E402

PATH_ENV = bench.PATH_ENV
PRIMARY = {"cniVersion": "1.0.0", "name": "k8s-pod-network",
           "plugins": [{"type": "ptp", "ipMasq": False,
                        "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.210.0.0/16"}]]}}]}
SETPRIV = shutil.which("setpriv", path=PATH_ENV) or "/usr/bin/setpriv"


log = bench.log
BenchError = bench.BenchError


def stats_ms(vals):
    s = sorted(vals)
    if not s:
        return None
    return {"n": len(s), "p50": median(s), "p99": pct(s, 99), "max": s[-1]}


# --- the API double -----------------------------------------------------------------------------------


class Double(bench.Double):
    """The bench's kube-double (bookmarks every 60 s, as an API server sends them; it dies with the harness),
    plus one keep-alive admin connection per calling thread."""

    def __init__(self, exe, work):
        super().__init__(exe, work, bookmark_ms=60_000, wrap=(SETPRIV, "--pdeathsig", "TERM", "--"))
        self.local = threading.local()

    def _conn(self):
        c = getattr(self.local, "conn", None)
        if c is None:
            c = http.client.HTTPSConnection(self.host, int(self.port), context=self.ctx, timeout=60)
            self.local.conn = c
        return c

    def admin(self, method, path, body=None):
        for attempt in (0, 1):
            c = self._conn()
            try:
                c.request(method, path, body=None if body is None else json.dumps(body),
                          headers={"Content-Type": "application/json"})
                r = c.getresponse()
                data = r.read()
                if r.status >= 300:
                    raise BenchError(f"{method} {path}: {r.status} {data[:300]!r}")
                return json.loads(data) if data else None
            except (OSError, http.client.HTTPException):
                c.close()
                self.local.conn = None
                if attempt:
                    raise
        return None

    def stats(self):
        return self.admin("GET", "/_double/stats")


def stats_delta(a, b):
    d = {k: b[k] - a[k] for k in ("connections", "tls_handshakes", "admin_connections", "watches_opened")}
    d["requests"] = {k: b["requests"][k] - a["requests"][k] for k in b["requests"]}
    d["cpu_seconds"] = b["cpu_seconds"] - a["cpu_seconds"]
    return d


# --- namespaces ---------------------------------------------------------------------------------------


class Namespaces:
    def __init__(self, prefix):
        self.prefix, self.n, self.names = prefix, 0, []

    def create(self, count):
        """`count` namespaces with `lo` up and 10.<a>.<b>.2/16 on it (the address IPv6 is decided from)."""
        names = []
        for _ in range(count):
            self.n += 1
            names.append(f"{self.prefix}{self.n}")
        r = subprocess.run(["ip", "-batch", "-"], input="".join(f"netns add {n}\n" for n in names), text=True,
                           capture_output=True)
        self.names.extend(names)
        if r.returncode != 0:
            raise BenchError(f"ip netns add: {r.stderr.strip()}")
        for n in names:
            k = int(n[len(self.prefix):])
            for argv in (["link", "set", "lo", "up"], ["addr", "add", f"10.{200 + k // 65536}.{(k // 256) % 256}."
                                                                        f"{k % 256}/32", "dev", "lo"]):
                r = subprocess.run(["ip", "-n", n] + argv, capture_output=True, text=True)
                if r.returncode != 0:
                    raise BenchError(f"ip -n {n} {' '.join(argv)}: {r.stderr.strip()}")
        return names

    def cleanup(self):
        if self.names:
            subprocess.run(["ip", "-force", "-batch", "-"], input="".join(f"netns del {n}\n" for n in self.names),
                           text=True, capture_output=True)
            self.names = []


def ns_addr(ns):
    """The address Namespaces.create put on lo (for the prevResult)."""
    k = int(re.search(r"(\d+)$", ns).group(1))
    return f"10.{200 + k // 65536}.{(k // 256) % 256}.{k % 256}"


# --- the agents ---------------------------------------------------------------------------------------


PORTS = re.compile(r"metrics on \S*:(\d+)/metrics, health on \S*:(\d+)/healthz")


class Agent:
    def __init__(self, i, root, double, binary, installer, cache):
        self.i = i
        self.node = f"node-{i}"
        d = os.path.join(root, f"node-{i}")
        self.conf, self.bin, self.run, self.sa = (os.path.join(d, x) for x in ("conf", "bin", "run", "sa"))
        for x in (self.conf, self.bin, self.run, self.sa):
            os.makedirs(x)
        shutil.copy(double.ca, os.path.join(self.sa, "ca.crt"))
        for name, text in (("token", double.token), ("namespace", "istio-system")):
            with open(os.path.join(self.sa, name), "w") as f:
                f.write(text)
        with open(os.path.join(self.conf, "10-ptp.conflist"), "w") as f:
            json.dump(PRIMARY, f, indent=2)
        # The installer finds its own binary already there (identical: no copy of 2.6 MB per node).
        os.link(binary, os.path.join(self.bin, "istio-cni"))
        self.log = os.path.join(d, "agent.log")
        env = {"PATH": PATH_ENV, "MOUNTED_CNI_NET_DIR": self.conf, "CNI_NET_DIR": "/etc/cni/net.d",
               "CNI_AGENT_RUN_DIR": self.run, "CNI_BIN_DIR": self.bin, "SECONDARY_BIN_DIR": "",
               "SERVICE_ACCOUNT_DIR": self.sa, "KUBERNETES_SERVICE_HOST": double.host,
               "KUBERNETES_SERVICE_PORT": double.port, "HEALTH_PORT": "0", "MONITORING_PORT": "0",
               "REPAIR_ENABLED": "true", "REPAIR_NODE_NAME": self.node, "NODE_NAME": self.node,
               "KUBERNETES_NODE_NAME": self.node, "NATIVE_NFTABLES": "true",
               "POD_CACHE_ENABLED": "true" if cache else "false", "LOG_LEVEL": "info"}
        fa = [(os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
              (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
              (os.POSIX_SPAWN_OPEN, 2, self.log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)]
        # Through setpriv --pdeathsig: should this harness die, every agent gets SIGTERM (and cleans up) instead
        # of living on, holding its inotify instance. `binary` is a link named install-cni (the applet).
        self.pid = os.posix_spawn(SETPRIV, [SETPRIV, "--pdeathsig", "TERM", "--", installer], env, file_actions=fa)
        self.health = self.metrics = None
        self.netconf = None

    def tail(self, n=12):
        try:
            return "".join(open(self.log).readlines()[-n:])
        except OSError:
            return ""

    def exited(self):
        return os.waitpid(self.pid, os.WNOHANG)[0] == self.pid

    def poll_ready(self):
        if self.health is None:
            try:
                m = PORTS.search(open(self.log).read())
            except OSError:
                m = None
            if not m:
                return False
            self.metrics, self.health = int(m.group(1)), int(m.group(2))
        return http_get(self.health, "/readyz", timeout=2)[0] == 200

    def load_netconf(self):
        """The istio-cni entry of the conflist this node's installer wrote, as a runtime hands it to a plugin."""
        lst = json.load(open(os.path.join(self.conf, "10-ptp.conflist")))
        entry = [p for p in lst["plugins"] if p.get("type") == "istio-cni"]
        if not entry:
            raise BenchError(f"{self.node}: ready, but no istio-cni entry in its conflist")
        self.netconf = dict(entry[0], name=lst["name"], cniVersion=lst["cniVersion"])


def start_agents(agents, n, root, double, binary, installer, cache, batch):
    """Starts `n` agents into `agents` (so that the caller stops every one started, even when this fails)."""
    t0 = time.time()
    for start in range(0, n, batch):
        wave = []
        for i in range(start, min(n, start + batch)):
            wave.append(Agent(i, root, double, binary, installer, cache))
            agents.append(wave[-1])
        deadline = time.time() + 120
        pending = list(wave)
        while pending:
            for a in list(pending):
                if a.exited():
                    raise BenchError(f"install-cni for {a.node} exited:\n{a.tail()}")
                if a.poll_ready():
                    pending.remove(a)
            if pending and time.time() > deadline:
                raise BenchError(f"{len(pending)} agents not ready within 120 s, e.g. {pending[0].node}:\n"
                                 f"{pending[0].tail()}")
            time.sleep(0.02)
    for a in agents:
        a.load_netconf()
    # Every agent's pod watch open at the double.
    deadline = time.time() + 120
    while double.stats()["watches_open"] < n:
        if time.time() > deadline:
            raise BenchError(f"only {double.stats()['watches_open']} of {n} watches open after 120 s")
        time.sleep(0.05)
    return time.time() - t0


def stop_agents(agents):
    for a in agents:
        try:
            os.kill(a.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.time() + 60
    left = {a.pid for a in agents}
    while left and time.time() < deadline:
        for pid in list(left):
            try:
                if os.waitpid(pid, os.WNOHANG)[0] == pid:
                    left.discard(pid)
            except ChildProcessError:
                left.discard(pid)
        time.sleep(0.02)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    return len(left)


def idle_and_rss(agents, window):
    c0 = {a.pid: _cpu_s(a.pid) for a in agents}
    time.sleep(window)
    cpu = [100 * (_cpu_s(a.pid) - c0[a.pid]) / window for a in agents]
    rss = [_status_kb(a.pid, "VmRSS:") for a in agents]
    return ({"median": median(cpu), "max": max(cpu)}, {"median": median(rss), "max": max(rss)})


def scrape_agents(agents):
    """Every agent's /metrics, parsed with prometheus_client (a real Prometheus parser)."""
    from prometheus_client.parser import text_string_to_metric_families
    out = {"startup": [], "first_response": [], "initial_list": [], "adds": 0, "lookups": {}}
    for a in agents:
        st, text = http_get(a.metrics, "/metrics", timeout=5)
        if st != 200:
            raise BenchError(f"{a.node}: /metrics answered {st}")
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                if s.name == "istio_cni_startup_ready_seconds":
                    out["startup"].append(s.value * 1000)
                elif s.name == "istio_cni_kube_watch_first_response_seconds" and s.labels.get("watch") == "pods":
                    out["first_response"].append(s.value * 1000)
                elif s.name == "istio_cni_kube_watch_initial_list_seconds" and s.labels.get("watch") == "pods":
                    out["initial_list"].append(s.value * 1000)
                elif s.name == "istio_cni_plugin_add_duration_seconds_count":
                    out["adds"] += int(s.value)
                elif s.name == "istio_cni_pod_lookups_total":
                    key = s.labels["source"] + (f"/{s.labels['reason']}" if "reason" in s.labels else "")
                    out["lookups"][key] = out["lookups"].get(key, 0) + int(s.value)
    return out


# --- the storm ----------------------------------------------------------------------------------------


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
        import socket
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
    p = _repair_pod(i, node, False)
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
        self.fresh = nss.create(k) if k else []
        self.pool = nss.create(min(a.pool, self.m))
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


# --- one run ------------------------------------------------------------------------------------------


def one_run(a, binary_copy, n, cache, work):
    installer = os.path.join(work, "install-cni")
    tag = f"n{n}-{'cache' if cache else 'nocache'}"
    run_dir = os.path.join(work, tag)
    os.makedirs(run_dir)
    double = Double(a.double, run_dir)
    nss = Namespaces(f"sc{os.getpid() % 10000}{'c' if cache else 'a'}{n}-")
    agents = []
    try:
        log(f"==> N={n}, pod cache {'on' if cache else 'off'}: starting {n} agents")
        start_s = start_agents(agents, n, run_dir, double, binary_copy, installer, cache, a.batch)
        log(f"    {n} agents ready and watching in {start_s:.1f} s; storm of {a.pods_per_node * n} pods")
        time.sleep(a.settle)
        storm = Storm(a, double, agents, nss, run_dir, cache)
        watches_before = double.stats()["watches_open"]
        s0 = double.stats()
        wall = storm.run()
        time.sleep(a.settle)
        s1 = double.stats()
        d = stats_delta(s0, s1)
        m = storm.m
        idle, rss = idle_and_rss(agents, a.idle)
        scraped = scrape_agents(agents)
        per_create = calibrate_creates(double, min(m, a.calibrate))
        req = d["requests"]
        api = sum(req.values())
        handshakes = d["tls_handshakes"] - d["admin_connections"]
        cpu_per_1000 = 1000 * d["cpu_seconds"] / m
        run = {
            "nodes": n, "cache": cache, "pods": m,
            "api_requests_per_pod_start": api / m,
            "api_gets_per_pod_start": req["get"] / m,
            "api_lists_per_pod_start": req["list"] / m,
            "api_watches_per_pod_start": req["watch"] / m,
            "api_other_per_pod_start": req["other"] / m,
            "tls_handshakes_per_pod_start": handshakes / m,
            "watches": watches_before,
            "watches_after_storm": s1["watches_open"],
            "double_cpu_s_per_1000_pod_starts": cpu_per_1000,
            "double_cpu_s_per_1000_pod_creates": 1000 * per_create,
            "double_cpu_s_per_1000_pod_starts_net_of_creates": cpu_per_1000 - 1000 * per_create,
            "agent_rss_kb": rss, "agent_idle_cpu_percent": idle, "idle_window_s": a.idle,
            "add_ms": stats_ms(storm.fresh_ms), "pool_add_ms": stats_ms(storm.pool_ms),
            "cache_propagation_ms": stats_ms(storm.propagation_ms),
            "agents_start_s": start_s, "storm_wall_s": wall, "pod_starts_per_s": m / wall,
            "lag_s": a.lag, "workers": a.workers,
            "startup_ready_ms": stats_ms(scraped["startup"]),
            "watch_first_response_ms": stats_ms(scraped["first_response"]),
            "watch_initial_list_ms": stats_ms(scraped["initial_list"]),
            "relayed_add_records": scraped["adds"], "pod_lookups": scraped["lookups"],
            "double_requests": req, "double_tls_handshakes": handshakes,
        }
        log(f"    {m} pod starts in {wall:.1f} s: {run['api_requests_per_pod_start']:.4f} API requests and "
            f"{run['tls_handshakes_per_pod_start']:.4f} TLS handshakes per pod start, {watches_before} watches, "
            f"double {cpu_per_1000:.2f} CPU s per 1000; agent RSS median {rss['median']} KiB")
        return run
    finally:
        left = stop_agents(agents)
        if left:
            log(f"    {left} agents needed SIGKILL")
        double.stop()
        nss.cleanup()
        if not a.keep:
            shutil.rmtree(run_dir, ignore_errors=True)


# --- checks and report --------------------------------------------------------------------------------

KEYS = ("nodes", "cache", "pods", "api_requests_per_pod_start", "tls_handshakes_per_pod_start", "watches")


def check(runs):
    """The structural facts (never timings): keys, watches = N, requests per pod start with and without cache."""
    bad = []
    for r in runs:
        what = f"N={r['nodes']} cache={'on' if r['cache'] else 'off'}"
        bad += [f"{what}: no {k}" for k in KEYS if k not in r]
        if r["watches"] != r["nodes"]:
            bad.append(f"{what}: {r['watches']} watches, expected {r['nodes']}")
        if r["cache"] and r["api_requests_per_pod_start"] > 0.01:
            bad.append(f"{what}: {r['api_requests_per_pod_start']:.4f} API requests per pod start (> 0.01): "
                       f"{r['double_requests']}, lookups {r['pod_lookups']}")
        if not r["cache"] and (r["api_gets_per_pod_start"] < 1 or r["tls_handshakes_per_pod_start"] < 1):
            bad.append(f"{what}: {r['api_gets_per_pod_start']:.3f} GETs and {r['tls_handshakes_per_pod_start']:.3f} "
                       "TLS handshakes per pod start (expected >= 1 each)")
    if bad:
        raise BenchError("scale check failed:\n  " + "\n  ".join(bad))


def f(v, nd=2):
    return "–" if v is None else f"{v:,.{nd}f}"


def markdown(doc):
    rows = ["| N nodes | pod cache | pods | API req / pod start (GET / LIST / WATCH) | TLS handshakes / pod start | "
            "watches | double CPU s / 1,000 pod starts (net of creating them) | pod → node cache p50 / p99 ms | "
            "agent RSS median / max KiB | agent idle CPU median / max % | ADD p50 / p99 ms (fresh netns) |",
            "|---:|:---:|---:|---|---:|---:|---|---|---|---|---|"]
    for r in doc["runs"]:
        prop = r["cache_propagation_ms"]
        add = r["add_ms"] or {}
        rows.append(
            f"| {r['nodes']:,} | {'on' if r['cache'] else 'off'} | {r['pods']:,} | "
            f"{r['api_requests_per_pod_start']:.4f} ({r['api_gets_per_pod_start']:.4f} / "
            f"{r['api_lists_per_pod_start']:.4f} / {r['api_watches_per_pod_start']:.4f}) | "
            f"{r['tls_handshakes_per_pod_start']:.4f} | {r['watches']:,} | "
            f"{f(r['double_cpu_s_per_1000_pod_starts'])} ({f(r['double_cpu_s_per_1000_pod_starts_net_of_creates'])}) | "
            f"{f(prop['p50']) + ' / ' + f(prop['p99']) if prop else '–'} | "
            f"{r['agent_rss_kb']['median']:,.0f} / {r['agent_rss_kb']['max']:,} | "
            f"{f(r['agent_idle_cpu_percent']['median'], 3)} / {f(r['agent_idle_cpu_percent']['max'], 3)} | "
            f"{f(add.get('p50'))} / {f(add.get('p99'))} |")
    rows += ["", "| N nodes | pod cache | agents started (all ready and watching) s | start → ready p50 / p99 ms | "
             "watch first response p50 / p99 ms | watch initial list p50 / p99 ms | ADD records relayed / pods | "
             "pod lookups by source | ADD p50 / p99 ms (re-ADD, pool) | storm s (pod starts / s) |",
             "|---:|:---:|---:|---|---|---|---|---|---|---|"]
    for r in doc["runs"]:
        def pp(k):
            v = r[k]
            return f"{f(v['p50'], 1)} / {f(v['p99'], 1)}" if v else "–"
        lookups = ", ".join(f"{k} {v:,}" for k, v in sorted(r["pod_lookups"].items()))
        rows.append(
            f"| {r['nodes']:,} | {'on' if r['cache'] else 'off'} | {f(r['agents_start_s'], 1)} | {pp('startup_ready_ms')} | "
            f"{pp('watch_first_response_ms')} | {pp('watch_initial_list_ms')} | {r['relayed_add_records']:,} / "
            f"{r['pods']:,} | {lookups} | {pp('pool_add_ms')} | {f(r['storm_wall_s'], 1)} "
            f"({f(r['pod_starts_per_s'], 0)}) |")
    m = doc["machine"]
    load = ", ".join(f"{x:.1f}" for x in m["loadavg_at_end"])
    return "\n".join([
        f"Scale simulation, {doc['date']}: `scripts/bench --scale {doc['scale']}{' --quick' if doc['quick'] else ''}`, "
        f"{m['nproc']} CPUs ({m['cpu']}), load average {load} at the end, {doc['wall_s']:.0f} s in all.",
        "", *rows, ""])


def picture(doc, path):
    """scale.svg: what a user of the pod cache gets, per N, with it and without it: API requests per pod start
    (the headline: 0 with the cache, drawn above the axis and labelled), the pod start's own latency (ADD p50 in
    a fresh network namespace), the API server's CPU and the agent's memory. The date, commit and command are
    on the figure."""
    import matplotlib
    matplotlib.use("Agg")
    # Text stays text (a smaller file that diffs), and no timestamp in it.
    matplotlib.rcParams["svg.fonttype"] = "none"
    matplotlib.rcParams["svg.hashsalt"] = "scale"
    import matplotlib.pyplot as plt
    panels = (
        ("Kubernetes API requests per pod start", "requests", lambda r: r["api_requests_per_pod_start"], "{:.2f}"),
        ("pod start: ADD latency (p50, fresh netns)", "ms", lambda r: (r.get("add_ms") or {}).get("p50"), "{:.1f}"),
        ("API server CPU per 1,000 pod starts", "CPU seconds", lambda r: r["double_cpu_s_per_1000_pod_starts"],
         "{:.2f}"),
        ("install-cni memory (RSS, median)", "MiB", lambda r: r["agent_rss_kb"]["median"] / 1024, "{:.1f}"),
    )
    fig, axes = plt.subplots(2, 2, figsize=(11, 7.6))
    axes = axes.flatten()
    top = [0.0] * len(panels)
    # Value labels: the line without the cache above its points, the line with it below (they never overlap).
    lines = ((False, "o--", "tab:blue", "pod cache off (upstream's behaviour: one API GET per pod start)", 7, "bottom"),
             (True, "s-", "tab:orange", "pod cache on (the node's agent answers from one watch)", -7, "top"))
    for cache, style, color, label, dy, va in lines:
        rs = sorted((r for r in doc["runs"] if r["cache"] == cache), key=lambda r: r["nodes"])
        if not rs:
            continue
        for i, (_, _, get, fmt) in enumerate(panels):
            pts = [(r["nodes"], get(r)) for r in rs if get(r) is not None]
            if not pts:
                continue
            xs, ys = zip(*pts)
            # Markers are not clipped and sit above the axes, so a line at 0 shows in full.
            axes[i].plot(xs, ys, style, color=color, label=label, clip_on=False, zorder=3)
            for x, y in pts:
                axes[i].annotate(fmt.format(y), (x, y), textcoords="offset points", xytext=(0, dy),
                                 ha="center", va=va, fontsize=8, color=color, annotation_clip=False)
            top[i] = max(top[i], *ys)
    for ax, t, (title, ylabel, _, _) in zip(axes, top, panels):
        ax.set_xscale("log")
        ax.set_xlabel("nodes (N install-cni agents)")
        ax.set_title(title, fontsize=11)
        ax.set_ylabel(ylabel)
        t = max(t, 1e-9)
        # Room below 0 (the cache's line at 0 and its labels stay above the x-axis) and above the top label.
        ax.set_ylim(-0.2 * t, t * 1.3)
        ax.axhline(0, color="0.6", linewidth=0.8, zorder=1)
        ax.grid(True, alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower left", ncol=1, fontsize=9, frameon=False)
    r0 = doc["runs"][0]
    m = doc["machine"]
    fig.suptitle(f"{r0['pods'] // r0['nodes']} pod starts per node against one HTTPS Kubernetes API server "
                 f"(tests/kube-double), N agents on {m['nproc']} CPUs", fontsize=11)
    commit = doc.get("commit") or "unknown commit"
    fig.text(0.99, 0.005, f"{doc['date']}, commit {commit}: scripts/bench --scale {doc['scale']}"
             f"{' --quick' if doc.get('quick') else ''}", ha="right", va="bottom", fontsize=7, color="0.35")
    fig.tight_layout(rect=(0, 0.1, 1, 0.97))
    fig.savefig(path, metadata={"Date": None})
    plt.close(fig)


def commit_of(repo):
    """The checked-out commit (12 hex digits), with '+changes' when the work tree differs; None without git."""
    try:
        c = subprocess.run(["git", "-C", repo, "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True,
                           check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", repo, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        return c + ("+changes" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--replot", metavar="SCALE_JSON",
                    help="only draw SCALE_JSON (a run's scale.json) again, into --out/scale.svg")
    ap.add_argument("--bin")
    ap.add_argument("--double")
    ap.add_argument("--out", required=True)
    ap.add_argument("--scale", help="comma list of node counts")
    ap.add_argument("--cache", choices=("both", "off", "on"), default="both")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--pods-per-node", type=int, default=20)
    ap.add_argument("--sample", type=int, default=200, help="ADDs into fresh namespaces per run")
    ap.add_argument("--pool", type=int, default=8, help="namespaces the other ADDs share")
    ap.add_argument("--workers", type=int, default=4, help="concurrent ADDs")
    ap.add_argument("--lag", type=float, default=0.2, help="seconds from a pod's creation to its ADD, at least")
    ap.add_argument("--ahead", type=int, default=200, help="pods created at most ahead of the ADDs")
    ap.add_argument("--batch", type=int, default=50, help="agents started together")
    ap.add_argument("--settle", type=float, default=2.0)
    ap.add_argument("--idle", type=float, default=10.0, help="idle CPU window, seconds")
    ap.add_argument("--calibrate", type=int, default=2000, help="pods created to price a create")
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()
    if a.replot:
        with open(a.replot) as fh:
            doc = json.load(fh)
        os.makedirs(a.out, exist_ok=True)
        picture(doc, os.path.join(a.out, "scale.svg"))
        log(f"drew {a.out}/scale.svg from {a.replot}")
        return
    if not (a.bin and a.double and a.scale):
        ap.error("--bin, --double and --scale are required (unless --replot)")
    if a.quick:
        a.sample, a.idle, a.settle, a.calibrate = min(a.sample, 20), 2.0, 1.0, 200
    if os.geteuid() != 0:
        raise SystemExit("scripts/bench --scale must run as root (network namespaces)")
    ns_list = [int(x) for x in a.scale.split(",") if x.strip()]
    if not ns_list or min(ns_list) < 1:
        raise SystemExit(f"--scale: expected node counts like 10,100,1000, got {a.scale!r}")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = 4 * max(ns_list) + 1024
    if soft < need:
        if hard < need:
            raise SystemExit(f"--scale {max(ns_list)} needs {need} open files; the hard limit is {hard}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
    # Each agent holds one inotify instance (a node runs one; this machine runs N): raise the per-user limit
    # for the run, and put it back afterwards.
    restore = {}
    for key, per_agent in (("fs/inotify/max_user_instances", 1), ("fs/inotify/max_user_watches", 8)):
        path = f"/proc/sys/{key}"
        cur = int(open(path).read())
        want = cur + per_agent * max(ns_list) + 256
        if cur < want:
            restore[path] = cur
            with open(path, "w") as fh:
                fh.write(str(want))
    work = tempfile.mkdtemp(prefix="istio-cni-scale-")
    os.chmod(work, 0o700)
    # One copy of the binary in the work dir: every node's bin dir hard-links it; agents run it as install-cni.
    binary_copy = os.path.join(work, "istio-cni-node")
    shutil.copy(a.bin, binary_copy)
    os.symlink(binary_copy, os.path.join(work, "install-cni"))
    t0 = time.time()
    runs = []

    def on_signal(sig, _frm):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    try:
        modes = {"both": (False, True), "off": (False,), "on": (True,)}[a.cache]
        for n in ns_list:
            for cache in modes:
                runs.append(one_run(a, binary_copy, n, cache, work))
    finally:
        for path, v in restore.items():
            with open(path, "w") as fh:
                fh.write(str(v))
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            log(f"kept {work}")
    from report import machine
    doc = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "scale": a.scale, "quick": a.quick,
           "commit": commit_of(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")),
           "wall_s": time.time() - t0, "machine": machine(), "pods_per_node": a.pods_per_node,
           "method": {"sample": a.sample, "pool": a.pool, "workers": a.workers, "lag_s": a.lag,
                      "bookmark_interval_s": 60, "idle_window_s": a.idle}, "runs": runs}
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "scale.json"), "w") as fh:
        json.dump(doc, fh, indent=2)
    md = markdown(doc)
    with open(os.path.join(a.out, "scale.md"), "w") as fh:
        fh.write(md)
    picture(doc, os.path.join(a.out, "scale.svg"))
    print(md)
    log(f"wrote {a.out}/scale.json, scale.md and scale.svg ({doc['wall_s']:.0f} s)")
    check(runs)


if __name__ == "__main__":
    try:
        main()
    except BenchError as e:
        log(f"ERROR: {e}")
        sys.exit(1)
