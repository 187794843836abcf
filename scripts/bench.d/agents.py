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
import shutil
import signal
import socket
import time

HEALTH_PORT = 18321


def _bench():
    """The driver module (bench.py runs as __main__): its helpers and constants."""
    import sys
    return sys.modules["__main__"]


def _ms(ns):
    return ns / 1e6


def _stats(vals):
    m = _bench()
    s = sorted(vals)
    if not s:
        return None
    return {"n": len(s), "median_ms": m.median(s), "p99_ms": m.pct(s, 99), "min_ms": s[0], "max_ms": s[-1]}


def _status_kb(pid, key):
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith(key):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def _cpu_s(pid):
    """utime + stime of a live process, seconds."""
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def _http_get(port, path, timeout=0.5):
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        c.request("GET", path)
        r = c.getresponse()
        body = r.read()
        c.close()
        return r.status, body.decode(errors="replace")
    except (OSError, http.client.HTTPException):
        return None, ""


def _atomic_write(path, text):
    tmp = f"{path}.bench-tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.rename(tmp, path)


PRIMARY = {"cniVersion": "1.0.0", "name": "bench-primary",
           "plugins": [{"type": "ptp", "ipMasq": False,
                        "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.210.0.0/16"}]]}},
                       {"type": "portmap", "capabilities": {"portMappings": True}}]}


def installer(b):
    m = _bench()
    a = b.a
    exe = os.path.join(b.bins["ours"], "install-cni")
    ready, reinject, hwm, rss = [], [], [], []
    node_fd = os.open(f"/run/netns/{b.node}", os.O_RDONLY)
    m.log(f"==> installer: {a.agent_runs} starts, 5 re-injections each")
    try:
        for run in range(a.agent_runs):
            d = os.path.join(b.work, f"installer-{run}")
            conf, bindir, rundir, sa = (os.path.join(d, x) for x in ("conf", "bin", "run", "sa"))
            for x in (conf, bindir, rundir, sa):
                os.makedirs(x)
            shutil.copy(b.double.ca, os.path.join(sa, "ca.crt"))
            with open(os.path.join(sa, "token"), "w") as f:
                f.write(b.double.token)
            with open(os.path.join(sa, "namespace"), "w") as f:
                f.write("istio-system")
            primary = os.path.join(conf, "10-bench.conflist")
            primary_text = json.dumps(PRIMARY, indent=2)
            _atomic_write(primary, primary_text)
            env = {"PATH": m.PATH_ENV, "MOUNTED_CNI_NET_DIR": conf, "CNI_NET_DIR": "/etc/cni/net.d",
                   "CNI_AGENT_RUN_DIR": rundir, "CNI_BIN_DIR": bindir, "SECONDARY_BIN_DIR": "",
                   "SERVICE_ACCOUNT_DIR": sa, "CHAINED_CNI_PLUGIN": "true",
                   "KUBERNETES_SERVICE_HOST": b.double.host, "KUBERNETES_SERVICE_PORT": b.double.port,
                   "EXCLUDE_NAMESPACES": "kube-system", "HEALTH_PORT": str(HEALTH_PORT), "MONITORING_PORT": "0",
                   "REPAIR_ENABLED": "false", "LOG_LEVEL": "info"}
            logf = os.path.join(b.work, "logs", f"installer-{run}.log")
            # The installer listens on 0.0.0.0: run it (and probe it) inside the node namespace.
            m.setns(node_fd)
            try:
                t0 = time.perf_counter_ns()
                pid = m.spawn([exe], env, None, os.devnull, logf, exe=exe)
                t_ready = None
                deadline = time.time() + 30
                while time.time() < deadline:
                    st, _ = _http_get(HEALTH_PORT, "/readyz")
                    if st == 200:
                        t_ready = time.perf_counter_ns()
                        break
                    if os.waitpid(pid, os.WNOHANG)[0] == pid:
                        raise m.BenchError(f"install-cni exited before ready; see {logf}:\n{m.Bench.tail(logf)}")
                    time.sleep(0.0005)
            finally:
                m.setns(b.nss.host_fd)
            if t_ready is None:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                raise m.BenchError(f"install-cni not ready within 30 s:\n{m.Bench.tail(logf)}")
            ready.append(_ms(t_ready - t0))
            if "istio-cni" not in open(primary).read():
                raise m.BenchError("install-cni reported ready but the primary conflist has no istio-cni entry")
            for _ in range(5):
                time.sleep(0.05)
                t0 = time.perf_counter_ns()
                _atomic_write(primary, primary_text)
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
                    raise m.BenchError(f"install-cni did not re-inject within 10 s:\n{m.Bench.tail(logf)}")
                reinject.append(_ms(t1 - t0))
            hwm.append(_status_kb(pid, "VmHWM:"))
            rss.append(_status_kb(pid, "VmRSS:"))
            os.kill(pid, signal.SIGTERM)
            _, status = os.waitpid(pid, 0)
            if os.waitstatus_to_exitcode(status) != 0:
                raise m.BenchError(f"install-cni exited {status} on SIGTERM:\n{m.Bench.tail(logf)}")
            if "istio-cni" in open(primary).read():
                raise m.BenchError("install-cni left its entry in the primary conflist after SIGTERM")
    finally:
        os.close(node_fd)
    return {"starts": a.agent_runs, "time_to_ready": _stats(ready), "reinjection": _stats(reinject),
            "vmhwm_kb_max": max(x for x in hwm if x is not None) if any(hwm) else None,
            "vmrss_kb_median": m.median([x for x in rss if x is not None])}


