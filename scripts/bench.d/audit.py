"""scripts/bench.d: the audit's cost (stdlib only). 110 pods (the kubelet's default maximum per node) wired by
ptp + host-local and redirected by our plugin's ADD (iptables-nft), each with a pause process in its pod
cgroup (named as the kubelet's systemd driver names it), served by the API double; the standalone repair
agent (no mode: the audit only reports) audits them. The CPU of one whole round (the agent's own and its
children's, the iptables it runs) is read between two rounds_total increments: per round, per pod, and as a
share of one vCPU at the default interval (60 s), which must stay under 1 %; the agent's RSS under 4 MiB.
"""

import json
import os
import subprocess
import time

from common import PATH_ENV, BenchError, free_port, fmt, http_get, log, spawn, status_kb, stop, tail
from double import pod_object

NODE = "audit-node"
DEFAULT_INTERVAL_S = 60.0
CPU_BUDGET_PERCENT = 1.0
RSS_BUDGET_KB = 4096


def cpu_with_children(pid):
    """utime + stime + cutime + cstime of a live process, seconds (its reaped children included)."""
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return sum(int(x) for x in f[11:15]) / os.sysconf("SC_CLK_TCK")


def _metric(port, series):
    st, body = http_get(port, "/metrics", timeout=2)
    if st != 200:
        return None
    for line in body.splitlines():
        if line.startswith(series + " "):
            return float(line[len(series) + 1:])
    return None


class _Cgroups:
    """Pod cgroups under kubepods.slice, in the first hierarchy that takes them (cgroup v2 at /sys/fs/cgroup,
    a hybrid host's unified or pids hierarchy: the audit reads /proc/<pid>/cgroup, every line); removed
    (emptied first) by cleanup()."""

    PARTS = ("kubepods.slice", "kubepods-besteffort.slice", "kubepods-besteffort-pod{}.slice",
             "cri-containerd-bench.scope")

    def __init__(self):
        self.made = []
        self.root = None
        for root in ("/sys/fs/cgroup", "/sys/fs/cgroup/unified", "/sys/fs/cgroup/pids"):
            if os.path.isfile(os.path.join(root, "cgroup.procs")):
                self.root = root
                break
        if self.root is None:
            raise BenchError("the audit bench needs a cgroup hierarchy (v2 at /sys/fs/cgroup, or unified/pids)")

    def add(self, uid, pid):
        path = self.root
        for part in self.PARTS:
            path = os.path.join(path, part.format(uid.replace('-', '_')))
            if not os.path.isdir(path):
                os.mkdir(path)
                self.made.append(path)
        with open(os.path.join(path, "cgroup.procs"), "w") as f:
            f.write(str(pid))

    def cleanup(self):
        for d in reversed(self.made):
            try:
                for pid in open(os.path.join(d, "cgroup.procs")).read().split():
                    with open(os.path.join(self.root, "cgroup.procs"), "w") as f:
                        f.write(pid)
                os.rmdir(d)
            except OSError:
                pass


