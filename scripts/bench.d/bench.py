#!/usr/bin/env python3
"""scripts/bench driver (stdlib only; run by scripts/bench as root, not by hand).

Every figure is a fresh process per run, timed from posix_spawn to wait4 with perf_counter_ns; peak RSS and
CPU come from wait4's rusage (the process and the children it waited for, like /usr/bin/time). Cases are
interleaved run by run (ours, peer, floors) so machine noise hits all columns alike. Pod network namespaces
are created (and wired by Debian's ptp + host-local inside a "node" namespace) before the timed loop; only the
plugin exec is timed. The API is the HTTPS kube-double on 127.0.0.1.

--peer BIN runs the plugin cases against another istio-cni too (its columns, its ratios). --before BIN is such
a peer that is a build of this project (labelled "before"): its own install-cni also serves a pod cache of its
own for its cached ADD cases, runs the nftables cases, and is started in turn with ours in the installer
section; every comparison is paired run by run.

The modules beside it: common (paths, errors, process and timing helpers, statistics and formatting), double
(the API double and the pods it serves), netns (namespaces and pod wiring), cases (the plugin cases), timing
(the timed loops), podcache, agents and cgprofile (the node's pod cache; the installer and the repair agent;
--profile), faults (a misbehaving API server: the plugin's lookup deadline, the repair agent's watch loop), report
(the document). scale.py (--scale) has scale_nodes, scale_storm and scale_report.
"""

import argparse
import json
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import agents  # noqa: E402  (installer and repair agent measurements)
import audit  # noqa: E402  (the audit's cost per round and per pod)
import cgprofile as cg_profile  # noqa: E402  (--profile: callgrind of one invocation per kind)
import faults  # noqa: E402  (a misbehaving API server: ADD against the lookup deadline, the watch loop's pace)
import podcache  # noqa: E402  (the node's pod cache: its agent, cases, memory, hostile clients)
import timing  # noqa: E402  (the timed loops: the plugin cases, the concurrent ADDs)
from common import CNI_DIR, PATH_ENV, Launcher, log, run, sigterm_interrupts  # noqa: E402
from double import Double  # noqa: E402
from netns import Namespaces, PodNets  # noqa: E402
from report import markdown, report  # noqa: E402


