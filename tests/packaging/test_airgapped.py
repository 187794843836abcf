"""The air-gapped install that manifests/README.md documents: copy the one static file to a node as
`install-cni`, run it with `--once` and the documented environment, then `--uninstall`. The node's directories
are temporary directories here; the environment names are taken from the README itself, so the test breaks
when the README drifts from what install-cni reads."""

import json
import os
import re
import shutil
import stat
import tempfile
import unittest
from pathlib import Path

from common import MANIFESTS, env_names_read, release_binary, run


def documented_node_env() -> dict:
    """VAR=value pairs of the README's 'on the node' command that ends in `install-cni --once`."""
    text = (MANIFESTS / "README.md").read_text()
    m = re.search(r"# on the node.*?\n(.*?)install-cni --once", text, re.S)
    assert m, "manifests/README.md: no '# on the node' block ending in 'install-cni --once'"
    return dict(re.findall(r"\b([A-Z][A-Z0-9_]+)=(\S+)", m.group(1)))


class TestAirGapped(unittest.TestCase):
    def setUp(self):
        self.tmp = Path(tempfile.mkdtemp(prefix="istio-cni-airgap-"))
        self.addCleanup(shutil.rmtree, self.tmp)
        self.node = {d: self.tmp / d for d in ("bin", "net.d", "run", "sa")}
        for d in self.node.values():
            d.mkdir()
        (self.node["sa"] / "token").write_text("airgap-token")
        (self.node["sa"] / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
        self.primary = self.node["net.d"] / "10-bridge.conflist"
        self.primary.write_text(json.dumps(
            {"cniVersion": "0.3.1", "name": "k8s-pod-network", "plugins": [{"type": "bridge", "bridge": "cni0"}]}))
        os.chmod(self.primary, 0o644)
        # The one file, under the applet name it is run as.
        self.exe = self.tmp / "install-cni"
        shutil.copy(release_binary("amd64"), self.exe)

    def env(self):
        doc = documented_node_env()
        unknown = sorted(set(doc) - env_names_read() - {"KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"})
        self.assertEqual(unknown, [], "the README's air-gapped command sets names install-cni does not read")
        for var in ("SERVICE_ACCOUNT_DIR", "CNI_BIN_DIR", "MOUNTED_CNI_NET_DIR", "KUBERNETES_SERVICE_HOST"):
            self.assertIn(var, doc)
        # The documented values, with the node's directories moved into the temporary dir.
        env = dict(doc, KUBERNETES_SERVICE_HOST="10.96.0.1", SERVICE_ACCOUNT_DIR=str(self.node["sa"]),
                   CNI_BIN_DIR=str(self.node["bin"]), MOUNTED_CNI_NET_DIR=str(self.node["net.d"]),
                   CNI_AGENT_RUN_DIR=str(self.node["run"]), WAIT_TIMEOUT="10s",
                   PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
        self.assertEqual(doc["CNI_BIN_DIR"], "/opt/cni/bin")
        self.assertEqual(doc["MOUNTED_CNI_NET_DIR"], "/etc/cni/net.d")
        return env

    def test_once_then_uninstall(self):
        env = self.env()
        p = run([str(self.exe), "--once"], env=env, cwd=self.tmp, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        installed = self.node["bin"] / "istio-cni"
        self.assertEqual(installed.read_bytes(), self.exe.read_bytes(), "the plugin is the same one file")
        self.assertTrue(os.access(installed, os.X_OK))
        conf = json.loads(self.primary.read_text())
        self.assertEqual([pl["type"] for pl in conf["plugins"]], ["bridge", "istio-cni"])
        self.assertEqual(conf["plugins"][1]["exclude_namespaces"], env["EXCLUDE_NAMESPACES"].split(","))
        self.assertEqual(stat.S_IMODE(self.primary.stat().st_mode), 0o644, "the primary keeps its mode")
        kubeconfig = self.node["run"] / "istio-cni-kubeconfig"
        self.assertEqual(stat.S_IMODE(kubeconfig.stat().st_mode), 0o600)
        self.assertIn("airgap-token", kubeconfig.read_text())
        self.assertIn("https://10.96.0.1:443", kubeconfig.read_text())
        # The installed plugin answers as the plugin (argv[0] = istio-cni).
        v = run([str(installed), "--version"])
        self.assertTrue(v.stdout.startswith("istio-cni "), v.stdout + v.stderr)

        p = run([str(self.exe), "--uninstall"], env=env, cwd=self.tmp, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertFalse(installed.exists())
        self.assertFalse(kubeconfig.exists())
        conf = json.loads(self.primary.read_text())
        self.assertEqual(conf["plugins"], [{"type": "bridge", "bridge": "cni0"}])

    def test_once_fails_without_a_primary_config(self):
        self.primary.unlink()
        env = dict(self.env(), WAIT_TIMEOUT="1s")
        p = run([str(self.exe), "--once"], env=env, cwd=self.tmp, timeout=60)
        self.assertNotEqual(p.returncode, 0)
        self.assertEqual(list(self.node["net.d"].iterdir()), [])


if __name__ == "__main__":
    unittest.main()
