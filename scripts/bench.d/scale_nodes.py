"""scripts/bench --scale: the N node agents and the API double they watch. Imported by scale.py.

Double: the bench's kube-double with bookmarks every 60 s (as an API server sends them), dying with the
harness, plus one keep-alive admin connection per calling thread. Namespaces: pod namespaces with an address
on lo. Agent: one node's `install-cni` (pod watch, repair agent, pod cache on or off) in its own dirs, through
setpriv --pdeathsig; started in batches until ready and watching, stopped all at once; their idle CPU, RSS
and /metrics.
"""

import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time

import common
import netns
from common import PATH_ENV, BenchError, cpu_s, http_get, median, status_kb
from double import Double as BenchDouble
from double import exchange

PRIMARY = {"cniVersion": "1.0.0", "name": "k8s-pod-network",
           "plugins": [{"type": "ptp", "ipMasq": False,
                        "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.210.0.0/16"}]]}}]}
SETPRIV = shutil.which("setpriv", path=PATH_ENV) or "/usr/bin/setpriv"


# --- the API double -----------------------------------------------------------------------------------


class Double(BenchDouble):
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
                return exchange(c, method, path, body, {"Content-Type": "application/json"})
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


class Namespaces(netns.Namespaces):
    """The storm's pod namespaces: lo up, and an address of their own on it (ns_addr; IPv6 is decided from
    it)."""

    def make(self, count):
        names = self.new_names(count)
        self.create(names)
        for n in names:
            argv = ["addr", "add", f"{ns_addr(n)}/32", "dev", "lo"]
            r = subprocess.run(["ip", "-n", n] + argv, capture_output=True, text=True)
            if r.returncode != 0:
                raise BenchError(f"ip -n {n} {' '.join(argv)}: {r.stderr.strip()}")
        return names


def ns_addr(ns):
    """The address Namespaces.make puts on lo (for the prevResult)."""
    k = int(re.search(r"(\d+)$", ns).group(1))
    return f"10.{200 + k // 65536}.{(k // 256) % 256}.{k % 256}"


# --- the agents ---------------------------------------------------------------------------------------


PORTS = re.compile(r"metrics on \S*:(\d+)/metrics, health on \S*:(\d+)/healthz")


class Agent:
    def __init__(self, i, root, double, binary, installer, cache):
        self.i = i
        self.node = f"node-{i}"
        d = os.path.join(root, f"node-{i}")
        self.conf, self.bin, self.run, self.sa = double.node_dirs(d, namespace="istio-system")
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
        return common.tail(self.log, n)

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
    c0 = {a.pid: cpu_s(a.pid) for a in agents}
    time.sleep(window)
    cpu = [100 * (cpu_s(a.pid) - c0[a.pid]) / window for a in agents]
    rss = [status_kb(a.pid, "VmRSS:") for a in agents]
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
