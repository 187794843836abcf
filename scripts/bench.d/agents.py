"""scripts/bench: the long-running applets. Imported by bench.py (stdlib only).

installer(b): `install-cni` started in the node namespace with a ptp primary conflist, a service account
  dir holding the double's token and CA; time from exec to `/readyz` 200 (fresh process each run); then the
  primary rewrites its file (atomic rename, without our entry) and we time until our entry is back.
repair(b): `istio-cni-repair` (label mode) on a node with N realistically sized pods in the double (1 in 50
  broken); time to label all broken pods after start, RSS (VmHWM/VmRSS) and CPU; then a new broken pod is
  added (its ADDED watch event) and we time until the agent's label action is counted in its metrics.
"""

import http.client
import json
import os
import signal
import time

from common import PATH_ENV, BenchError, atomic_write, cpu_s, free_port, fmt, http_get, log, median, ms, pct
from common import paired, setns, spawn, status_kb, stop, tail
from double import repair_pod

HEALTH_PORT = 18321


def stats(vals):
    s = sorted(vals)
    if not s:
        return None
    return {"n": len(s), "median_ms": median(s), "p99_ms": pct(s, 99), "min_ms": s[0], "max_ms": s[-1]}


PRIMARY = {"cniVersion": "1.0.0", "name": "bench-primary",
           "plugins": [{"type": "ptp", "ipMasq": False,
                        "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.210.0.0/16"}]]}},
                       {"type": "portmap", "capabilities": {"portMappings": True}}]}


def start_once(b, impl, run, node_fd):
    """One fresh `install-cni` of `impl` in the node namespace: exec → `/readyz` 200, then 5 re-injections,
    then SIGTERM (its entry must go). Returns (ms to ready, [re-injection ms], VmHWM KiB, VmRSS KiB)."""
    exe = os.path.join(b.bins[impl], "install-cni")
    d = os.path.join(b.work, f"installer-{impl}-{run}")
    conf, bindir, rundir, sa = b.double.node_dirs(d, namespace="istio-system")
    primary = os.path.join(conf, "10-bench.conflist")
    primary_text = json.dumps(PRIMARY, indent=2)
    atomic_write(primary, primary_text)
    env = {"PATH": PATH_ENV, "MOUNTED_CNI_NET_DIR": conf, "CNI_NET_DIR": "/etc/cni/net.d",
           "CNI_AGENT_RUN_DIR": rundir, "CNI_BIN_DIR": bindir, "SECONDARY_BIN_DIR": "",
           "SERVICE_ACCOUNT_DIR": sa, "CHAINED_CNI_PLUGIN": "true",
           "KUBERNETES_SERVICE_HOST": b.double.host, "KUBERNETES_SERVICE_PORT": b.double.port,
           "EXCLUDE_NAMESPACES": "kube-system", "HEALTH_PORT": str(HEALTH_PORT), "MONITORING_PORT": "0",
           "REPAIR_ENABLED": "false", "LOG_LEVEL": "info"}
    logf = os.path.join(b.work, "logs", f"installer-{impl}-{run}.log")
    # The installer listens on 0.0.0.0: run it (and probe it) inside the node namespace.
    setns(node_fd)
    try:
        t0 = time.perf_counter_ns()
        pid = spawn([exe], env, None, os.devnull, logf, exe=exe)
        t_ready = None
        deadline = time.time() + 30
        while time.time() < deadline:
            st, _ = http_get(HEALTH_PORT, "/readyz")
            if st == 200:
                t_ready = time.perf_counter_ns()
                break
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                raise BenchError(f"install-cni ({impl}) exited before ready; see {logf}:\n{tail(logf)}")
            time.sleep(0.0005)
    finally:
        setns(b.nss.host_fd)
    if t_ready is None:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        raise BenchError(f"install-cni ({impl}) not ready within 30 s:\n{tail(logf)}")
    if "istio-cni" not in open(primary).read():
        raise BenchError(f"install-cni ({impl}) reported ready but the primary conflist has no istio-cni entry")
    reinject = []
    for _ in range(5):
        time.sleep(0.05)
        t0r = time.perf_counter_ns()
        atomic_write(primary, primary_text)
        t1 = None
        deadline = time.time() + 10
        while time.time() < deadline:
            try:
                if "istio-cni" in open(primary).read():
                    t1 = time.perf_counter_ns()
                    break
            except OSError:
                pass
            time.sleep(0.0002)
        if t1 is None:
            raise BenchError(f"install-cni ({impl}) did not re-inject within 10 s:\n{tail(logf)}")
        reinject.append(ms(t1 - t0r))
    hwm, rss = status_kb(pid, "VmHWM:"), status_kb(pid, "VmRSS:")
    os.kill(pid, signal.SIGTERM)
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise BenchError(f"install-cni ({impl}) exited {status} on SIGTERM:\n{tail(logf)}")
    if "istio-cni" in open(primary).read():
        raise BenchError(f"install-cni ({impl}) left its entry in the primary conflist after SIGTERM")
    return ms(t_ready - t0), reinject, hwm, rss


