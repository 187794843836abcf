"""scripts/bench: the node's pod cache. Imported by bench.py (stdlib only).

Agent: `install-cni` in the host namespace against the double, NODE_NAME=bench-node (every plugin case's pods
  are on that node), run dir `run-cache` (FORCE_IPTABLES_BINARY=iptables-nft). The `*-cache` ADD cases point
  their configuration at that run dir; before each chunk the driver waits until the cache holds every pod.
  With --before, the earlier build's own install-cni serves a second cache (run dir `run-cache-peer`) to its
  plugin's `*-cache` cases, alongside ours for the whole run.
api_requests(b): pod GETs per 1,000 ADDs per case, from the double's request log, and the agent's own
  LIST/WATCH requests.
memory(b): a second agent on a node of its own: VmRSS with 0 pods, then with 1,000 realistically sized
  injected pods (the repair agent's bench pods); the difference is what the cache costs.
hostile(b): 1,000 clients on the socket at once (silent, one byte per second, garbage, 64 KiB lines) for a few
  seconds while /readyz is probed every 20 ms: its latency, and the agent's VmHWM before and after.
"""

import json
import os
import re
import resource
import socket
import threading
import time

import common
from agents import PRIMARY
from common import PATH_ENV, BenchError, atomic_write, fmt, free_port, http_get, log, median, pct, spawn
from common import tail
from double import NODE, pod_object, repair_pod


class Agent:
    def __init__(self, b, name, node, impl="ours"):
        self.b = b
        d = os.path.join(b.work, name)
        self.conf, self.bin, self.run, self.sa = b.double.node_dirs(d)
        atomic_write(os.path.join(self.conf, "10-bench.conflist"), json.dumps(PRIMARY, indent=2))
        self.health, self.metrics = free_port(), free_port()
        env = {"PATH": PATH_ENV, "MOUNTED_CNI_NET_DIR": self.conf, "CNI_NET_DIR": "/etc/cni/net.d",
               "CNI_AGENT_RUN_DIR": self.run, "CNI_BIN_DIR": self.bin, "SECONDARY_BIN_DIR": "",
               "SERVICE_ACCOUNT_DIR": self.sa, "KUBERNETES_SERVICE_HOST": b.double.host,
               "KUBERNETES_SERVICE_PORT": b.double.port, "NODE_NAME": node, "REPAIR_ENABLED": "false",
               "HEALTH_PORT": str(self.health), "MONITORING_PORT": str(self.metrics),
               "FORCE_IPTABLES_BINARY": "iptables-nft", "EXCLUDE_NAMESPACES": "kube-system", "LOG_LEVEL": "warn"}
        self.log = os.path.join(b.work, "logs", f"{name}.log")
        exe = os.path.join(b.bins[impl], "install-cni")
        self.pid = spawn([exe], env, None, os.devnull, self.log, exe=exe)
        self.wait(lambda: self.pods() is not None, 30, "its cache to sync")

    def text(self):
        st, body = http_get(self.metrics, "/metrics", timeout=2)
        return body if st == 200 else ""

    def value(self, series):
        for line in self.text().splitlines():
            if line.startswith(series + " "):
                return int(float(line[len(series) + 1:]))
        return None

    def pods(self):
        return self.value("istio_cni_pod_cache_pods")

    def lookups(self):
        out = {}
        for line in self.text().splitlines():
            mm = re.match(r'istio_cni_pod_cache_lookups_total\{result="(\w+)"\} (\S+)', line)
            if mm:
                out[mm.group(1)] = int(float(mm.group(2)))
        return out

    def wait(self, ok, secs, what):
        deadline = time.time() + secs
        while time.time() < deadline:
            if ok():
                return
            if os.waitpid(self.pid, os.WNOHANG)[0] == self.pid:
                raise BenchError(f"install-cni (pod cache) exited; see {self.log}:\n{tail(self.log)}")
            time.sleep(0.02)
        raise BenchError(f"install-cni (pod cache): no {what} within {secs} s:\n{tail(self.log)}")

    def status_kb(self, key):
        return common.status_kb(self.pid, key)

    def stop(self):
        common.stop(self.pid)


def start(b):
    for impl in b.ours_impls:
        b.caches[impl] = Agent(b, "cache-agent" if impl == "ours" else f"cache-agent-{impl}", NODE, impl)
        b.run_dirs[cache_run(impl)] = b.caches[impl].run
        # The same agent's socket for plugins recorded on the legacy backend: a run dir of its own (the record
        # decides the backend) whose socket is a hard link to the agent's (same inode: its heartbeat too).
        d = b.double.run_dir(os.path.join(b.work, f"run-{cache_run(impl, 'legacy')}"))
        with open(os.path.join(d, "iptables-backend"), "w") as f:
            f.write("legacy\n")
        os.link(os.path.join(b.caches[impl].run, "pod-cache.sock"), os.path.join(d, "pod-cache.sock"))
        b.run_dirs[cache_run(impl, "legacy")] = d
    b.cache = b.caches["ours"]
    # A run dir whose socket nobody listens on: the agent was SIGKILLed and left it.
    d = b.double.run_dir(os.path.join(b.work, "run-stale"))
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(os.path.join(d, "pod-cache.sock"))
    s.close()
    b.run_dirs["stale"] = d


