"""scripts/bench.d: the plugin cases of one chunk (stdlib only). Imported by timing.py.

plan(b, n, tag): every case for `n` interleaved rounds, each with its jobs (one per run: argv, environment,
stdin file, the namespace the driver enters for it) and its floor: VERSION, the ADDs that need no pod or no API
call, ADD of a pod without sidecar, ADD with redirect per iptables backend (TPROXY, dual-stack; CHECK and DEL
of the same pods), nftables mode, and the ADDs served by the node's pod cache. The floors' documents come from
our own binary (`istio-cni explain`). A peer runs every case but nftables mode and the cache's; a --before peer
(a build of ours) runs those too, its cached ADDs served by its own install-cni.
"""

import json
import os
import re
import shutil
import subprocess

import podcache
from common import PATH_ENV, BenchError
from double import pod_object


def note_once(b, note):
    if note not in b.notes:
        b.notes.append(note)


def add_jobs(b, impl, backend, pods, names, stdin, run_dir=None, **pod):
    """The pods `pods` (from b.pods.make) as pod objects named `names` in the double (`pod`: pod_object's
    annotations and env), and `impl`'s ADD of each with `backend`'s configuration (and `run_dir`'s, when
    given), its stdin in the file `stdin` + name + ".json": one job per pod."""
    objs, jobs = [], []
    for (nsname, prev), nm in zip(pods, names):
        ips = [ip["address"].split("/")[0] for ip in prev["ips"]]
        objs.append(pod_object(nm, ips=ips, **pod))
        conf = b.write(f"{stdin}{nm}.json", json.dumps(b.conf(backend, prev, run_dir=run_dir)))
        env = b.cni_env(impl, "ADD", f"/run/netns/{nsname}",
                        f"IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME={nm}")
        jobs.append((b.argv(impl), env, conf, None))
    b.double.add_pods(objs)
    return jobs


def explain(b, pod):
    p = b.write(f"explain/{pod['metadata']['name']}.json", json.dumps(pod))
    r = subprocess.run([os.path.join(b.bins["ours"], "istio-cni"), "explain", "--pod", p],
                       capture_output=True, text=True, env={"PATH": PATH_ENV})
    if r.returncode != 0:
        raise BenchError(f"istio-cni explain failed: {r.stderr.strip()}")
    text = "\n".join(l for l in r.stdout.splitlines() if not l.startswith("#")) + "\n"
    blocks = re.split(r"(?m)^(?=\*)", text)
    blocks = [x for x in blocks if x.strip()]
    if "then the IPv6 document" in r.stdout:
        half = len(blocks) // 2
        v4, v6 = "".join(blocks[:half]), "".join(blocks[half:])
        heads = lambda bs: [x.splitlines()[0] for x in bs]  # noqa: E731
        if heads(blocks[:half]) != heads(blocks[half:]):
            raise BenchError("cannot split explain output into IPv4 and IPv6 documents")
        return v4, v6
    return "".join(blocks), None


def explain_nft(b, pod):
    """The nftables script a pod gets in native_nftables mode (comment lines dropped)."""
    p = b.write(f"explain/{pod['metadata']['name']}-nft.json", json.dumps(pod))
    r = subprocess.run([os.path.join(b.bins["ours"], "istio-cni"), "explain", "--nft", "--pod", p],
                       capture_output=True, text=True, env={"PATH": PATH_ENV})
    if r.returncode != 0:
        raise BenchError(f"istio-cni explain --nft failed: {r.stderr.strip()}")
    return "".join(l + "\n" for l in r.stdout.splitlines() if not l.startswith("#"))


def our_add_jobs(b, impl, n, tag, case, backend, run_dir=None):
    """`n` fresh pods (IPv4, a sidecar, served by the double as `<impl>-<case>-<tag><i>`) and `impl`'s (one of
    b.ours_impls) ADD of each with `backend`'s configuration (and `run_dir`'s, when given): (pods, jobs)."""
    pp = b.pods.make(n, False)
    names = [f"{impl}-{case}-{tag}{i}" for i in range(n)]
    return pp, add_jobs(b, impl, backend, pp, names, f"stdin/{impl}-", run_dir=run_dir)