def _repair_pod(i, node, broken):
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


def _labels_done(port):
    st, body = _http_get(port, "/metrics", timeout=2)
    if st != 200:
        return None
    key = 'istio_cni_repair_pods_repaired_total{result="success",type="label"} '
    for line in body.splitlines():
        if line.startswith(key):
            return int(float(line[len(key):].strip()))
    return 0


def _free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def repair(b):
    m = _bench()
    a = b.a
    n = a.repair_pods
    node = "repair-node"
    broken = [i for i in range(n) if i % 50 == 0]
    m.log(f"==> repair agent: {n} pods on the node ({len(broken)} broken), {a.agent_runs} broken-pod events")
    b.double.add_pods([_repair_pod(i, node, i in broken) for i in range(n)])
    exe = os.path.join(b.bins["ours"], "istio-cni-repair")
    port = _free_port()
    logf = os.path.join(b.work, "logs", "repair.log")
    kubeconfig = os.path.join(b.run_dirs["nft"], "istio-cni-kubeconfig")
    argv = [exe, f"--kubeconfig={kubeconfig}", f"--repair-node-name={node}", "--repair-label-pods=true",
            f"--monitoring-port={port}", "--log-level=warn"]
    t0 = time.perf_counter_ns()
    pid = m.spawn(argv, {"PATH": m.PATH_ENV}, None, os.devnull, logf, exe=exe)
    try:
        deadline = time.time() + 120
        t_sync = None
        while time.time() < deadline:
            if _labels_done(port) == len(broken):
                t_sync = time.perf_counter_ns()
                break
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                raise m.BenchError(f"istio-cni-repair exited; see {logf}:\n{m.Bench.tail(logf)}")
            time.sleep(0.002)
        if t_sync is None:
            raise m.BenchError(f"istio-cni-repair did not label the {len(broken)} broken pods within 120 s:\n"
                               f"{m.Bench.tail(logf)}")
        cpu_start = _cpu_s(pid)
        hwm_sync, rss_sync = _status_kb(pid, "VmHWM:"), _status_kb(pid, "VmRSS:")
        idle_s = 2 if a.agent_runs < 5 else 10
        c0 = _cpu_s(pid)
        time.sleep(idle_s)
        idle_cpu = (_cpu_s(pid) - c0) / idle_s
        # Broken-pod events: a new broken pod appears; time until the agent's label counter moves.
        lat = []
        done = len(broken)
        conn = http.client.HTTPSConnection(b.double.host, int(b.double.port), context=b.double.ctx, timeout=30)
        for k in range(a.agent_runs):
            body = json.dumps(_repair_pod(n + k, node, True))
            t1 = time.perf_counter_ns()
            conn.request("POST", "/_double/pods", body=body, headers={"Content-Type": "application/json"})
            r = conn.getresponse()
            r.read()
            if r.status != 200:
                raise m.BenchError(f"POST /_double/pods: {r.status}")
            t2 = None
            deadline = time.time() + 30
            while time.time() < deadline:
                if _labels_done(port) == done + 1:
                    t2 = time.perf_counter_ns()
                    break
                time.sleep(0.001)
            if t2 is None:
                raise m.BenchError(f"istio-cni-repair did not label broken pod app-{n + k} within 30 s:\n"
                                   f"{m.Bench.tail(logf)}")
            done += 1
            lat.append(_ms(t2 - t1))
            time.sleep(0.05)
        conn.close()
        out = {"pods": n, "broken": len(broken), "mode": "label",
               "start_to_all_broken_labeled_ms": _ms(t_sync - t0), "cpu_s_through_sync": cpu_start,
               "idle_cpu_percent": 100 * idle_cpu, "idle_window_s": idle_s,
               "vmhwm_kb": _status_kb(pid, "VmHWM:"), "vmrss_kb": _status_kb(pid, "VmRSS:"),
               "vmhwm_kb_at_sync": hwm_sync, "vmrss_kb_at_sync": rss_sync, "cpu_s_total": _cpu_s(pid),
               "event_to_repair": _stats(lat)}
    finally:
        try:
            os.kill(pid, signal.SIGTERM)
            for _ in range(100):
                if os.waitpid(pid, os.WNOHANG)[0] == pid:
                    break
                time.sleep(0.05)
            else:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
        except ChildProcessError:
            pass
    return out


def markdown(section, d):
    f = _bench().fmt
    if section == "installer":
        r, j = d["time_to_ready"], d["reinjection"]
        return "\n".join([
            "| installer (`install-cni`) | median ms | p99 ms | min ms | max ms | runs |",
            "|---|---:|---:|---:|---:|---:|",
            f"| start → `/readyz` 200 (fresh process) | {f(r['median_ms'])} | {f(r['p99_ms'])} | {f(r['min_ms'])} | "
            f"{f(r['max_ms'])} | {r['n']} |",
            f"| primary rewrites its conflist → our entry back | {f(j['median_ms'])} | {f(j['p99_ms'])} | "
            f"{f(j['min_ms'])} | {f(j['max_ms'])} | {j['n']} |",
            f"\nInstaller memory: VmHWM {d['vmhwm_kb_max']} KiB (max over starts), VmRSS {f(d['vmrss_kb_median'], 0)} KiB "
            "(median, after the re-injections)."])
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