class Bench:
    """One run's state: the work dir (logs, stdin files, documents), the network namespaces and pods, the API
    double, our plugin's (and the peer's) bin dirs, the plugin run dirs (one per iptables backend, nftables
    mode, the pod cache's) and the node's pod cache; what a runtime hands the plugin (configuration,
    environment). The cases, the timed loops and the report are in their own modules and take it as `b`."""

    def __init__(self, a):
        self.a = a
        self.work = tempfile.mkdtemp(prefix="istio-cni-bench-")
        os.chmod(self.work, 0o700)
        self.launcher = Launcher(a.spawn, os.path.join(self.work, "spawn.result"))
        self.backends = [x for x in ("nft", "legacy") if shutil.which(f"iptables-{x}-restore", path=PATH_ENV)]
        self.nss = Namespaces(f"ib{os.getpid() % 100000}-")
        self.double = None
        self.cache = None  # ours, in self.caches too
        self.caches = {}  # per implementation in ours_impls: its install-cni serving the node's pod cache
        self.with_cache = True
        self.node = None
        self.notes = []
        # The implementations that are builds of this project (their install-cni, nftables mode, pod cache).
        self.ours_impls = ["ours", "peer"] if a.before else ["ours"]
        self.peer_label = "before" if a.before else "peer"

    def setup(self):
        a = self.a
        os.makedirs(os.path.join(self.work, "logs"), exist_ok=True)
        self.double = Double(a.double, self.work)
        self.node = self.nss.new_names(1)[0]
        self.nss.create([self.node])
        self.nss.run_in(self.node, ["ip", "addr", "add", "10.199.0.1/32", "dev", "lo"], check=True)
        self.bins = {"ours": self.plugin_dir("ours", a.bin)}
        if a.peer:
            self.bins["peer"] = self.plugin_dir("peer", a.peer)
        self.run_dirs = {}
        for backend in ("nft", "legacy"):
            d = self.double.run_dir(os.path.join(self.work, f"run-{backend}"))
            with open(os.path.join(d, "iptables-backend"), "w") as f:
                f.write(backend + "\n")
            self.run_dirs[backend] = d
        # nftables mode: the kubeconfig only (no iptables backend record in this mode).
        self.run_dirs["nftables"] = self.double.run_dir(os.path.join(self.work, "run-nftables"))
        self.pods = PodNets(self.nss, a.wiring, os.path.join(self.work, "ipam"), self.node)
        self.scratch_out = os.path.join(self.work, "stdout")
        self.base_env = {"PATH": PATH_ENV}
        # A pod namespace for the cases that never enter one (shortcut and no-sidecar paths).
        self.idle = self.pods.make(1, dual=False)[0]
        self.cache = None
        if self.with_cache:
            podcache.start(self)

    def label(self, impl):
        """What the report calls `impl`: "ours", or the peer's label ("peer", or "before" for --before)."""
        return self.peer_label if impl == "peer" else impl

    def plugin_dir(self, label, exe):
        """A bin dir with a copy of `exe` under each applet name (hard links of one copy). A copy, as install-cni
        puts the plugin into the node's CNI bin dir, not a link to the build's file: the same bytes exec'd
        from the linker's output measured 0.1 ms slower per process than from a copy here (the page cache
        keeps a file as it was written), which made two builds differ by how their files were made."""
        d = os.path.join(self.work, f"bin-{label}")
        os.makedirs(d)
        first = os.path.join(d, "istio-cni")
        shutil.copyfile(exe, first)
        os.chmod(first, 0o755)
        for n in ("install-cni", "istio-cni-repair"):
            os.link(first, os.path.join(d, n))
        return d

    def conf(self, backend, prev, cni_version="1.0.0", run_dir=None):
        rundir = self.run_dirs[run_dir or backend]
        c = {"cniVersion": cni_version, "name": "bench", "type": "istio-cni", "cni_agent_run_dir": rundir,
             "exclude_namespaces": ["kube-system"], "plugin_log_level": "info", "pod_lookup_timeout_seconds": 5,
             "kubernetes": {"kubeconfig": os.path.join(rundir, "istio-cni-kubeconfig"),
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

    def argv(self, impl):
        return [os.path.join(self.bins[impl], "istio-cni")]

    def err_log(self, case):
        return os.path.join(self.work, "logs", f"{case['name']}-{case['impl']}.log")

    def cleanup(self):
        for agent in self.caches.values():
            agent.stop()
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
    ap.add_argument("--peer", help="another istio-cni plugin: the plugin cases against it too")
    ap.add_argument("--before", help="an earlier build of ours: a peer whose install-cni is measured too")
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
    ap.add_argument("--audit-pods", type=int, default=110, help="pods the audit section verifies")
    ap.add_argument("--lookup-deadlines", default="2,30",
                    help="comma list of pod_lookup_timeout_seconds values for the faults section")
    ap.add_argument("--pace-window", type=float, default=30.0, help="seconds the watch loop is watched per fault")
    ap.add_argument("--skip", default="",
                    help="comma list of sections to skip: plugin,burst,installer,repair,audit,cache,faults")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    ap.add_argument("--profile-bin", help="a symbolized build: run one invocation per kind under callgrind")
    ap.add_argument("--podstart", help="the kubelet section's results (podstart.py's podstart.json): in the report")
    a = ap.parse_args()
    if a.peer and a.before:
        ap.error("--peer and --before are one peer each: give one")
    a.peer = a.peer or a.before
    skip = set(filter(None, a.skip.split(",")))
    if os.geteuid() != 0:
        raise SystemExit("scripts/bench must run as root (it creates network namespaces)")
    b = Bench(a)
    b.with_cache = "cache" not in skip
    sigterm_interrupts()
    extra = {}
    try:
        b.setup()
        b.cases, b.burst_results = [], []
        if "plugin" not in skip:
            timing.run_cases(b)
        if "burst" not in skip:
            log(f"==> {a.burst} concurrent ADDs × {a.bursts}")
            timing.concurrency(b)
        if b.cache:
            log("==> pod cache: API requests, memory with 1,000 pods, /readyz under hostile clients")
            extra["cache"] = {"requests": podcache.api_requests(b, [
                "add-redirect-nft", "add-redirect-nft-cache", "add-redirect-legacy-cache", "add-redirect-nftables",
                "add-redirect-nftables-cache", "add-redirect-nftables-stale"]), "memory": podcache.memory(b, 200 if a.runs < 20 else 1000),
                "hostile": podcache.hostile(b, secs=2.0 if a.runs < 20 else 5.0)}
        if "installer" not in skip:
            extra["installer"] = agents.installer(b)
        if "repair" not in skip:
            extra["repair"] = agents.repair(b)
        if "audit" not in skip:
            extra["audit"] = audit.run(b, a.audit_pods, 11.0 if a.audit_pods >= 100 else 2.0)
        if "faults" not in skip:
            extra["faults"] = {"lookup": faults.lookup(b, [int(x) for x in a.lookup_deadlines.split(",")]),
                               "pace": faults.pace(b, a.pace_window)}
        if a.profile_bin:
            log("==> profile (callgrind)")
            os.makedirs(a.out, exist_ok=True)
            extra["profile"] = cg_profile.profile(b, a.profile_bin)
        if a.podstart:
            with open(a.podstart) as f:
                extra["podstart"] = json.load(f)
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
    run(main)