def nftables_cases(b, n, tag, add_case):
    """ADD in nftables mode (one netlink batch, no exec) against upstream's way as the floor: `nft -f` of
    the same script, exec'd per pod inside its namespace."""
    nft = shutil.which("nft", path=PATH_ENV)
    if not nft:
        note_once(b, "add-redirect-nftables: skipped, no nft binary for the floor (apt install nftables)")
        return
    case = "add-redirect-nftables"
    script = b.write(f"docs/{case}.nft", explain_nft(b, pod_object("rep")))
    fr = b.pods.make(n, False)
    jobs = [[([nft, "-f", script], b.base_env, None, nsname)] for nsname, _ in fr]
    add_case("floor-nft-f", "nft -f of the same script alone (upstream's way)", "floor", jobs,
             kind="floor", check=("nftables", [x[0] for x in fr]))
    for impl in b.ours_impls:
        pp, jobs = our_add_jobs(b, impl, n, tag, case, "nftables")
        add_case(case, "ADD with redirect, IPv4 REDIRECT, nftables over netlink", impl, jobs,
                 floor="floor-nft-f", check=("nftables", [x[0] for x in pp]))
        add_case("check-nftables", "CHECK (nftables, redirected pod)", impl,
                 [(j[0], dict(j[1], CNI_COMMAND="CHECK"), j[2], None) for j in jobs], floor="floor-noop",
                 group=case)


