#!/usr/bin/env python3
"""How long the container runtime's file (the first candidate by name; every file here is valid) lacks our
entry after another writer acts (issue 32), for the README's "CNI configuration layouts": a new higher-priority
file appearing, it vanishing again, the runtime's file rewritten without our entry. Busy-polls the conf dir
(one look is a listing and a read, well under a millisecond); 0 means our entry was there at the first look.
File level only: the runtime's own reload adds its delay on top for both. Not a test (timings are never
asserted); run it on a quiet machine for numbers.

Usage: scripts/bench.d/windows.py BINARY [N=40] [owned]   (CONFORMANCE_DIR for a CA, as the tests)"""
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

binary = sys.argv[1]
n = int(sys.argv[2]) if len(sys.argv) > 2 else 40
repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ca = os.path.join(os.environ.get("CONFORMANCE_DIR", os.path.join(repo, "../shared/conformance")),
                  "kubeconfig/master-tls-verify/ca.crt")
owned = len(sys.argv) > 3 and sys.argv[3] == "owned"
root = tempfile.mkdtemp(prefix="zw-measure-")
for d in ["conf", "bin", "run", "sa"]:
    os.makedirs(f"{root}/{d}")
open(f"{root}/sa/token", "w").write("token")
shutil.copy(ca, f"{root}/sa/ca.crt")
conf = f"{root}/conf"


def port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p


def lst(name, plugin):
    return json.dumps({"name": name, "cniVersion": "1.0.0", "plugins": [{"type": plugin}]})


def write(name, text):
    tmp = f"{conf}/.{name}.tmp"
    open(tmp, "w").write(text)
    os.rename(tmp, f"{conf}/{name}")


def has(name):
    try:
        return "istio-cni" in open(f"{conf}/{name}").read()
    except FileNotFoundError:
        return False


def runtime_file():
    names = sorted(f for f in os.listdir(conf) if f.endswith((".conf", ".conflist", ".json")))
    return names[0] if names else None


def until(pred, limit=5.0):
    t0 = time.perf_counter()
    if pred():
        return 0.0
    while not pred():
        if time.perf_counter() - t0 > limit:
            return None
    return (time.perf_counter() - t0) * 1000


write("10-ptp.conflist", lst("ptp", "ptp"))
env = dict(os.environ, MOUNTED_CNI_NET_DIR=conf, CNI_AGENT_RUN_DIR=f"{root}/run", CNI_BIN_DIR=f"{root}/bin",
           SECONDARY_BIN_DIR="", SERVICE_ACCOUNT_DIR=f"{root}/sa", KUBERNETES_SERVICE_HOST="10.96.0.1",
           KUBERNETES_SERVICE_PORT="443", HEALTH_PORT=str(port()), MONITORING_PORT=str(port()),
           REPAIR_ENABLED="false", ISTIO_OWNED_CNI_CONFIG="true" if owned else "false")
p = subprocess.Popen(["install-cni"], executable=binary, env=env, stderr=open(f"{root}/stderr", "w"))
first = "02-istio-cni.conflist" if owned else "10-ptp.conflist"
assert until(lambda: has(first), 10) is not None, open(f"{root}/stderr").read()
time.sleep(0.3)
appear, vanish, rewrite = [], [], []
for i in range(n):
    # A new higher-priority file: how long is the runtime's file without our entry?
    write("05-new.conflist", lst("new", "bridge"))
    appear.append(until(lambda: has(runtime_file())))
    time.sleep(0.15)
    # It vanishes: the runtime falls back.
    os.remove(f"{conf}/05-new.conflist")
    vanish.append(until(lambda: has(runtime_file())))
    time.sleep(0.15)
    # The primary rewritten without our entry.
    write("10-ptp.conflist", lst("ptp", "ptp"))
    rewrite.append(until(lambda: has(runtime_file())))
    time.sleep(0.15)
p.send_signal(signal.SIGTERM)
p.wait(10)


def show(label, v):
    miss = sum(1 for x in v if x is None)
    v = sorted(x for x in v if x is not None)
    zero = sum(1 for x in v if x == 0.0)
    print(f"{label}: n={len(v)} never={miss} at-first-look={zero} min={v[0]:.2f} median={statistics.median(v):.2f} "
          f"p90={v[int(len(v)*0.9)-1]:.2f} max={v[-1]:.2f} ms")


show("new higher-priority file", appear)
show("higher-priority file vanishes", vanish)
show("runtime's file rewritten", rewrite)
shutil.rmtree(root)