def run(b, n=110, interval_s=11.0):
    log(f"==> audit: {n} redirected pods, one round every {interval_s:g} s (cost per round is the interval's "
        f"business only through the spreading)")
    pods = b.pods.make(n, dual=False)
    objs = []
    for i, (ns, res) in enumerate(pods):
        ip = res["ips"][0]["address"].split("/")[0]
        o = pod_object(f"audit-{i}", ips=(ip,), node=NODE)
        o["metadata"]["uid"] = f"a0d17000-0000-4000-8000-{i:012d}"
        objs.append(o)
    b.double.add_pods(objs)
    for i, (ns, res) in enumerate(pods):
        env = b.cni_env("ours", "ADD", f"/run/netns/{ns}", f"IgnoreUnknown=1;K8S_POD_NAMESPACE=default;"
                                                           f"K8S_POD_NAME=audit-{i}")
        r = subprocess.run(b.argv("ours"), input=json.dumps(b.conf("nft", res)), env=env, capture_output=True,
                           text=True)
        if r.returncode != 0:
            raise BenchError(f"ADD of audit-{i} failed: {r.stdout.strip()} {r.stderr.strip()}")
    pauses, cgroups, pid = [], _Cgroups(), None
    try:
        for i, (ns, _) in enumerate(pods):
            uid = objs[i]["metadata"]["uid"]
            p = subprocess.Popen(["ip", "netns", "exec", ns, "sleep", "3600"], stdin=subprocess.DEVNULL)
            pauses.append(p)
            cgroups.add(uid, p.pid)
        exe = os.path.join(b.bins["ours"], "istio-cni-repair")
        port = free_port()
        logf = os.path.join(b.work, "logs", "audit.log")
        os.makedirs(os.path.dirname(logf), exist_ok=True)
        run_dir = b.run_dirs["nft"]
        argv = [exe, f"--kubeconfig={os.path.join(run_dir, 'istio-cni-kubeconfig')}",
                f"--repair-node-name={NODE}", "--host-proc=/proc", f"--audit-interval={interval_s}s",
                f"--cni-agent-run-dir={run_dir}", f"--monitoring-port={port}", "--log-level=warn"]
        pid = spawn(argv, {"PATH": PATH_ENV}, None, os.devnull, logf, exe=exe)
        rounds = lambda: _metric(port, "istio_cni_audit_rounds_total") or 0  # noqa: E731
        deadline = time.time() + 10 * interval_s + 120
        # Round 1 completes; the CPU of round 2 (start to completion) is the cost of one round.
        while rounds() < 1:
            if time.time() > deadline or os.waitpid(pid, os.WNOHANG)[0] == pid:
                raise BenchError(f"no audit round completed; see {logf}:\n{tail(logf)}")
            time.sleep(0.02)
        c0 = cpu_with_children(pid)
        while rounds() < 2:
            if time.time() > deadline:
                raise BenchError(f"the second audit round did not complete; see {logf}:\n{tail(logf)}")
            time.sleep(0.02)
        round_cpu = cpu_with_children(pid) - c0
        redirected = _metric(port, 'istio_cni_audit_pods{state="redirected"}')
        if redirected != n:
            st, body = http_get(port, "/metrics", timeout=2)
            raise BenchError(f"{redirected} of {n} pods redirected in the audit's round:\n{body}\n{tail(logf)}")
        out = {"pods": n, "interval_s": interval_s, "round_cpu_ms": round_cpu * 1000,
               "per_pod_cpu_ms": round_cpu * 1000 / n,
               "round_duration_s": _metric(port, "istio_cni_audit_round_duration_seconds"),
               "cpu_percent_at_default_interval": 100 * round_cpu / DEFAULT_INTERVAL_S,
               "vmrss_kb": status_kb(pid, "VmRSS:"), "vmhwm_kb": status_kb(pid, "VmHWM:")}
        out["within_budget"] = (out["cpu_percent_at_default_interval"] < CPU_BUDGET_PERCENT
                                and (out["vmrss_kb"] or 0) < RSS_BUDGET_KB)
    finally:
        if pid is not None:
            stop(pid)
        for p in pauses:
            p.kill()
            p.wait()
        cgroups.cleanup()
    # Judged only at the kubelet's maximum (the full run); the quick run (CI) checks that the section works.
    if n >= 110 and not out["within_budget"]:
        raise BenchError(f"the audit is over its budget (< {CPU_BUDGET_PERCENT} % of one vCPU at 60 s, RSS < 4 MiB): "
                         f"{out}")
    return out


def markdown(d):
    return "\n".join([
        f"Audit ({d['pods']} redirected pods, iptables-nft, repair agent with no mode):",
        "",
        "| | |",
        "|---|---:|",
        f"| CPU per round (agent + its iptables children) | {fmt(d['round_cpu_ms'], 0)} ms |",
        f"| CPU per pod verified | {fmt(d['per_pod_cpu_ms'])} ms |",
        f"| share of one vCPU at AUDIT_INTERVAL=60s | {fmt(d['cpu_percent_at_default_interval'])} % (budget < 1 %) |",
        f"| istio_cni_audit_round_duration_seconds | {fmt(d['round_duration_s'])} s |",
        f"| VmRSS / VmHWM of the agent | {d['vmrss_kb']} / {d['vmhwm_kb']} KiB (budget < 4096) |",
    ])

