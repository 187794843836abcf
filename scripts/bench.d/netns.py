"""scripts/bench.d: the network namespaces of the plugin cases (stdlib only).

Namespaces: named netns (ip netns) made and deleted in batches. PodNets: pod namespaces wired as a node's pods
are, by Debian's ptp + host-local inside "node" namespaces of at most PODS_PER_NODE pods (or bare, only lo).
"""

import concurrent.futures
import json
import os
import subprocess

from common import CNI_DIR, PATH_ENV, BenchError, setns

PODS_PER_NODE = 100


class Namespaces:
    """Named netns (ip netns) created through `ip -batch`; all deleted by cleanup()."""

    def __init__(self, prefix):
        self.prefix = prefix
        self.names = []
        self.n = 0
        self.host_fd = os.open("/proc/self/ns/net", os.O_RDONLY)

    def new_names(self, count):
        out = []
        for _ in range(count):
            self.n += 1
            out.append(f"{self.prefix}{self.n}")
        return out

    def create(self, names):
        if not names:
            return
        batch = "".join(f"netns add {n}\n" for n in names)
        self.names.extend(names)
        r = subprocess.run(["ip", "-batch", "-"], input=batch, text=True, capture_output=True)
        if r.returncode != 0:
            raise BenchError(f"ip -batch netns add failed: {r.stderr.strip()}")
        # Loopback up, as a runtime's sandbox has it.
        for n in names:
            r = subprocess.run(["ip", "-n", n, "link", "set", "lo", "up"], text=True, capture_output=True)
            if r.returncode != 0:
                raise BenchError(f"ip -n {n} link set lo up failed: {r.stderr.strip()}")

    def run_in(self, name, argv, **kw):
        """subprocess.run inside netns `name` (the driver's thread enters it for the spawn only)."""
        fd = os.open(f"/run/netns/{name}", os.O_RDONLY)
        try:
            setns(fd)
            return subprocess.run(argv, **kw)
        finally:
            setns(self.host_fd)
            os.close(fd)

    def delete(self, names):
        names = set(names)
        if not names:
            return
        batch = "".join(f"netns del {n}\n" for n in names)
        subprocess.run(["ip", "-force", "-batch", "-"], input=batch, text=True, capture_output=True)
        self.names = [n for n in self.names if n not in names]

    def cleanup(self):
        if not self.names:
            return
        batch = "".join(f"netns del {n}\n" for n in self.names)
        subprocess.run(["ip", "-force", "-batch", "-"], input=batch, text=True, capture_output=True)
        self.names = []


class PodNets:
    """Pod namespaces for the cases, in `nss`: wired by ptp + host-local (host-local's store in `ipam_dir`)
    inside node namespaces, the first of them `node`; `wiring` "bare" gives them only lo."""

    def __init__(self, nss, wiring, ipam_dir, node):
        self.nss, self.wiring, self.ipam_dir = nss, wiring, ipam_dir
        self.cur_node, self.node_seq, self.node_pods = node, 0, 0
        self.pod_seq = 0

    def mark(self):
        """Where a chunk of pods begins (the position drop_since takes); its first pod gets a new node
        namespace."""
        first = len(self.nss.names)
        self.node_pods = PODS_PER_NODE
        return first

    def drop_since(self, first):
        """Deletes the namespaces created since index `first` (pods and their node namespaces); the next pod
        gets a new node namespace."""
        self.nss.delete(self.nss.names[first:])
        self.node_pods = PODS_PER_NODE

    def make(self, count, dual):
        """`count` pod namespaces wired by ptp + host-local inside a node namespace; returns
        [(netns name, ptp result)]. ptp runs in parallel threads (each enters the node namespace for its
        own spawn): dual-stack wiring waits ~1 s per pod for IPv6 duplicate address detection."""
        names = self.nss.new_names(count)
        self.nss.create(names)
        work = []
        for n in names:
            # A real node has at most ~110 pods (kubelet's default max-pods): a new node namespace, with its
            # own /24, every PODS_PER_NODE pods (thousands of veths in one namespace make ptp slow).
            if self.node_pods >= PODS_PER_NODE:
                self.node_pods = 0
                self.node_seq += 1
                nn = self.nss.new_names(1)[0]
                self.nss.create([nn])
                self.cur_node = nn
            self.node_pods += 1
            k = self.node_seq
            ranges = [[{"subnet": f"10.{200 + k // 256}.{k % 256}.0/24"}]]
            routes = [{"dst": "0.0.0.0/0"}]
            if dual:
                ranges.append([{"subnet": f"fd00:200:{k:x}::/64"}])
                routes.append({"dst": "::/0"})
            work.append((n, self.cur_node, ranges, routes))
        if self.wiring == "bare":
            out = []
            for n, _, _, _ in work:
                self.pod_seq += 1
                ip = f"10.201.{(self.pod_seq // 250) % 250}.{self.pod_seq % 250 + 2}"
                ips = [{"address": f"{ip}/16", "interface": 0}]
                if dual:
                    ips.append({"address": f"fd00:201::{self.pod_seq:x}/64", "interface": 0})
                out.append((n, {"cniVersion": "1.0.0", "interfaces": [{"name": "eth0", "sandbox": f"/run/netns/{n}"}],
                                "ips": ips}))
            return out

        def wire(item):
            n, node, ranges, routes = item
            conf = {"cniVersion": "1.0.0", "name": "bench", "type": "ptp", "ipMasq": False,
                    "ipam": {"type": "host-local", "dataDir": self.ipam_dir, "ranges": ranges, "routes": routes}}
            env = {"PATH": PATH_ENV, "CNI_COMMAND": "ADD", "CNI_CONTAINERID": n, "CNI_NETNS": f"/run/netns/{n}",
                   "CNI_IFNAME": "eth0", "CNI_PATH": CNI_DIR}
            r = self.nss.run_in(node, [os.path.join(CNI_DIR, "ptp")], input=json.dumps(conf), text=True,
                                capture_output=True, env=env)
            if r.returncode != 0:
                raise BenchError(f"ptp ADD for {n} failed: {r.stdout.strip()} {r.stderr.strip()}")
            return n, json.loads(r.stdout)

        with concurrent.futures.ThreadPoolExecutor(max_workers=64 if dual else 8) as ex:
            out = list(ex.map(wire, work))
        return out
