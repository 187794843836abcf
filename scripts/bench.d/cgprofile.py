"""scripts/bench --profile: where the plugin's own instructions go, for one invocation of each kind.

Runs a symbolized build of the same release profile (strip off, line tables) under
`valgrind --tool=callgrind` against the same double and a fresh pod namespace, and keeps the top of
`callgrind_annotate` (inclusive and self). Child processes (iptables-restore) are not followed: their cost is
the floor's. Instruction counts are deterministic, so this is unaffected by machine noise.
"""

import json
import os
import subprocess

from common import CNI_DIR, PATH_ENV, BenchError, log
from double import pod_object


def _annotate(path, inclusive, limit):
    r = subprocess.run(["callgrind_annotate", f"--inclusive={'yes' if inclusive else 'no'}", path],
                       capture_output=True, text=True)
    lines = [ln for ln in r.stdout.splitlines() if ln.strip()]
    out, started = [], False
    for ln in lines:
        if "file:function" in ln:
            started = True
            continue
        if started:
            out.append(ln.rstrip())
            if len(out) >= limit:
                break
    total = next((ln for ln in lines if "PROGRAM TOTALS" in ln), "")
    return total.strip(), out


def profile(b, exe):
    d = os.path.join(b.work, "bin-profile")
    os.makedirs(d)
    os.symlink(os.path.abspath(exe), os.path.join(d, "istio-cni"))
    plugin = os.path.join(d, "istio-cni")
    (nsname, prev), = b.pods.make(1, False)
    ips = [ip["address"].split("/")[0] for ip in prev["ips"]]
    b.double.add_pods([pod_object("prof-redirect", ips=ips), pod_object("prof-plain", sidecar=False)])
    cases = [
        ("VERSION", "VERSION", None, None, {"cniVersion": "1.0.0"}),
        ("ADD excluded namespace", "ADD", nsname, "K8S_POD_NAMESPACE=kube-system;K8S_POD_NAME=x", None),
        ("ADD without sidecar (one GET)", "ADD", nsname, "K8S_POD_NAMESPACE=default;K8S_POD_NAME=prof-plain", None),
        ("ADD with redirect (nft)", "ADD", nsname, "K8S_POD_NAMESPACE=default;K8S_POD_NAME=prof-redirect", None),
    ]
    out = []
    for label, cmd, ns, args, stdin_obj in cases:
        conf = stdin_obj or b.conf("nft", prev)
        stdin = b.write(f"stdin/profile-{len(out)}.json", json.dumps(conf))
        env = {"PATH": PATH_ENV, "CNI_COMMAND": cmd, "CNI_CONTAINERID": "prof", "CNI_IFNAME": "eth0",
               "CNI_NETNS": f"/run/netns/{ns}" if ns else "dummy", "CNI_PATH": f"{d}:{CNI_DIR}"}
        if args:
            env["CNI_ARGS"] = "IgnoreUnknown=1;" + args
        cg = os.path.join(b.a.out, f"callgrind.{len(out)}.out")
        with open(stdin) as si:
            r = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={cg}", "--trace-children=no",
                                plugin], stdin=si, capture_output=True, text=True, env=env)
        if r.returncode != 0:
            raise BenchError(f"profile {label}: exit {r.returncode}: {r.stdout[:800]} {r.stderr[-1500:]}")
        total, incl = _annotate(cg, True, 25)
        _, self_ = _annotate(cg, False, 15)
        out.append({"case": label, "total": total, "inclusive_top": incl, "self_top": self_, "callgrind_file": cg})
        log(f"    profiled {label}: {total}")
    return out


def markdown(prof):
    parts = ["Profile (callgrind, instructions of the plugin process only; children not followed):"]
    for p in prof:
        parts += ["", f"**{p['case']}** — {p['total']}", "", "```", "top inclusive:"] + \
                 [f"  {ln}" for ln in p["inclusive_top"]] + ["top self:"] + [f"  {ln}" for ln in p["self_top"]] + \
                 ["```"]
    return "\n".join(parts)
