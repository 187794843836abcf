"""scripts/bench.d: the timed loops (stdlib only). Imported by bench.py.

run_cases(b): the plugin cases (cases.plan), interleaved run by run, in chunks whose pods exist only while
  the chunk runs; with a peer, ours goes first in even rounds and the peer in odd ones (round_orders); every
  run a fresh process under the bench-spawn launcher; untimed afterwards, the first and last pod of each
  redirect case checked for our chains.
concurrency(b): bursts of concurrent ADDs (per iptables backend and implementation): all spawned at once, each
  timed by its own launcher.
"""

import gc
import os
import time

import podcache
from cases import add_jobs, plan
from common import BenchError, Sample, log, median, pct, read_result, setns, tail


def settle(b):
    """Lets the kernel finish tearing down deleted namespaces (async work) before timing again."""
    time.sleep(b.a.settle)


def run_job(b, case, job, keep):
    seq = job if isinstance(job, list) else [job]
    total = None
    for argv, env, stdin, netns in seq:
        fd = None
        if netns:
            fd = os.open(f"/run/netns/{netns}", os.O_RDONLY)
            setns(fd)
        try:
            s = b.launcher.timed(argv, env, stdin, b.scratch_out, b.err_log(case))
        finally:
            if fd is not None:
                setns(b.nss.host_fd)
                os.close(fd)
        if s.rc != 0:
            out = open(b.scratch_out).read()[:2000]
            raise BenchError(f"{case['name']} ({case['impl']}): {' '.join(argv)} exited {s.rc}: {out}\n"
                             f"stderr: {tail(b.err_log(case))}")
        total = s if total is None else Sample(total.ns + s.ns, 0, max(total.rss_kb, s.rss_kb),
                                                total.cpu_s + s.cpu_s)
    if keep:
        case["samples"].append(total)


def verify(b, case):
    """Untimed: the first and last pod of a redirect case really got our chains."""
    if not case["check"]:
        return
    backend, names = case["check"]
    if backend == "nftables":
        for nm in (names[0], names[-1]):
            r = b.nss.run_in(nm, ["nft", "list", "table", "inet", "istio-proxy-nat"],
                             capture_output=True, text=True)
            if "chain istio-output" not in r.stdout:
                raise BenchError(f"{case['name']} ({case['impl']}): no istio-output chain in pod netns {nm} "
                                 f"after the run:\n{r.stdout[:1500]}{r.stderr[:500]}")
        return
    for nm in (names[0], names[-1]):
        r = b.nss.run_in(nm, [f"iptables-{backend}-save"], capture_output=True, text=True)
        if "ISTIO_OUTPUT" not in r.stdout:
            raise BenchError(f"{case['name']} ({case['impl']}): no ISTIO_OUTPUT chain in pod netns {nm} "
                             f"after the run:\n{r.stdout[:1500]}")


def round_orders(cases):
    """The order of `cases` in even and in odd rounds. In odd rounds the implementations' groups of one case
    (e.g. ours' ADD, CHECK, DEL, then the peer's) trade places: whichever runs first follows what precedes the
    case (a floor that just programmed another namespace, say) and the other follows it, and over the rounds
    each implementation has each place equally often. An implementation's own group keeps its order."""
    first = {}
    for i, c in enumerate(cases):
        first.setdefault(c["group"], i)
    impls = list(dict.fromkeys(c["impl"] for c in cases if c["impl"] != "floor"))
    swapped = {impl: len(impls) - k for k, impl in enumerate(impls)}
    odd = sorted(range(len(cases)), key=lambda i: (first[cases[i]["group"]], swapped.get(cases[i]["impl"], 0), i))
    return list(range(len(cases))), odd


