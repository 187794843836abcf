#!/usr/bin/env python3
"""scripts/bench driver (stdlib only; run by scripts/bench as root, not by hand).

Every figure is a fresh process per run, timed from posix_spawn to wait4 with perf_counter_ns; peak RSS and
CPU come from wait4's rusage (the process and the children it waited for, like /usr/bin/time). Cases are
interleaved run by run (ours, peer, floors) so machine noise hits all columns alike. Pod network namespaces
are created (and wired by Debian's ptp + host-local inside a "node" namespace) before the timed loop; only the
plugin exec is timed. The API is the HTTPS kube-double on 127.0.0.1.
"""

import argparse
import concurrent.futures
import ctypes
import gc
import http.client
import json
import os
import re
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import agents  # noqa: E402  (installer and repair agent measurements)
import cgprofile as cg_profile  # noqa: E402  (--profile: callgrind of one invocation per kind)
import podcache  # noqa: E402  (the node's pod cache: its agent, cases, memory, hostile clients)
from report import fmt, machine, markdown, median, pct, report, summarize  # noqa: E402,F401

PATH_ENV = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
CNI_DIR = "/usr/lib/cni"
PODS_PER_NODE = 100
CLONE_NEWNET = 0x40000000
LIBC = ctypes.CDLL(None, use_errno=True)


def log(msg):
    print(msg, file=sys.stderr, flush=True)


class BenchError(Exception):
    pass


# --- namespaces -------------------------------------------------------------------------------------


def setns(fd):
    if LIBC.setns(fd, CLONE_NEWNET) != 0:
        e = ctypes.get_errno()
        raise OSError(e, "setns: " + os.strerror(e))


class Namespaces:
    """Named netns (ip netns) created through `ip -batch`; all deleted by cleanup()."""

    def __init__(self, prefix):
        self.prefix = prefix
        self.names = []
        self.n = 0
        self.host_fd = os.open("/proc/self/ns/net", os.O_RDONLY)

    def new_names(self, count):
        out = []
        for _ in range(count):
            self.n += 1
            out.append(f"{self.prefix}{self.n}")
        return out

    def create(self, names):
        if not names:
            return
        batch = "".join(f"netns add {n}\n" for n in names)
        self.names.extend(names)
        r = subprocess.run(["ip", "-batch", "-"], input=batch, text=True, capture_output=True)
        if r.returncode != 0:
            raise BenchError(f"ip -batch netns add failed: {r.stderr.strip()}")
        # Loopback up, as a runtime's sandbox has it.
        for n in names:
            r = subprocess.run(["ip", "-n", n, "link", "set", "lo", "up"], text=True, capture_output=True)
            if r.returncode != 0:
                raise BenchError(f"ip -n {n} link set lo up failed: {r.stderr.strip()}")

    def run_in(self, name, argv, **kw):
        """subprocess.run inside netns `name` (the driver's thread enters it for the spawn only)."""
        fd = os.open(f"/run/netns/{name}", os.O_RDONLY)
        try:
            setns(fd)
            return subprocess.run(argv, **kw)
        finally:
            setns(self.host_fd)
            os.close(fd)

    def delete(self, names):
        names = set(names)
        if not names:
            return
        batch = "".join(f"netns del {n}\n" for n in names)
        subprocess.run(["ip", "-force", "-batch", "-"], input=batch, text=True, capture_output=True)
        self.names = [n for n in self.names if n not in names]

    def cleanup(self):
        if not self.names:
            return
        batch = "".join(f"netns del {n}\n" for n in self.names)
        subprocess.run(["ip", "-force", "-batch", "-"], input=batch, text=True, capture_output=True)
        self.names = []


# --- the API double ---------------------------------------------------------------------------------


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
            c.request(method, path, body=None if body is None else json.dumps(body), headers=hdr)
            r = c.getresponse()
            data = r.read()
            if r.status >= 300:
                raise BenchError(f"{method} {path}: {r.status} {data[:300]!r}")
            return json.loads(data) if data else None
        finally:
            c.close()

    def add_pods(self, pods):
        self.on_node += sum(1 for p in pods if p.get("spec", {}).get("nodeName") == podcache.NODE)
        for i in range(0, len(pods), 500):
            self.request("POST", "/_double/pods", pods[i:i + 500])

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
               node="bench-node", labels=None):
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


# --- timing -------------------------------------------------------------------------------------------


class Sample:
    __slots__ = ("ns", "rc", "rss_kb", "cpu_s")

    def __init__(self, ns, rc, rss_kb, cpu_s):
        self.ns, self.rc, self.rss_kb, self.cpu_s = ns, rc, rss_kb, cpu_s


def spawn(argv, env, stdin=None, stdout=os.devnull, stderr=os.devnull, exe=None):
    fa = [
        (os.POSIX_SPAWN_OPEN, 0, stdin or os.devnull, os.O_RDONLY, 0),
        (os.POSIX_SPAWN_OPEN, 1, stdout, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600),
        (os.POSIX_SPAWN_OPEN, 2, stderr, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600),
    ]
    return os.posix_spawn(exe or argv[0], argv, env, file_actions=fa)


