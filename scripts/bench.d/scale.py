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
import json
import os
import resource
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import log, machine, run, sigterm_interrupts  # noqa: E402
from scale_nodes import (Double, Namespaces, idle_and_rss, scrape_agents, start_agents,  # noqa: E402
                         stats_delta, stop_agents)
from scale_report import check, commit_of, markdown, picture, stats_ms  # noqa: E402
from scale_storm import Storm, calibrate_creates  # noqa: E402


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
    sigterm_interrupts()
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
    run(main)