def run_cases(b):
    """Interleaved rounds, in chunks: each chunk's pods (about 13 per round) exist only while it runs, so
    the node never holds more pod namespaces than a real one (each is a mount under /run/netns, and the
    mount table's size shows in what children of a new mount namespace pay)."""
    total = b.a.runs + b.a.warmup
    log(f"==> timing: {b.a.warmup} warm-up + {b.a.runs} runs per case, interleaved, in chunks of "
        f"{b.a.chunk} rounds (pods created before each chunk, deleted after it)")
    merged, order = {}, []
    done, chunk, setup_s, loop_s, most = 0, 0, 0.0, 0.0, 0
    while done < total:
        k = min(b.a.chunk, total - done)
        first = b.pods.mark()  # a fresh node namespace per chunk
        t = time.time()
        cases = plan(b, k, f"c{chunk}-")
        if b.cache:
            podcache.wait_synced(b)
        setup_s += time.time() - t
        most = max(most, len(b.nss.names))
        settle(b)
        orders = round_orders(cases)
        gc.disable()
        t = time.time()
        for i in range(k):
            for j in orders[(done + i) % 2]:
                c = cases[j]
                run_job(b, c, c["jobs"][i], keep=done + i >= b.a.warmup)
        loop_s += time.time() - t
        gc.enable()
        for c in cases:
            verify(b, c)
            key = (c["name"], c["impl"])
            if key in merged:
                merged[key]["samples"].extend(c["samples"])
            else:
                merged[key] = c
                order.append(key)
            c["jobs"] = None
        b.pods.drop_since(first)
        done += k
        chunk += 1
    log(f"    {len(order)} case columns, {chunk} chunks, at most {most} namespaces at a time; set-up "
        f"{setup_s:.1f} s, timed loops {loop_s:.1f} s")
    b.cases = [merged[k] for k in order]


def burst(b, impl, backend, rep):
    """`b.a.burst` concurrent ADDs with redirect of fresh pods, by `impl` with `backend`: all spawned at once;
    each one's latency from its own launcher; the whole burst's from the first spawn to the last exit."""
    k = b.a.burst
    first = b.pods.mark()
    pp = b.pods.make(k, False)
    names = [f"burst-{impl}-{backend}-{rep}-{i}" for i in range(k)]
    jobs = add_jobs(b, impl, backend, pp, names, "stdin/")
    settle(b)
    logdir = os.path.join(b.work, "logs")
    pids, rcs = {}, {}
    gc.disable()
    t0 = time.perf_counter_ns()
    for idx, (argv, env, conf, _) in enumerate(jobs):
        res = os.path.join(b.work, f"burst-res-{idx}")
        pid = b.launcher.start(res, argv, env, conf, os.path.join(b.work, f"burst-out-{idx}"),
                               os.path.join(logdir, f"burst-{impl}-{backend}.log"))
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
    samples = [read_result(os.path.join(b.work, f"burst-res-{i}"), names[i]) for i in range(k)]
    failed = [i for i in range(k) if rcs[i] != 0 or samples[i].rc != 0]
    if failed:
        idx = failed[0]
        raise BenchError(f"concurrent ADD ({impl}, {backend}): {len(failed)} of {k} failed; "
                         f"pod {names[idx]}: {open(os.path.join(b.work, f'burst-out-{idx}')).read()[:1500]}")
    for nsname, _ in pp:
        r = b.nss.run_in(nsname, [f"iptables-{backend}-save"], capture_output=True, text=True)
        if "ISTIO_OUTPUT" not in r.stdout:
            raise BenchError(f"concurrent ADD ({impl}, {backend}): pod netns {nsname} has no rules")
    b.pods.drop_since(first)
    lat = sorted(x.ns / 1e6 for x in samples)
    fin = sorted((x - t0) / 1e6 for x in done_at.values())
    log(f"    {k} concurrent ADDs ({impl}, {backend}): total {(t1 - t0) / 1e6:.1f} ms, all succeeded")
    return {"impl": impl, "backend": backend, "pods": k, "total_ms": (t1 - t0) / 1e6,
            "spawn_all_ms": (t_spawned - t0) / 1e6,
            "per_pod_amortized_ms": (t1 - t0) / 1e6 / k, "latency_median_ms": median(lat),
            "latency_p99_ms": pct(lat, 99), "latency_max_ms": lat[-1],
            "done_since_burst_median_ms": median(fin), "all_succeeded": True,
            "serial_case": f"add-redirect-{backend}"}


def concurrency(b):
    """Every burst: per iptables backend, per implementation, `b.a.bursts` times."""
    b.burst_results = [burst(b, impl, backend, rep)
                       for backend in b.backends for impl in b.bins for rep in range(b.a.bursts)]