def installer(b):
    """`b.a.agent_runs` starts of each of b.ours_impls, taken in turn (ours, before, ours, ...): ours' figures
    at the top level, the other build's under its name with the paired ratios of time to ready."""
    a = b.a
    got = {impl: ([], [], [], []) for impl in b.ours_impls}
    node_fd = os.open(f"/run/netns/{b.node}", os.O_RDONLY)
    log(f"==> installer: {a.agent_runs} starts{' of each build, in turn' if len(got) > 1 else ''}, "
        "5 re-injections each")
    try:
        for run in range(a.agent_runs):
            for impl in b.ours_impls:
                ready, reinject, hwm, rss = start_once(b, impl, run, node_fd)
                g = got[impl]
                g[0].append(ready)
                g[1].extend(reinject)
                g[2].append(hwm)
                g[3].append(rss)
    finally:
        os.close(node_fd)

    def summary(ready, reinject, hwm, rss):
        return {"starts": a.agent_runs, "time_to_ready": stats(ready), "reinjection": stats(reinject),
                "vmhwm_kb_max": max(x for x in hwm if x is not None) if any(hwm) else None,
                "vmrss_kb_median": median([x for x in rss if x is not None])}

    out = summary(*got["ours"])
    for impl in b.ours_impls[1:]:
        out[b.label(impl)] = x = summary(*got[impl])
        x["ready_paired"] = paired(got["ours"][0], got[impl][0])
    return out


def _labels_done(port):
    st, body = http_get(port, "/metrics", timeout=2)
    if st != 200:
        return None
    key = 'istio_cni_repair_pods_repaired_total{result="success",type="label"} '
    for line in body.splitlines():
        if line.startswith(key):
            return int(float(line[len(key):].strip()))
    return 0


def repair(b):
    a = b.a
    n = a.repair_pods
    node = "repair-node"
    broken = [i for i in range(n) if i % 50 == 0]
    log(f"==> repair agent: {n} pods on the node ({len(broken)} broken), {a.agent_runs} broken-pod events")
    b.double.add_pods([repair_pod(i, node, i in broken) for i in range(n)])
    exe = os.path.join(b.bins["ours"], "istio-cni-repair")
    port = free_port()
    logf = os.path.join(b.work, "logs", "repair.log")
    kubeconfig = os.path.join(b.run_dirs["nft"], "istio-cni-kubeconfig")
    argv = [exe, f"--kubeconfig={kubeconfig}", f"--repair-node-name={node}", "--repair-label-pods=true",
            f"--monitoring-port={port}", "--log-level=warn"]
    t0 = time.perf_counter_ns()
    pid = spawn(argv, {"PATH": PATH_ENV}, None, os.devnull, logf, exe=exe)
    try:
        deadline = time.time() + 120
        t_sync = None
        while time.time() < deadline:
            if _labels_done(port) == len(broken):
                t_sync = time.perf_counter_ns()
                break
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                raise BenchError(f"istio-cni-repair exited; see {logf}:\n{tail(logf)}")
            time.sleep(0.002)
        if t_sync is None:
            raise BenchError(f"istio-cni-repair did not label the {len(broken)} broken pods within 120 s:\n"
                             f"{tail(logf)}")
        cpu_start = cpu_s(pid)
        hwm_sync, rss_sync = status_kb(pid, "VmHWM:"), status_kb(pid, "VmRSS:")
        idle_s = 2 if a.agent_runs < 5 else 10
        c0 = cpu_s(pid)
        time.sleep(idle_s)
        idle_cpu = (cpu_s(pid) - c0) / idle_s
        # Broken-pod events: a new broken pod appears; time until the agent's label counter moves.
        lat = []
        done = len(broken)
        conn = http.client.HTTPSConnection(b.double.host, int(b.double.port), context=b.double.ctx, timeout=30)
        for k in range(a.agent_runs):
            body = json.dumps(repair_pod(n + k, node, True))
            t1 = time.perf_counter_ns()
            conn.request("POST", "/_double/pods", body=body, headers={"Content-Type": "application/json"})
            r = conn.getresponse()
            r.read()
            if r.status != 200:
                raise BenchError(f"POST /_double/pods: {r.status}")
            t2 = None
            deadline = time.time() + 30
            while time.time() < deadline:
                if _labels_done(port) == done + 1:
                    t2 = time.perf_counter_ns()
                    break
                time.sleep(0.001)
            if t2 is None:
                raise BenchError(f"istio-cni-repair did not label broken pod app-{n + k} within 30 s:\n"
                                 f"{tail(logf)}")
            done += 1
            lat.append(ms(t2 - t1))
            time.sleep(0.05)
        conn.close()
        out = {"pods": n, "broken": len(broken), "mode": "label",
               "start_to_all_broken_labeled_ms": ms(t_sync - t0), "cpu_s_through_sync": cpu_start,
               "idle_cpu_percent": 100 * idle_cpu, "idle_window_s": idle_s,
               "vmhwm_kb": status_kb(pid, "VmHWM:"), "vmrss_kb": status_kb(pid, "VmRSS:"),
               "vmhwm_kb_at_sync": hwm_sync, "vmrss_kb_at_sync": rss_sync, "cpu_s_total": cpu_s(pid),
               "event_to_repair": stats(lat)}
    finally:
        stop(pid)
    return out


