"""scripts/bench.d: the API server misbehaving (stdlib only). Imported by bench.py. Both measurements use a
double of their own (tests/kube-double), so its faults never reach the pod cache's agent or the other sections.

lookup(b, deadlines): wall time of one plugin ADD (a fresh process under the bench-spawn launcher, exec'd like a
  runtime) of a pod with a sidecar when the API server never speaks (hang: TCP accepted, no TLS), stalls after
  TLS (the request read, never answered) or answers every request 429 with Retry-After 1 s or 7 s, for each
  `pod_lookup_timeout_seconds` in `deadlines`; with its exit code (it must fail: no pod starts unredirected) and
  the API requests the double saw.
pace(b, window_s): the repair agent's watch loop against a watch the server closes at once (watch-close) and a
  410 Expired on every watch (watch-gone): LIST and WATCH requests and log lines (info level) over `window_s`
  seconds from its first request.
"""

import http.client
import json
import os
import time

from common import PATH_ENV, BenchError, fmt, free_port, log, ms, spawn, stop, tail
from double import Double, exchange, pod_object

FAULTS = [("hang", {"fault": "hang"}), ("stall", {"fault": "stall"}),
          ("429, Retry-After 1 s", {"fault": "retry-after", "seconds": 1}),
          ("429, Retry-After 7 s", {"fault": "retry-after", "seconds": 7})]
WATCH_FAULTS = ["watch-close", "watch-gone"]


class Admin:
    """One keep-alive admin connection to `double`, opened before any fault: a hung double accepts new
    connections but never speaks, so the fault is cleared through a connection it already served."""

    def __init__(self, double):
        self.d = double
        self.c = http.client.HTTPSConnection(double.host, int(double.port), context=double.ctx, timeout=30)
        self.hdr = {"Authorization": f"Bearer {double.token}", "Content-Type": "application/json"}

    def __call__(self, method, path, body=None):
        return exchange(self.c, method, path, body, self.hdr)

    def requests(self):
        """The API requests (admin ones aside) the double recorded since the last clear."""
        self.c.request("GET", "/_double/requests", headers=self.hdr)
        r = self.c.getresponse()
        data = r.read()
        if r.status != 200:
            raise BenchError(f"GET /_double/requests: {r.status}")
        return json.loads(data)

    def close(self):
        self.c.close()


def _own_double(b, name):
    d = os.path.join(b.work, name)
    os.makedirs(d)
    return Double(b.a.double, d)


def lookup(b, deadlines):
    log(f"==> lookup deadline: one ADD per fault (hang, stall, 429 × 2) with pod_lookup_timeout_seconds "
        f"{', '.join(str(x) for x in deadlines)}")
    double = _own_double(b, "faults-lookup")
    admin = Admin(double)
    out = []
    try:
        admin("POST", "/_double/pods", [pod_object("wall")])
        rd = double.run_dir(os.path.join(b.work, "run-faults"))
        with open(os.path.join(rd, "iptables-backend"), "w") as f:
            f.write((b.backends[0] if b.backends else "nft") + "\n")
        b.run_dirs["faults"] = rd
        ns, prev = b.idle
        env = b.cni_env("ours", "ADD", f"/run/netns/{ns}",
                        "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=wall")
        for secs in deadlines:
            conf = b.conf("nft", prev, run_dir="faults")
            conf["pod_lookup_timeout_seconds"] = secs
            stdin = b.write(f"stdin/faults-{secs}.json", json.dumps(conf))
            case = {"name": f"lookup-{secs}s", "impl": "ours"}
            for label, fault in FAULTS:
                admin("DELETE", "/_double/requests")
                admin("POST", "/_double/fault", fault)
                try:
                    s = b.launcher.timed(b.argv("ours"), env, stdin, b.scratch_out, b.err_log(case))
                finally:
                    admin("POST", "/_double/fault", {"fault": "none"})
                reqs = len(admin.requests())
                if s.rc == 0:
                    raise BenchError(f"ADD succeeded against an API server that {label}: the pod would start "
                                     f"without its lookup:\n{open(b.scratch_out).read()[:1500]}")
                out.append({"deadline_s": secs, "fault": label, "wall_ms": ms(s.ns), "exit": s.rc,
                            "requests": reqs, "cpu_ms": s.cpu_s * 1000})
                log(f"    {label}, deadline {secs} s: {ms(s.ns):.0f} ms, exit {s.rc}, {reqs} requests")
    finally:
        admin.close()
        double.stop()
    return out


def pace(b, window_s):
    log(f"==> repair agent's watch loop under watch faults: {window_s:g} s per fault")
    exe = os.path.join(b.bins["ours"], "istio-cni-repair")
    out = []
    for fault in WATCH_FAULTS:
        double = _own_double(b, f"faults-{fault}")
        admin = Admin(double)
        pid = None
        logf = os.path.join(b.work, "logs", f"pace-{fault}.log")
        try:
            admin("POST", "/_double/fault", {"fault": fault})
            argv = [exe, f"--kubeconfig={double.kubeconfig}", "--repair-node-name=pace-node",
                    f"--monitoring-port={free_port()}"]
            pid = spawn(argv, {"PATH": PATH_ENV, "RUST_LOG": "info"}, None, os.devnull, logf, exe=exe)
            # The window starts at the first request, so a slow start of the process does not shrink it.
            deadline = time.time() + 30
            while not admin.requests():
                if time.time() > deadline or os.waitpid(pid, os.WNOHANG)[0] == pid:
                    raise BenchError(f"the repair agent sent no request within 30 s ({fault}):\n{tail(logf)}")
                time.sleep(0.01)
            time.sleep(window_s)
            reqs = admin.requests()
            lines = len(open(logf).read().splitlines())
        finally:
            if pid is not None:
                stop(pid)
            admin.close()
            double.stop()
        watches = sum(1 for r in reqs if "watch=true" in r["query"].split("&"))
        lists = len(reqs) - watches
        if lists < 1 or watches < 1:
            raise BenchError(f"{fault}: {lists} LIST and {watches} WATCH requests: the loop did not run:\n"
                             f"{tail(logf)}")
        out.append({"fault": fault, "window_s": window_s, "lists": lists, "watches": watches, "log_lines": lines,
                    "requests_per_s": len(reqs) / window_s})
        log(f"    {fault}: {lists} LIST, {watches} WATCH, {lines} log lines in {window_s:g} s")
    return out


def markdown(d):
    out = []
    if d.get("lookup"):
        out += ["| plugin ADD against a misbehaving API server | lookup deadline | wall ms | CPU ms | exit | "
                "API requests |", "|---|---:|---:|---:|---:|---:|"]
        out += [f"| {x['fault']} | {x['deadline_s']} s | {fmt(x['wall_ms'], 0)} | {fmt(x['cpu_ms'], 1)} | "
                f"{x['exit']} | {x['requests']} |" for x in d["lookup"]]
    if d.get("pace"):
        out += ["", "| repair agent, every watch faulted | window | LIST | WATCH | requests / s | log lines |",
                "|---|---:|---:|---:|---:|---:|"]
        out += [f"| {x['fault']} | {x['window_s']:g} s | {x['lists']} | {x['watches']} | "
                f"{fmt(x['requests_per_s'])} | {x['log_lines']} |" for x in d["pace"]]
    return "\n".join(out)