def cache_run(impl, backend=None):
    """The key in b.run_dirs of the run dir whose socket `impl`'s own install-cni serves (with `backend`: the
    one recorded on that iptables backend instead of the host's)."""
    key = "cache" if impl == "ours" else f"cache-{impl}"
    return f"{key}-{backend}" if backend else key


def wait_synced(b):
    """Until every cache holds every pod the driver has put on the bench node."""
    want = b.double.on_node
    for agent in b.caches.values():
        agent.wait(lambda: (agent.pods() or 0) >= want, 60, f"{want} pods")


# Cases whose pods also get a CHECK right after their ADD (one more GET each without the cache).
CHECKED = ("add-redirect-nft", "add-redirect-nftables")


def api_requests(b, cases):
    """Pod GETs per 1,000 ADDs for each ADD case of each of b.ours_impls (a CHECK's GET of the same pod not
    counted), the agents' LIST/WATCH requests (all of them together) and each cache's lookups by result."""
    reqs = b.double.request("GET", "/_double/requests")
    gets = {}
    lists = watches = 0
    for r in reqs:
        path, q = r["path"], r.get("query", "")
        if r["method"] != "GET":
            continue
        if path == "/api/v1/pods":
            if "watch=" in q:
                watches += 1
            else:
                lists += 1
            continue
        mm = re.match(r"/api/v1/namespaces/[^/]+/pods/([^/]+)$", path)
        if mm:
            gets[mm.group(1)] = gets.get(mm.group(1), 0) + 1
    out = []
    for impl in b.ours_impls:
        for name in cases:
            pat = re.compile(rf"^{impl}-{re.escape(name)}-c\d+-\d+$")
            n = sum(v for k, v in gets.items() if pat.match(k))
            adds = b.a.runs + b.a.warmup
            if name in CHECKED:
                n = max(0, n - adds)
            out.append({"case": name, "impl": b.label(impl), "adds": adds, "pod_gets": n,
                        "per_1000": 1000.0 * n / adds})
    return {"cases": out, "agent_lists": lists, "agent_watches": watches, "lookups": b.cache.lookups(),
            "lookups_by_impl": {b.label(impl): agent.lookups() for impl, agent in b.caches.items()}}


def memory(b, n=1000):
    node = "rss-node"
    a = Agent(b, "rss-agent", node)
    try:
        time.sleep(1.0)
        rss0, hwm0 = a.status_kb("VmRSS:"), a.status_kb("VmHWM:")
        pods = [repair_pod(100000 + i, node, False) for i in range(n)]
        for p in pods:
            p["metadata"]["name"] = f"rss-{p['metadata']['name']}"
        b.double.add_pods(pods)
        a.wait(lambda: a.pods() == n, 120, f"{n} pods")
        time.sleep(1.0)
        rss1, hwm1 = a.status_kb("VmRSS:"), a.status_kb("VmHWM:")
    finally:
        a.stop()
    log(f"    pod cache memory: VmRSS {rss0} KiB with 0 pods, {rss1} KiB with {n} (+{rss1 - rss0} KiB); "
        f"VmHWM {hwm0} → {hwm1} KiB")
    return {"pods": n, "vmrss_kb_empty": rss0, "vmrss_kb_full": rss1, "vmrss_kb_added": rss1 - rss0,
            "vmhwm_kb_empty": hwm0, "vmhwm_kb_full": hwm1}