def markdown(section, d):
    f = fmt
    if section == "installer":
        # Ours first, then any other build measured in turn with it (--before), under its name.
        rows = [("", d)] + [(k, v) for k, v in d.items() if isinstance(v, dict) and "time_to_ready" in v]
        out = ["| installer (`install-cni`) | median ms | p99 ms | min ms | max ms | runs |",
               "|---|---:|---:|---:|---:|---:|"]
        for who, x in rows:
            r, j = x["time_to_ready"], x["reinjection"]
            pre = f"{who}: " if who else ""
            out += [f"| {pre}start → `/readyz` 200 (fresh process) | {f(r['median_ms'])} | {f(r['p99_ms'])} | "
                    f"{f(r['min_ms'])} | {f(r['max_ms'])} | {r['n']} |",
                    f"| {pre}primary rewrites its conflist → our entry back | {f(j['median_ms'])} | "
                    f"{f(j['p99_ms'])} | {f(j['min_ms'])} | {f(j['max_ms'])} | {j['n']} |"]
        for who, x in rows[1:]:
            p = x["ready_paired"]
            ci = f" [95 % interval {f(p['ci95'][0])}, {f(p['ci95'][1])}]" if p["ci95"] else ""
            out.append(f"\nStart → `/readyz` 200, ours ÷ {who}, paired start by start: median {f(p['median'])}"
                       f"{ci} over {p['n']} pairs.")
        for who, x in rows:
            name = f"Installer ({who})" if who else "Installer"
            out.append(f"\n{name} memory: VmHWM {x['vmhwm_kb_max']} KiB (max over starts), "
                       f"VmRSS {f(x['vmrss_kb_median'], 0)} KiB (median, after the re-injections).")
        return "\n".join(out)
    e = d["event_to_repair"]
    return "\n".join([
        f"| repair agent (`istio-cni-repair`, {d['mode']} mode), {d['pods']} pods on the node, {d['broken']} broken "
        "| value |", "|---|---:|",
        f"| start → all broken pods labeled | {f(d['start_to_all_broken_labeled_ms'], 1)} ms |",
        f"| CPU through that sync | {f(d['cpu_s_through_sync'] * 1000, 0)} ms |",
        f"| idle CPU afterwards ({d['idle_window_s']} s window) | {f(d['idle_cpu_percent'])} % |",
        f"| VmHWM / VmRSS at the end | {d['vmhwm_kb']} / {d['vmrss_kb']} KiB |",
        f"| broken pod's ADDED event → labeled (median / p99 / min / max of {e['n']}) | {f(e['median_ms'])} / "
        f"{f(e['p99_ms'])} / {f(e['min_ms'])} / {f(e['max_ms'])} ms |"])