def plan(b, n, tag):
    """Builds the case list for `n` rounds: each case has jobs (one per run) and a floor. `tag` keeps pod
    names unique across chunks."""
    a = b.a
    cases = []
    impls = list(b.bins)
    double = b.double
    api = double.url
    floor_exe = a.floor
    idle_ns = f"/run/netns/{b.idle[0]}"
    idle_prev = b.idle[1]

    # group: an implementation's cases that run back to back on the same pods (ADD, then its CHECK and DEL);
    # the timed loop swaps the implementations' groups every other round (timing.round_orders).
    def add_case(name, label, impl, jobs, floor=None, group=None, kind="plugin", check=None):
        cases.append({"name": name, "label": label, "impl": impl, "jobs": jobs, "floor": floor,
                      "group": group or name, "kind": kind, "samples": [], "check": check})

    # Floors with no pods.
    noop = [([a.noop], b.base_env, None, None)] * n
    add_case("floor-noop", "exec of a static no-op", "floor", noop, kind="floor")

    # VERSION
    vin = b.write("stdin/version.json", json.dumps({"cniVersion": "1.0.0"}))
    for impl in impls:
        env = {"PATH": PATH_ENV, "CNI_COMMAND": "VERSION", "CNI_NETNS": "dummy", "CNI_IFNAME": "dummy",
               "CNI_PATH": "dummy"}
        add_case("version", "VERSION", impl, [(b.argv(impl), env, vin, None)] * n, floor="floor-noop")

    # ADD, not a Kubernetes pod / excluded namespace: no API call.
    cin = b.write("stdin/add-nft-idle.json", json.dumps(b.conf("nft", idle_prev)))
    for impl in impls:
        add_case("add-nonk8s", "ADD, not a Kubernetes pod", impl,
                 [(b.argv(impl), b.cni_env(impl, "ADD", idle_ns, "IgnoreUnknown=1"), cin, None)] * n,
                 floor="floor-noop")
        add_case("add-excluded", "ADD, excluded namespace (no API call)", impl,
                 [(b.argv(impl), b.cni_env(impl, "ADD", idle_ns,
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
                  b.base_env, None, None) for nm in names]
    add_case("floor-get", "one TLS GET of the pod (minimal static client)", "floor", get_floor, kind="floor")
    for impl in impls:
        add_case("add-nosidecar", "ADD, pod without sidecar (one API GET)", impl,
                 [(b.argv(impl), b.cni_env(impl, "ADD", idle_ns,
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
        if backend not in b.backends:
            note_once(b, f"{case}: skipped, iptables backend {backend} not available")
            continue
        # Documents for the floors, from a representative pod.
        rep = pod_object("rep", annotations=ann, env=penv,
                         ips=("10.200.0.2", "fd00:200::2") if dual else ("10.200.0.2",))
        v4, v6 = explain(b, rep)
        d4 = b.write(f"docs/{case}.v4", v4)
        d6 = b.write(f"docs/{case}.v6", v6) if v6 else None
        restore_step = "restore-lock" if backend == "legacy" else "restore"
        prog4 = f"iptables-{backend}-restore"
        prog6 = f"ip6tables-{backend}-restore"
        lock_env = dict(b.base_env)
        if backend == "legacy":
            lock_env["XTABLES_LOCKFILE"] = "/proc/self/ns/net"
        rargs = ["--noflush"] + (["--wait=30"] if backend == "legacy" else [])
        # Floor: restore alone (exec'd by the driver from inside the fresh pod namespace).
        fr = b.pods.make(n, dual)
        jobs = []
        for nsname, _ in fr:
            seq = [([shutil.which(prog4, path=PATH_ENV)] + rargs, lock_env, d4, nsname)]
            if d6:
                seq.append(([shutil.which(prog6, path=PATH_ENV)] + rargs, lock_env, d6, nsname))
            jobs.append(seq)
        add_case(f"floor-restore-{case}", f"{prog4}{' + ' + prog6 if d6 else ''} alone", "floor", jobs,
                 kind="floor", check=(backend, [x[0] for x in fr]))
        # Floor: GET + restore in one minimal process.
        fc = b.pods.make(n, dual)
        names = [f"fl-{case}-{tag}{i}" for i in range(n)]
        double.add_pods([pod_object(nm, annotations=ann, env=penv) for nm in names])
        jobs = []
        for (nsname, _), nm in zip(fc, names):
            argv = [floor_exe, "get", double.ca, double.token, f"{api}/api/v1/namespaces/default/pods/{nm}",
                    "netns", f"/run/netns/{nsname}", restore_step, prog4, d4]
            if d6:
                argv += [restore_step, prog6, d6]
            jobs.append((argv, b.base_env, None, None))
        add_case(f"floor-getrestore-{case}", "TLS GET + restore (minimal static client)", "floor", jobs,
                 kind="floor", check=(backend, [x[0] for x in fc]))
        for impl in impls:
            pp = b.pods.make(n, dual)
            names = [f"{impl}-{case}-{tag}{i}" for i in range(n)]
            jobs = add_jobs(b, impl, backend, pp, names, f"stdin/{impl}-", annotations=ann, env=penv)
            add_case(case, label, impl, jobs, floor=f"floor-getrestore-{case}",
                     check=(backend, [x[0] for x in pp]))
            if case == "add-redirect-nft":
                # CHECK and DEL of the same pods, run right after their ADD in the same round.
                add_case("check", "CHECK (nft, redirected pod)", impl,
                         [(j[0], dict(j[1], CNI_COMMAND="CHECK"), j[2], None) for j in jobs],
                         floor="floor-getsave", group=case)
                add_case("del", "DEL", impl, [(j[0], dict(j[1], CNI_COMMAND="DEL"), j[2], None) for j in jobs],
                         floor="floor-noop", group=case)
        if case == "add-redirect-nft":
            fs = b.pods.make(n, False)
            names = [f"fs-{tag}{i}" for i in range(n)]
            double.add_pods([pod_object(nm) for nm in names])
            jobs = [([floor_exe, "get", double.ca, double.token, f"{api}/api/v1/namespaces/default/pods/{nm}",
                      "netns", f"/run/netns/{nsname}", "save", "iptables-nft-save"], b.base_env, None, None)
                    for (nsname, _), nm in zip(fs, names)]
            add_case("floor-getsave", "TLS GET + iptables-nft-save (minimal static client)", "floor", jobs,
                     kind="floor")
    nftables_cases(b, n, tag, add_case)
    if b.cache:
        cache_cases(b, n, tag, add_case)
    return cases


def cache_cases(b, n, tag, add_case):
    """ADD with the pod from the node's cache (install-cni running, its socket in the run dir), per backend,
    and ADD in nftables mode against a socket nobody listens on (a SIGKILLed agent): the API fallback. Each of
    b.ours_impls is served by its own install-cni."""
    have_nft = shutil.which("nft", path=PATH_ENV) is not None
    variants = [("add-redirect-nft-cache", "ADD with redirect, IPv4 REDIRECT, nft, pod from the node's cache",
                 "nft", "cache", "floor-restore-add-redirect-nft", "nft" in b.backends),
                ("add-redirect-legacy-cache", "ADD with redirect, IPv4 REDIRECT, legacy, pod from the node's cache",
                 "legacy", "cache-legacy", "floor-restore-add-redirect-legacy", "legacy" in b.backends)]
    variants += [("add-redirect-nftables-cache", "ADD with redirect, IPv4 REDIRECT, nftables, pod from the node's cache",
                  "nftables", "cache", "floor-nft-f", have_nft),
                 ("add-redirect-nftables-stale", "ADD, nftables, agent killed (its socket left): API fallback",
                  "nftables", "stale", "floor-nft-f", have_nft)]
    for case, label, backend, run_dir, floor, ok in variants:
        if not ok:
            continue
        for impl in b.ours_impls:
            rd = {"cache": podcache.cache_run(impl), "cache-legacy": podcache.cache_run(impl, "legacy")}.get(
                run_dir, run_dir)
            pp, jobs = our_add_jobs(b, impl, n, tag, case, backend, rd)
            add_case(case, label, impl, jobs, floor=floor, check=(backend, [x[0] for x in pp]))