def hostile(b, clients=1000, secs=5.0):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < clients + 200:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, clients + 512), hard))
    a = b.cache
    path = os.path.join(a.run, "pod-cache.sock")
    hwm0 = a.status_kb("VmHWM:")
    stop = threading.Event()
    socks = []
    lock = threading.Lock()

    def connect(keep=True):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.setblocking(False)
        try:
            s.connect(path)
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:
            s.close()
            return None
        if keep:
            with lock:
                socks.append(s)
        return s

    def slow():
        # One byte per second on a quarter of the connections; a dropped one is replaced.
        mine = [connect() for _ in range(clients // 4)]
        while not stop.is_set():
            for i, s in enumerate(mine):
                try:
                    if s is None:
                        raise OSError
                    s.send(b"{")
                except OSError:
                    if s is not None:
                        s.close()
                    mine[i] = connect()
            stop.wait(1.0)

    def garbage():
        # Garbage and 64 KiB lines, a quarter of the clients every 50 ms, each closed after sending.
        big = b"x" * 65536
        while not stop.is_set():
            for k in range(clients // 4):
                s = connect(keep=False)
                if s is None:
                    continue
                try:
                    s.send(big if k % 2 else b"\xff garbage\n")
                except OSError:
                    pass
                s.close()
            time.sleep(0.05)

    # A pod the probes look up by its UID (a lookup without one is never a hit), in the cache before the load
    # starts.
    probe_pod = pod_object("hostile-probe")
    probe_pod["metadata"]["uid"] = "00000000-0000-4000-8000-00000000b0be"
    b.double.add_pods([probe_pod])
    wait_synced(b)
    probe_req = b'{"v":1,"namespace":"default","name":"hostile-probe","uid":"00000000-0000-4000-8000-00000000b0be"}\n'

    def lookup():
        """One lookup as the plugin does it: its first reply within 50 ms."""
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(0.05)
        try:
            s.connect(path)
            s.sendall(probe_req)
            return b'"result":"hit"' in s.recv(65536)
        except OSError:
            return False
        finally:
            s.close()

    silent = [connect() for _ in range(clients // 2)]
    threads = [threading.Thread(target=slow), threading.Thread(target=garbage)]
    for t in threads:
        t.start()
    lat, failed, hits, asked = [], 0, 0, 0
    t_end = time.time() + secs
    while time.time() < t_end:
        t0 = time.perf_counter_ns()
        st, _ = http_get(a.health, "/readyz", timeout=2)
        t1 = time.perf_counter_ns()
        if st is None:
            failed += 1
        else:
            lat.append((t1 - t0) / 1e6)
        asked += 1
        hits += lookup()
        time.sleep(0.02)
    hwm1 = a.status_kb("VmHWM:")
    stop.set()
    for t in threads:
        t.join()
    with lock:
        for s in socks:
            try:
                s.close()
            except OSError:
                pass
    del silent
    lat.sort()
    log(f"    /readyz under {clients} hostile socket clients: median {median(lat):.2f} ms, max {lat[-1]:.2f} ms, "
        f"{failed} unanswered; lookups {hits}/{asked} served; VmHWM {hwm0} → {hwm1} KiB")
    return {"clients": clients, "seconds": secs, "readyz_n": len(lat), "readyz_median_ms": median(lat),
            "readyz_p99_ms": pct(lat, 99), "readyz_max_ms": lat[-1], "readyz_unanswered": failed,
            "lookups_asked": asked, "lookups_served": hits,
            "vmhwm_kb_before": hwm0, "vmhwm_kb_after": hwm1}


def markdown(d):
    f = fmt
    out = ["| API requests per 1,000 pod starts (the pod's GET; a CHECK's not counted) | pod GETs |", "|---|---:|"]
    r = d["requests"]
    by_impl = r.get("lookups_by_impl") or {"ours": r["lookups"]}
    for c in r["cases"]:
        who = f", {c['impl']}" if len(by_impl) > 1 else ""
        out.append(f"| {c['case']} ({c['adds']} ADDs{who}) | {f(c['per_1000'], 1)} |")
    agents = "agents'" if len(by_impl) > 1 else "agent's"
    looked = "; ".join(f"{k}: {v}" for k, v in by_impl.items()) if len(by_impl) > 1 else str(r["lookups"])
    out.append(f"\nThe {agents} own requests during the whole run: {r['agent_lists']} LIST pages, {r['agent_watches']} "
               f"WATCH; cache lookups by result: {looked}.")
    if d.get("memory"):
        mm = d["memory"]
        out.append(f"\nPod cache memory: VmRSS {mm['vmrss_kb_empty']} KiB with 0 pods, {mm['vmrss_kb_full']} KiB with "
                   f"{mm['pods']} injected pods (**+{mm['vmrss_kb_added']} KiB**); VmHWM {mm['vmhwm_kb_empty']} → "
                   f"{mm['vmhwm_kb_full']} KiB.")
    if d.get("hostile"):
        h = d["hostile"]
        out.append(f"\n`/readyz` while {h['clients']} hostile clients hold the socket ({h['seconds']:.0f} s): median "
                   f"{f(h['readyz_median_ms'])} ms, p99 {f(h['readyz_p99_ms'])} ms, max {f(h['readyz_max_ms'])} ms over "
                   f"{h['readyz_n']} probes, {h['readyz_unanswered']} unanswered; lookups served within 50 ms: "
                   f"{h['lookups_served']} of {h['lookups_asked']}; VmHWM {h['vmhwm_kb_before']} → "
                   f"{h['vmhwm_kb_after']} KiB.")
    return "\n".join(out)