SPAWN = None  # the bench-spawn launcher (scripts/bench.d/spawn.c); set by main()
RESULT = None  # its result file


def read_result(path, what):
    try:
        f = open(path).read().split()
        return Sample(int(f[0]), int(f[1]), int(f[2]), int(f[3]) / 1e6)
    except (OSError, ValueError, IndexError) as e:
        raise BenchError(f"{what}: no result from bench-spawn ({e})")


def timed(argv, env, stdin=None, stdout=os.devnull, stderr=os.devnull, exe=None, result=None):
    """One fresh process, measured by the tiny static launcher (wall ns, exit code, peak RSS, CPU)."""
    res = result or RESULT
    try:
        os.unlink(res)
    except FileNotFoundError:
        pass
    pid = spawn([SPAWN, res, exe or argv[0]] + list(argv), env, stdin, stdout, stderr, exe=SPAWN)
    _, status, _ = os.wait4(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise BenchError(f"bench-spawn failed for {argv[0]} (status {status})")
    return read_result(res, argv[0])


# --- the bench ----------------------------------------------------------------------------------------


class Bench:
    def __init__(self, a):
        self.a = a
        self.work = tempfile.mkdtemp(prefix="istio-cni-bench-")
        os.chmod(self.work, 0o700)
        self.nss = Namespaces(f"ib{os.getpid() % 100000}-")
        self.double = None
        self.cache = None
        self.with_cache = True
        self.node = None
        self.pod_seq = 0
        self.subnet_seq = 0
        self.results = {}
        self.notes = []

    # ---- set-up
    def setup(self):
        a = self.a
        os.makedirs(os.path.join(self.work, "logs"), exist_ok=True)
        self.double = Double(a.double, self.work)
        self.node = self.nss.new_names(1)[0]
        self.nss.create([self.node])
        self.nss.run_in(self.node, ["ip", "addr", "add", "10.199.0.1/32", "dev", "lo"], check=True)
        self.cur_node, self.node_seq, self.node_pods = self.node, 0, 0
        self.bins = {"ours": self.plugin_dir("ours", a.bin)}
        if a.peer:
            self.bins["peer"] = self.plugin_dir("peer", a.peer)
        self.run_dirs = {}
        for backend in ("nft", "legacy"):
            d = os.path.join(self.work, f"run-{backend}")
            os.makedirs(d)
            shutil.copy(self.double.kubeconfig, os.path.join(d, "istio-cni-kubeconfig"))
            with open(os.path.join(d, "iptables-backend"), "w") as f:
                f.write(backend + "\n")
            self.run_dirs[backend] = d
        # nftables mode: the kubeconfig only (no iptables backend record in this mode).
        d = os.path.join(self.work, "run-nftables")
        os.makedirs(d)
        shutil.copy(self.double.kubeconfig, os.path.join(d, "istio-cni-kubeconfig"))
        self.run_dirs["nftables"] = d
        self.ipam_dir = os.path.join(self.work, "ipam")
        self.scratch_out = os.path.join(self.work, "stdout")
        self.base_env = {"PATH": PATH_ENV}
        # A pod namespace for the cases that never enter one (shortcut and no-sidecar paths).
        self.idle = self.make_pods(1, dual=False)[0]
        self.cache = None
        if self.with_cache:
            podcache.start(self)

    def plugin_dir(self, label, exe):
        d = os.path.join(self.work, f"bin-{label}")
        os.makedirs(d)
        for n in ("istio-cni", "install-cni", "istio-cni-repair"):
            os.symlink(os.path.abspath(exe), os.path.join(d, n))
        return d

    def make_pods(self, count, dual):
        """`count` pod namespaces wired by ptp + host-local inside a node namespace; returns
        [(netns name, ptp result)]. ptp runs in parallel threads (each enters the node namespace for its
        own spawn): dual-stack wiring waits ~1 s per pod for IPv6 duplicate address detection."""
        names = self.nss.new_names(count)
        self.nss.create(names)
        work = []
        for n in names:
            # A real node has at most ~110 pods (kubelet's default max-pods): a new node namespace, with its
            # own /24, every PODS_PER_NODE pods (thousands of veths in one namespace make ptp slow).
            if self.node_pods >= PODS_PER_NODE:
                self.node_pods = 0
                self.node_seq += 1
                nn = self.nss.new_names(1)[0]
                self.nss.create([nn])
                self.cur_node = nn
            self.node_pods += 1
            k = self.node_seq
            ranges = [[{"subnet": f"10.{200 + k // 256}.{k % 256}.0/24"}]]
            routes = [{"dst": "0.0.0.0/0"}]
            if dual:
                ranges.append([{"subnet": f"fd00:200:{k:x}::/64"}])
                routes.append({"dst": "::/0"})
            work.append((n, self.cur_node, ranges, routes))
        if self.a.wiring == "bare":
            out = []
            for n, _, _, _ in work:
                self.pod_seq += 1
                ip = f"10.201.{(self.pod_seq // 250) % 250}.{self.pod_seq % 250 + 2}"
                ips = [{"address": f"{ip}/16", "interface": 0}]
                if dual:
                    ips.append({"address": f"fd00:201::{self.pod_seq:x}/64", "interface": 0})
                out.append((n, {"cniVersion": "1.0.0", "interfaces": [{"name": "eth0", "sandbox": f"/run/netns/{n}"}],
                                "ips": ips}))
            return out

        def wire(item):
            n, node, ranges, routes = item
            conf = {"cniVersion": "1.0.0", "name": "bench", "type": "ptp", "ipMasq": False,
                    "ipam": {"type": "host-local", "dataDir": self.ipam_dir, "ranges": ranges, "routes": routes}}
            env = {"PATH": PATH_ENV, "CNI_COMMAND": "ADD", "CNI_CONTAINERID": n, "CNI_NETNS": f"/run/netns/{n}",
                   "CNI_IFNAME": "eth0", "CNI_PATH": CNI_DIR}
            r = self.nss.run_in(node, [os.path.join(CNI_DIR, "ptp")], input=json.dumps(conf), text=True,
                                capture_output=True, env=env)
            if r.returncode != 0:
                raise BenchError(f"ptp ADD for {n} failed: {r.stdout.strip()} {r.stderr.strip()}")
            return n, json.loads(r.stdout)

        with concurrent.futures.ThreadPoolExecutor(max_workers=64 if dual else 8) as ex:
            out = list(ex.map(wire, work))
        return out

    def conf(self, backend, prev, cni_version="1.0.0", run_dir=None):
        run = self.run_dirs[run_dir or backend]
        c = {"cniVersion": cni_version, "name": "bench", "type": "istio-cni", "cni_agent_run_dir": run,
             "exclude_namespaces": ["kube-system"], "plugin_log_level": "info", "pod_lookup_timeout_seconds": 5,
             "kubernetes": {"kubeconfig": os.path.join(run, "istio-cni-kubeconfig"),
                            "exclude_namespaces": ["kube-system"], "cni_bin_dir": self.bins["ours"]}}
        if backend == "nftables":
            c["native_nftables"] = True
        if prev is not None:
            c["prevResult"] = prev
        return c

    def write(self, rel, text):
        p = os.path.join(self.work, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w") as f:
            f.write(text)
        return p

    def cni_env(self, impl, command, netns, args):
        e = {"PATH": PATH_ENV, "CNI_COMMAND": command, "CNI_CONTAINERID": "c-" + os.path.basename(netns),
             "CNI_NETNS": netns, "CNI_IFNAME": "eth0", "CNI_PATH": f"{self.bins[impl]}:{CNI_DIR}"}
        if args is not None:
            e["CNI_ARGS"] = args
        return e

    # ---- explain: the document a pod gets, from our own binary
    def explain(self, pod):
        p = self.write(f"explain/{pod['metadata']['name']}.json", json.dumps(pod))
        r = subprocess.run([os.path.join(self.bins["ours"], "istio-cni"), "explain", "--pod", p],
                           capture_output=True, text=True, env={"PATH": PATH_ENV})
        if r.returncode != 0:
            raise BenchError(f"istio-cni explain failed: {r.stderr.strip()}")
        text = "\n".join(l for l in r.stdout.splitlines() if not l.startswith("#")) + "\n"
        blocks = re.split(r"(?m)^(?=\*)", text)
        blocks = [b for b in blocks if b.strip()]
        if "then the IPv6 document" in r.stdout:
            half = len(blocks) // 2
            v4, v6 = "".join(blocks[:half]), "".join(blocks[half:])
            heads = lambda bs: [b.splitlines()[0] for b in bs]  # noqa: E731
            if heads(blocks[:half]) != heads(blocks[half:]):
                raise BenchError("cannot split explain output into IPv4 and IPv6 documents")
            return v4, v6
        return "".join(blocks), None

    def explain_nft(self, pod):
        """The nftables script a pod gets in native_nftables mode (comment lines dropped)."""
        p = self.write(f"explain/{pod['metadata']['name']}-nft.json", json.dumps(pod))
        r = subprocess.run([os.path.join(self.bins["ours"], "istio-cni"), "explain", "--nft", "--pod", p],
                           capture_output=True, text=True, env={"PATH": PATH_ENV})
        if r.returncode != 0:
            raise BenchError(f"istio-cni explain --nft failed: {r.stderr.strip()}")
        return "".join(l + "\n" for l in r.stdout.splitlines() if not l.startswith("#"))

    def our_add_jobs(self, n, tag, case, backend, run_dir=None):
        """`n` fresh pods (IPv4, a sidecar, served by the double as `ours-<case>-<tag><i>`) and our plugin's ADD
        of each with `backend`'s configuration (and `run_dir`'s, when given): (pods, jobs)."""
        pp = self.make_pods(n, False)
        names = [f"ours-{case}-{tag}{i}" for i in range(n)]
        objs, jobs = [], []
        for (nsname, prev), nm in zip(pp, names):
            ips = [ip["address"].split("/")[0] for ip in prev["ips"]]
            objs.append(pod_object(nm, ips=ips))
            conf = self.write(f"stdin/ours-{nm}.json", json.dumps(self.conf(backend, prev, run_dir=run_dir)))
            env = self.cni_env("ours", "ADD", f"/run/netns/{nsname}",
                               f"IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME={nm}")
            jobs.append((self.argv("ours"), env, conf, None))
        self.double.add_pods(objs)
        return pp, jobs

    def nftables_cases(self, n, tag, add_case):
        """ADD in nftables mode (one netlink batch, no exec) against upstream's way as the floor: `nft -f` of
        the same script, exec'd per pod inside its namespace."""
        nft = shutil.which("nft", path=PATH_ENV)
        if not nft:
            note = "add-redirect-nftables: skipped, no nft binary for the floor (apt install nftables)"
            if note not in self.notes:
                self.notes.append(note)
            return
        case = "add-redirect-nftables"
        script = self.write(f"docs/{case}.nft", self.explain_nft(pod_object("rep")))
        fr = self.make_pods(n, False)
        jobs = [[([nft, "-f", script], self.base_env, None, nsname)] for nsname, _ in fr]
        add_case("floor-nft-f", "nft -f of the same script alone (upstream's way)", "floor", jobs,
                 kind="floor", check=("nftables", [x[0] for x in fr]))
        pp, jobs = self.our_add_jobs(n, tag, case, "nftables")
        add_case(case, "ADD with redirect, IPv4 REDIRECT, nftables over netlink", "ours", jobs,
                 floor="floor-nft-f", check=("nftables", [x[0] for x in pp]))
        add_case("check-nftables", "CHECK (nftables, redirected pod)", "ours",
                 [(j[0], dict(j[1], CNI_COMMAND="CHECK"), j[2], None) for j in jobs], floor="floor-noop")

    # ---- the cases
    def plan(self, n, tag):
        """Builds the case list for `n` rounds: each case has jobs (one per run) and a floor. `tag` keeps pod
        names unique across chunks."""
        a = self.a
        cases = []
        impls = list(self.bins)
        double = self.double
        api = double.url
        floor_exe = a.floor
        idle_ns = f"/run/netns/{self.idle[0]}"
        idle_prev = self.idle[1]

        def add_case(name, label, impl, jobs, floor=None, group=None, kind="plugin", check=None):
            cases.append({"name": name, "label": label, "impl": impl, "jobs": jobs, "floor": floor,
                          "group": group or name, "kind": kind, "samples": [], "check": check})

        # Floors with no pods.
        noop = [([a.noop], self.base_env, None, None)] * n
        add_case("floor-noop", "exec of a static no-op", "floor", noop, kind="floor")

        # VERSION
        vin = self.write("stdin/version.json", json.dumps({"cniVersion": "1.0.0"}))
        for impl in impls:
            env = {"PATH": PATH_ENV, "CNI_COMMAND": "VERSION", "CNI_NETNS": "dummy", "CNI_IFNAME": "dummy",
                   "CNI_PATH": "dummy"}
            add_case("version", "VERSION", impl, [(self.argv(impl), env, vin, None)] * n, floor="floor-noop")

        # ADD, not a Kubernetes pod / excluded namespace: no API call.
        cin = self.write("stdin/add-nft-idle.json", json.dumps(self.conf("nft", idle_prev)))
        for impl in impls:
            add_case("add-nonk8s", "ADD, not a Kubernetes pod", impl,
                     [(self.argv(impl), self.cni_env(impl, "ADD", idle_ns, "IgnoreUnknown=1"), cin, None)] * n,
                     floor="floor-noop")
            add_case("add-excluded", "ADD, excluded namespace (no API call)", impl,
                     [(self.argv(impl), self.cni_env(impl, "ADD", idle_ns,
                                                     "IgnoreUnknown=1;K8S_POD_NAMESPACE=kube-system;"
                                                     "K8S_POD_NAME=coredns-1"), cin, None)] * n,
                     floor="floor-noop")

        # ADD of a pod without sidecar: one GET.
        pods = []
        names = [f"plain-{tag}{i}" for i in range(n)]
        for nm in names:
            pods.append(pod_object(nm, sidecar=False))
        double.add_pods(pods)
        get_floor = [([floor_exe, "get", double.ca, double.token, f"{api}/api/v1/namespaces/default/pods/{nm}"],
                      self.base_env, None, None) for nm in names]
        add_case("floor-get", "one TLS GET of the pod (minimal static client)", "floor", get_floor, kind="floor")
        for impl in impls:
            add_case("add-nosidecar", "ADD, pod without sidecar (one API GET)", impl,
                     [(self.argv(impl), self.cni_env(impl, "ADD", idle_ns,
                                                     f"IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME={nm}"),
                       cin, None) for nm in names], floor="floor-get")

        # ADD with redirect: per backend, TPROXY, dual-stack; CHECK and DEL on the redirected nft pods.
        variants = [
            ("add-redirect-nft", "ADD with redirect, IPv4 REDIRECT, nft", "nft", {}, None, False),
            ("add-redirect-legacy", "ADD with redirect, IPv4 REDIRECT, legacy", "legacy", {}, None, False),
            ("add-tproxy", "ADD with redirect, TPROXY (nft)", "nft",
             {"sidecar.istio.io/interceptionMode": "TPROXY"}, None, False),
            ("add-dual", "ADD with redirect, dual-stack (nft)", "nft", {},
             [{"name": "ISTIO_DUAL_STACK", "value": "true"}], True),
        ]
        for case, label, backend, ann, penv, dual in variants:
            if backend not in self.backends:
                note = f"{case}: skipped, iptables backend {backend} not available"
                if note not in self.notes:
                    self.notes.append(note)
                continue
            # Documents for the floors, from a representative pod.
            rep = pod_object("rep", annotations=ann, env=penv,
                             ips=("10.200.0.2", "fd00:200::2") if dual else ("10.200.0.2",))
            v4, v6 = self.explain(rep)
            d4 = self.write(f"docs/{case}.v4", v4)
            d6 = self.write(f"docs/{case}.v6", v6) if v6 else None
            restore_step = "restore-lock" if backend == "legacy" else "restore"
            prog4 = f"iptables-{backend}-restore"
            prog6 = f"ip6tables-{backend}-restore"
            lock_env = dict(self.base_env)
            if backend == "legacy":
                lock_env["XTABLES_LOCKFILE"] = "/proc/self/ns/net"
            rargs = ["--noflush"] + (["--wait=30"] if backend == "legacy" else [])
            # Floor: restore alone (exec'd by the driver from inside the fresh pod namespace).
            fr = self.make_pods(n, dual)
            jobs = []
            for nsname, _ in fr:
                seq = [([shutil.which(prog4, path=PATH_ENV)] + rargs, lock_env, d4, nsname)]
                if d6:
                    seq.append(([shutil.which(prog6, path=PATH_ENV)] + rargs, lock_env, d6, nsname))
                jobs.append(seq)
            add_case(f"floor-restore-{case}", f"{prog4}{' + ' + prog6 if d6 else ''} alone", "floor", jobs,
                     kind="floor", check=(backend, [x[0] for x in fr]))
            # Floor: GET + restore in one minimal process.
            fc = self.make_pods(n, dual)
            names = [f"fl-{case}-{tag}{i}" for i in range(n)]
            double.add_pods([pod_object(nm, annotations=ann, env=penv) for nm in names])
            jobs = []
            for (nsname, _), nm in zip(fc, names):
                argv = [floor_exe, "get", double.ca, double.token, f"{api}/api/v1/namespaces/default/pods/{nm}",
                        "netns", f"/run/netns/{nsname}", restore_step, prog4, d4]
                if d6:
                    argv += [restore_step, prog6, d6]
                jobs.append((argv, self.base_env, None, None))
            add_case(f"floor-getrestore-{case}", "TLS GET + restore (minimal static client)", "floor", jobs,
                     kind="floor", check=(backend, [x[0] for x in fc]))
            for impl in impls:
                pp = self.make_pods(n, dual)
                names = [f"{impl}-{case}-{tag}{i}" for i in range(n)]
                objs = []
                jobs = []
                for (nsname, prev), nm in zip(pp, names):
                    ips = [ip["address"].split("/")[0] for ip in prev["ips"]]
                    objs.append(pod_object(nm, annotations=ann, env=penv, ips=ips))
                    conf = self.write(f"stdin/{impl}-{nm}.json", json.dumps(self.conf(backend, prev)))
                    env = self.cni_env(impl, "ADD", f"/run/netns/{nsname}",
                                       f"IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME={nm}")
                    jobs.append((self.argv(impl), env, conf, None))
                double.add_pods(objs)
                add_case(case, label, impl, jobs, floor=f"floor-getrestore-{case}",
                         check=(backend, [x[0] for x in pp]))
                if case == "add-redirect-nft":
                    # CHECK and DEL of the same pods, run right after their ADD in the same round.
                    add_case("check", "CHECK (nft, redirected pod)", impl,
                             [(j[0], dict(j[1], CNI_COMMAND="CHECK"), j[2], None) for j in jobs],
                             floor="floor-getsave")
                    add_case("del", "DEL", impl, [(j[0], dict(j[1], CNI_COMMAND="DEL"), j[2], None) for j in jobs],
                             floor="floor-noop")
            if case == "add-redirect-nft":
                fs = self.make_pods(n, False)
                names = [f"fs-{tag}{i}" for i in range(n)]
                double.add_pods([pod_object(nm) for nm in names])
                jobs = [([floor_exe, "get", double.ca, double.token, f"{api}/api/v1/namespaces/default/pods/{nm}",
                          "netns", f"/run/netns/{nsname}", "save", "iptables-nft-save"], self.base_env, None, None)
                        for (nsname, _), nm in zip(fs, names)]
                add_case("floor-getsave", "TLS GET + iptables-nft-save (minimal static client)", "floor", jobs,
                         kind="floor")
        self.nftables_cases(n, tag, add_case)
        if self.cache:
            self.cache_cases(n, tag, add_case)
        return cases

    def cache_cases(self, n, tag, add_case):
        """ADD with the pod from the node's cache (install-cni running, its socket in the run dir), per backend,
        and ADD in nftables mode against a socket nobody listens on (a SIGKILLed agent): the API fallback."""
        have_nft = shutil.which("nft", path=PATH_ENV) is not None
        variants = [("add-redirect-nft-cache", "ADD with redirect, IPv4 REDIRECT, nft, pod from the node's cache",
                     "nft", "cache", "floor-restore-add-redirect-nft", "nft" in self.backends)]
        variants += [("add-redirect-nftables-cache", "ADD with redirect, IPv4 REDIRECT, nftables, pod from the node's cache",
                      "nftables", "cache", "floor-nft-f", have_nft),
                     ("add-redirect-nftables-stale", "ADD, nftables, agent killed (its socket left): API fallback",
                      "nftables", "stale", "floor-nft-f", have_nft)]
        for case, label, backend, run_dir, floor, ok in variants:
            if not ok:
                continue
            pp, jobs = self.our_add_jobs(n, tag, case, backend, run_dir)
            add_case(case, label, "ours", jobs, floor=floor, check=(backend, [x[0] for x in pp]))

    def argv(self, impl):
        return [os.path.join(self.bins[impl], "istio-cni")]

    def run_job(self, case, job, keep):
        seq = job if isinstance(job, list) else [job]
        total = None
        for argv, env, stdin, netns in seq:
            fd = None
            if netns:
                fd = os.open(f"/run/netns/{netns}", os.O_RDONLY)
                setns(fd)
            try:
                s = timed(argv, env, stdin, self.scratch_out, self.err_log(case))
            finally:
                if fd is not None:
                    setns(self.nss.host_fd)
                    os.close(fd)
            if s.rc != 0:
                out = open(self.scratch_out).read()[:2000]
                raise BenchError(f"{case['name']} ({case['impl']}): {' '.join(argv)} exited {s.rc}: {out}\n"
                                 f"stderr: {self.tail(self.err_log(case))}")
            total = s if total is None else Sample(total.ns + s.ns, 0, max(total.rss_kb, s.rss_kb),
                                                    total.cpu_s + s.cpu_s)
        if keep:
            case["samples"].append(total)

    def err_log(self, case):
        return os.path.join(self.work, "logs", f"{case['name']}-{case['impl']}.log")

    @staticmethod
    def tail(path, n=15):
        try:
            return "".join(open(path).readlines()[-n:])
        except OSError:
            return ""

    def verify(self, case):
        """Untimed: the first and last pod of a redirect case really got our chains."""
        if not case["check"]:
            return
        backend, names = case["check"]
        if backend == "nftables":
            for nm in (names[0], names[-1]):
                r = self.nss.run_in(nm, ["nft", "list", "table", "inet", "istio-proxy-nat"],
                                    capture_output=True, text=True)
                if "chain istio-output" not in r.stdout:
                    raise BenchError(f"{case['name']} ({case['impl']}): no istio-output chain in pod netns {nm} "
                                     f"after the run:\n{r.stdout[:1500]}{r.stderr[:500]}")
            return
        for nm in (names[0], names[-1]):
            r = self.nss.run_in(nm, [f"iptables-{backend}-save"], capture_output=True, text=True)
            if "ISTIO_OUTPUT" not in r.stdout:
                raise BenchError(f"{case['name']} ({case['impl']}): no ISTIO_OUTPUT chain in pod netns {nm} "
                                 f"after the run:\n{r.stdout[:1500]}")

    def run_cases(self):
        """Interleaved rounds, in chunks: each chunk's pods (about 13 per round) exist only while it runs, so
        the node never holds more pod namespaces than a real one (each is a mount under /run/netns, and the
        mount table's size shows in what children of a new mount namespace pay)."""
        total = self.a.runs + self.a.warmup
        log(f"==> timing: {self.a.warmup} warm-up + {self.a.runs} runs per case, interleaved, in chunks of "
            f"{self.a.chunk} rounds (pods created before each chunk, deleted after it)")
        merged, order = {}, []
        done, chunk, setup_s, loop_s, most = 0, 0, 0.0, 0.0, 0
        while done < total:
            k = min(self.a.chunk, total - done)
            first = len(self.nss.names)
            self.node_pods = PODS_PER_NODE  # a fresh node namespace per chunk
            t = time.time()
            cases = self.plan(k, f"c{chunk}-")
            if self.cache:
                podcache.wait_synced(self)
            setup_s += time.time() - t
            most = max(most, len(self.nss.names))
            self.settle()
            gc.disable()
            t = time.time()
            for i in range(k):
                for c in cases:
                    self.run_job(c, c["jobs"][i], keep=done + i >= self.a.warmup)
            loop_s += time.time() - t
            gc.enable()
            for c in cases:
                self.verify(c)
                key = (c["name"], c["impl"])
                if key in merged:
                    merged[key]["samples"].extend(c["samples"])
                else:
                    merged[key] = c
                    order.append(key)
                c["jobs"] = None
            self.drop_since(first)
            done += k
            chunk += 1
        log(f"    {len(order)} case columns, {chunk} chunks, at most {most} namespaces at a time; set-up "
            f"{setup_s:.1f} s, timed loops {loop_s:.1f} s")
        self.cases = [merged[k] for k in order]

    def drop_since(self, first):
        """Deletes the namespaces created since index `first` (pods and their node namespaces); the next pod
        gets a new node namespace."""
        self.nss.delete(self.nss.names[first:])
        self.node_pods = PODS_PER_NODE

    def settle(self):
        """Lets the kernel finish tearing down deleted namespaces (async work) before timing again."""
        time.sleep(self.a.settle)

    # ---- 50 concurrent ADDs
    def concurrency(self):
        out = []
        for backend in self.backends:
            for impl in self.bins:
                for rep in range(self.a.bursts):
                    k = self.a.burst
                    first = len(self.nss.names)
                    self.node_pods = PODS_PER_NODE
                    pp = self.make_pods(k, False)
                    names = [f"burst-{impl}-{backend}-{rep}-{i}" for i in range(k)]
                    objs, jobs = [], []
                    for (nsname, prev), nm in zip(pp, names):
                        ips = [ip["address"].split("/")[0] for ip in prev["ips"]]
                        objs.append(pod_object(nm, ips=ips))
                        conf = self.write(f"stdin/{nm}.json", json.dumps(self.conf(backend, prev)))
                        env = self.cni_env(impl, "ADD", f"/run/netns/{nsname}",
                                           f"IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME={nm}")
                        jobs.append((self.argv(impl), env, conf))
                    self.double.add_pods(objs)
                    self.settle()
                    logdir = os.path.join(self.work, "logs")
                    pids, rcs = {}, {}
                    gc.disable()
                    t0 = time.perf_counter_ns()
                    for idx, (argv, env, conf) in enumerate(jobs):
                        res = os.path.join(self.work, f"burst-res-{idx}")
                        pid = spawn([SPAWN, res, argv[0]] + argv, env, conf,
                                    os.path.join(self.work, f"burst-out-{idx}"),
                                    os.path.join(logdir, f"burst-{impl}-{backend}.log"), exe=SPAWN)
                        pids[pid] = idx
                    t_spawned = time.perf_counter_ns()
                    done_at = {}
                    while len(rcs) < len(jobs):
                        pid, status, _ = os.wait4(-1, 0)
                        if pid in pids:
                            rcs[pids[pid]] = os.waitstatus_to_exitcode(status)
                            done_at[pids[pid]] = time.perf_counter_ns()
                    t1 = time.perf_counter_ns()
                    gc.enable()
                    samples = [read_result(os.path.join(self.work, f"burst-res-{i}"), names[i]) for i in range(k)]
                    failed = [i for i in range(k) if rcs[i] != 0 or samples[i].rc != 0]
                    if failed:
                        idx = failed[0]
                        raise BenchError(f"concurrent ADD ({impl}, {backend}): {len(failed)} of {k} failed; "
                                         f"pod {names[idx]}: {open(os.path.join(self.work, f'burst-out-{idx}')).read()[:1500]}")
                    for nsname, _ in pp:
                        r = self.nss.run_in(nsname, [f"iptables-{backend}-save"], capture_output=True, text=True)
                        if "ISTIO_OUTPUT" not in r.stdout:
                            raise BenchError(f"concurrent ADD ({impl}, {backend}): pod netns {nsname} has no rules")
                    self.drop_since(first)
                    lat = sorted(x.ns / 1e6 for x in samples)
                    fin = sorted((x - t0) / 1e6 for x in done_at.values())
                    out.append({"impl": impl, "backend": backend, "pods": k, "total_ms": (t1 - t0) / 1e6,
                                "spawn_all_ms": (t_spawned - t0) / 1e6,
                                "per_pod_amortized_ms": (t1 - t0) / 1e6 / k, "latency_median_ms": median(lat),
                                "latency_p99_ms": pct(lat, 99), "latency_max_ms": lat[-1],
                                "done_since_burst_median_ms": median(fin), "all_succeeded": True,
                                "serial_case": f"add-redirect-{backend}"})
                    log(f"    {k} concurrent ADDs ({impl}, {backend}): total {(t1 - t0) / 1e6:.1f} ms, all succeeded")
        self.burst_results = out

    # ---- profile breakdown from the plugin's own decision log
    def breakdown(self):
        """Medians of the plugin's logged pod-lookup / rule-build / restore times (ours only)."""
        res = {}
        pat_lookup = re.compile(r"pod lookup ([0-9.]+) ms")
        pat_built = re.compile(r"rules built in ([0-9.]+) ms")
        pat_step = re.compile(r"(IPv4|IPv6|ipv4|ipv6|v4|v6)\s+\w+ in ([0-9.]+) ms")
        pat_nft = re.compile(r"nftables\): rules built in [0-9.]+ ms, \w+ in ([0-9.]+) ms")
        for c in self.cases:
            if c["impl"] != "ours" or not c["name"].startswith("add-"):
                continue
            try:
                lines = open(self.err_log(c)).read().splitlines()
            except OSError:
                continue
            lk, bl, st = [], [], {}
            for l in lines:
                m = pat_lookup.search(l)
                if m:
                    lk.append(float(m.group(1)))
                m = pat_built.search(l)
                if m:
                    bl.append(float(m.group(1)))
                for fam, v in pat_step.findall(l):
                    st.setdefault(fam, []).append(float(v))
                for v in pat_nft.findall(l):
                    st.setdefault("nftables_apply", []).append(float(v))
            if lk or bl:
                res[c["name"]] = {"pod_lookup_ms": median(lk), "rules_built_ms": median(bl),
                                  **{f"restore_{k}_ms": median(v) for k, v in st.items()}}
        return res

    def cleanup(self):
        if self.cache:
            self.cache.stop()
        if self.double:
            self.double.stop()
        self.nss.cleanup()
        if self.a.keep:
            log(f"kept the work directory (logs of every invocation): {self.work}")
        else:
            shutil.rmtree(self.work, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--peer")
    ap.add_argument("--noop", required=True)
    ap.add_argument("--floor", required=True)
    ap.add_argument("--double", required=True)
    ap.add_argument("--spawn", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--chunk", type=int, default=8, help="rounds per chunk of pods (13 pods per round)")
    ap.add_argument("--settle", type=float, default=1.0, help="seconds to wait after deleting namespaces")
    ap.add_argument("--burst", type=int, default=50)
    ap.add_argument("--bursts", type=int, default=3)
    ap.add_argument("--wiring", choices=("ptp", "bare"), default="ptp")
    ap.add_argument("--repair-pods", type=int, default=1000)
    ap.add_argument("--agent-runs", type=int, default=10)
    ap.add_argument("--skip", default="", help="comma list of sections to skip: plugin,burst,installer,repair,cache")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    ap.add_argument("--profile-bin", help="a symbolized build: run one invocation per kind under callgrind")
    a = ap.parse_args()
    skip = set(filter(None, a.skip.split(",")))
    if os.geteuid() != 0:
        raise SystemExit("scripts/bench must run as root (it creates network namespaces)")
    b = Bench(a)
    global SPAWN, RESULT
    SPAWN = a.spawn
    RESULT = os.path.join(b.work, "spawn.result")
    b.backends = [x for x in ("nft", "legacy") if shutil.which(f"iptables-{x}-restore", path=PATH_ENV)]
    b.with_cache = "cache" not in skip

    def on_signal(sig, _frm):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    extra = {}
    try:
        b.setup()
        b.cases, b.burst_results = [], []
        if "plugin" not in skip:
            b.run_cases()
        if "burst" not in skip:
            log(f"==> {a.burst} concurrent ADDs × {a.bursts}")
            b.concurrency()
        if b.cache:
            log("==> pod cache: API requests, memory with 1,000 pods, /readyz under hostile clients")
            extra["cache"] = {"requests": podcache.api_requests(b, [
                "add-redirect-nft", "add-redirect-nft-cache", "add-redirect-nftables", "add-redirect-nftables-cache",
                "add-redirect-nftables-stale"]), "memory": podcache.memory(b, 200 if a.runs < 20 else 1000),
                "hostile": podcache.hostile(b, secs=2.0 if a.runs < 20 else 5.0)}
        if "installer" not in skip:
            extra["installer"] = agents.installer(b)
        if "repair" not in skip:
            extra["repair"] = agents.repair(b)
        if a.profile_bin:
            log("==> profile (callgrind)")
            os.makedirs(a.out, exist_ok=True)
            extra["profile"] = cg_profile.profile(b, a.profile_bin)
        doc = report(b, a, extra)
    finally:
        b.cleanup()
    os.makedirs(a.out, exist_ok=True)
    md = markdown(doc)  # (also adds the derived ratios to doc)
    with open(os.path.join(a.out, "latest.json"), "w") as f:
        json.dump(doc, f, indent=2)
    with open(os.path.join(a.out, "latest.md"), "w") as f:
        f.write(md)
    print(md)
    log(f"wrote {os.path.join(a.out, 'latest.json')} and latest.md")


if __name__ == "__main__":
    try:
        main()
    except BenchError as e:
        log(f"ERROR: {e}")
        sys.exit(1)
