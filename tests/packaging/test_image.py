"""The FROM-scratch image, built offline by scripts/image for both arches: its entrypoint answers --version,
it holds exactly the binary, the applet symlinks and the binary's SBOM (named by a label), and its metadata is
what the DaemonSet expects.
Root-only (buildah storage); uses the binaries scripts/build-multiarch already built (--no-build)."""

import json
import os
import re
import shutil
import tarfile
import tempfile
import unittest
from pathlib import Path

from common import MANIFESTS, REPO, crate_version, need_root, release_binary, render, run

STORE = REPO / "target" / "containers"
APPLETS = ["install-cni", "istio-cni-repair", "istio-validation", "istio-cni-node"]


def buildah(*args):
    return run(["buildah", "--root", str(STORE / "storage"), "--runroot", str(STORE / "run"),
                "--storage-driver", "vfs", *args])


class TestImage(unittest.TestCase):
    out = None

    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            return  # each test then fails (or skips) through need_root
        p = run([str(REPO / "scripts" / "image"), "all", "--no-build", "--archive"], cwd=REPO)
        cls.build = p

    def setUp(self):
        need_root(self)
        self.assertEqual(self.build.returncode, 0, f"scripts/image failed:\n{self.build.stdout}\n{self.build.stderr}")
        self.out = self.build.stdout
        self.version = crate_version()

    def test_entrypoint_answers_version(self):
        for arch in ("amd64", "arm64"):
            with self.subTest(arch=arch):
                m = re.search(rf"^image: {arch}: --version: (.*)$", self.out, re.M)
                self.assertIsNotNone(m, self.out)
                self.assertTrue(m.group(1).startswith(f"install-cni {self.version} (commit "), m.group(1))
        # Say how it was run.
        self.assertIn("image: amd64: running the entrypoint with buildah run --isolation chroot", self.out)
        self.assertRegex(self.out, r"image: arm64: .*(qemu-aarch64-static|binfmt_misc)")

    def test_size_reported_and_small(self):
        for arch in ("amd64", "arm64"):
            with self.subTest(arch=arch):
                m = re.search(rf"^image localhost/install-cni:{re.escape(self.version)}-{arch} {arch} (\d+)$",
                              self.out, re.M)
                self.assertIsNotNone(m, self.out)
                size = int(m.group(1))
                binary = release_binary(arch).stat().st_size
                sbom = Path(f"{release_binary(arch)}.cdx.json").stat().st_size
                print(f"\n    image {arch}: {size} bytes (binary {binary}, SBOM {sbom})", end="")
                # The binary, its SBOM and four symlinks of a few dozen bytes each: nothing else.
                self.assertLess(size - binary - sbom, 200)

    def test_manifest_list(self):
        self.assertIn(f"manifest localhost/install-cni:{self.version}: ", self.out)
        p = buildah("manifest", "inspect", f"localhost/install-cni:{self.version}")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(sorted(re.findall(r'"architecture": "(\w+)"', p.stdout)), ["amd64", "arm64"])

    def test_config(self):
        tag = f"localhost/install-cni:{self.version}-amd64"
        fmt = "{{.OCIv1.Config.User}}|{{.OCIv1.Config.Entrypoint}}|{{.OCIv1.Config.Labels}}|{{.OCIv1.Config.Env}}"
        p = buildah("inspect", "--type", "image", "--format", fmt, tag)
        self.assertEqual(p.returncode, 0, p.stderr)
        user, entry, labels, env = p.stdout.strip().split("|")
        self.assertEqual(user, "0:0")
        self.assertEqual(entry, "[/usr/local/bin/install-cni]")
        self.assertIn(f"org.opencontainers.image.version:{self.version}", labels)
        self.assertIn("org.opencontainers.image.title:install-cni", labels)
        self.assertIn("io.istio.cni.arch:amd64", labels)
        self.assertIn("io.istio.cni.sbom:/sbom/istio-cni-node.cdx.json", labels)
        self.assertIn("PATH=/usr/local/bin:/opt/cni/bin", env)

    def test_contents_are_the_binary_and_applet_links(self):
        for arch in ("amd64", "arm64"):
            with self.subTest(arch=arch):
                p = buildah("from", "--pull-never", "--arch", arch, f"localhost/install-cni:{self.version}-{arch}")
                self.assertEqual(p.returncode, 0, p.stderr)
                ctr = p.stdout.strip()
                try:
                    p = buildah("mount", ctr)
                    self.assertEqual(p.returncode, 0, p.stderr)
                    root = Path(p.stdout.strip())
                    entries = {}
                    for dirpath, dirnames, filenames in os.walk(root):
                        for n in dirnames + filenames:
                            full = Path(dirpath, n)
                            rel = str(full.relative_to(root))
                            entries[rel] = ("link:" + os.readlink(full)) if full.is_symlink() else (
                                "dir" if full.is_dir() else "file")
                    expected = {"opt": "dir", "opt/cni": "dir", "opt/cni/bin": "dir", "opt/cni/bin/istio-cni": "file",
                                "usr": "dir", "usr/local": "dir", "usr/local/bin": "dir", "tmp": "dir",
                                "sbom": "dir", "sbom/istio-cni-node.cdx.json": "file"}
                    expected.update({f"usr/local/bin/{a}": "link:../../../opt/cni/bin/istio-cni" for a in APPLETS})
                    self.assertEqual(entries, expected)
                    self.assertEqual((root / "opt/cni/bin/istio-cni").read_bytes(), release_binary(arch).read_bytes())
                    self.assertEqual(os.stat(root / "opt/cni/bin/istio-cni").st_mode & 0o7777, 0o755)
                    # The binary's own SBOM, the one scripts/build-multiarch leaves next to it.
                    self.assertEqual((root / "sbom/istio-cni-node.cdx.json").read_bytes(),
                                     Path(f"{release_binary(arch)}.cdx.json").read_bytes())
                    self.assertEqual(os.stat(root / "sbom/istio-cni-node.cdx.json").st_mode & 0o7777, 0o644)
                    self.assertEqual(os.stat(root / "tmp").st_mode & 0o7777, 0o1777)
                finally:
                    buildah("umount", ctr)
                    buildah("rm", ctr)

    def test_every_applet_runs_in_the_image(self):
        tag = f"localhost/install-cni:{self.version}-amd64"
        p = buildah("from", "--pull-never", tag)
        self.assertEqual(p.returncode, 0, p.stderr)
        ctr = p.stdout.strip()
        try:
            for a in APPLETS:
                with self.subTest(applet=a):
                    p = buildah("run", "--isolation", "chroot", ctr, "--", f"/usr/local/bin/{a}", "--version")
                    self.assertEqual(p.returncode, 0, p.stderr)
                    self.assertTrue(p.stdout.startswith(f"{a} {self.version} "), p.stdout)
            # The image has no shell: a RUN step or `sh -c` could not work, by design.
            p = buildah("run", "--isolation", "chroot", ctr, "--", "/bin/sh", "-c", "true")
            self.assertNotEqual(p.returncode, 0)
        finally:
            buildah("rm", ctr)

    def test_installs_with_the_daemonsets_mounts_and_env(self):
        # The base DaemonSet's container, as far as a chroot run can model it: its hostPath mounts at their
        # container paths (temporary dirs standing in for the node's), the service-account volume, and its
        # environment (the rendered ConfigMap, the fieldRefs, what the kubelet adds). Then --once and
        # --uninstall, as the DaemonSet's start and stop would do.
        docs = render(MANIFESTS / "base")
        ds = next(d for d in docs if d["kind"] == "DaemonSet")
        config = next(d for d in docs if d["kind"] == "ConfigMap")["data"]
        spec = ds["spec"]["template"]["spec"]
        container = spec["containers"][0]
        volumes = {v["name"]: v for v in spec["volumes"]}
        node = Path(tempfile.mkdtemp(prefix="istio-cni-node-"))
        self.addCleanup(shutil.rmtree, node)
        args = []
        for m in container["volumeMounts"]:
            host = volumes[m["name"]]["hostPath"]["path"]
            if host == "/proc":
                continue  # the repair agent's; --once does not start it
            d = node / host.strip("/").replace("/", "_")
            d.mkdir()
            args += ["-v", f"{d}:{m['mountPath']}"]
        sa = node / "sa"
        sa.mkdir()
        (sa / "token").write_text("image-token")
        # A PEM certificate block: the installer refuses a CA file holding none (the plugin could verify no
        # API server with it); --once contacts no server, so its content is not checked further.
        (sa / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
        args += ["-v", f"{sa}:/var/run/secrets/kubernetes.io/serviceaccount:ro"]
        env = dict(config, KUBERNETES_SERVICE_HOST="10.96.0.1", KUBERNETES_SERVICE_PORT="443", WAIT_TIMEOUT="10s")
        for e in container["env"]:
            env[e["name"]] = {"spec.nodeName": "node-1", "metadata.namespace": "kube-system",
                              "metadata.name": "istio-cni-node-x1y2z"}[
                e["valueFrom"]["fieldRef"]["fieldPath"]]
        for k, v in env.items():
            args += ["-e", f"{k}={v}"]
        conf_dir = node / "etc_cni_net.d"
        primary = conf_dir / "10-calico.conflist"
        primary.write_text(json.dumps({"cniVersion": "0.3.1", "name": "k8s-pod-network",
                                       "plugins": [{"type": "calico"}, {"type": "portmap"}]}))

        p = buildah("from", "--pull-never", f"localhost/install-cni:{self.version}-amd64")
        self.assertEqual(p.returncode, 0, p.stderr)
        ctr = p.stdout.strip()
        try:
            p = buildah("run", "--isolation", "chroot", *args, ctr, "--", "/usr/local/bin/install-cni", "--once")
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            plugin = node / "opt_cni_bin" / "istio-cni"
            self.assertEqual(plugin.read_bytes(), release_binary("amd64").read_bytes())
            # Our manifests use the owned layout (README, "CNI configuration layouts"): our own file, sorting
            # before the primary, holds the primary's plugins and ours; the primary is left as it was.
            self.assertEqual(config.get("ISTIO_OWNED_CNI_CONFIG"), "true")
            owned = conf_dir / (config.get("ISTIO_OWNED_CNI_CONFIG_FILENAME") or "02-istio-cni.conflist")
            self.assertEqual([x["type"] for x in json.loads(primary.read_text())["plugins"]], ["calico", "portmap"])
            merged = json.loads(owned.read_text())
            self.assertEqual(merged["name"], "k8s-pod-network")
            self.assertEqual([x["type"] for x in merged["plugins"]], ["calico", "portmap", "istio-cni"])
            self.assertEqual(merged["plugins"][2]["exclude_namespaces"], config["EXCLUDE_NAMESPACES"].split(","))
            self.assertEqual(merged["plugins"][2]["plugin_log_level"], config["PLUGIN_LOG_LEVEL"])
            kubeconfig = node / "var_run_istio-cni" / "istio-cni-kubeconfig"
            self.assertIn("image-token", kubeconfig.read_text())

            p = buildah("run", "--isolation", "chroot", *args, ctr, "--", "/usr/local/bin/install-cni", "--uninstall")
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            self.assertFalse(plugin.exists())
            self.assertFalse(kubeconfig.exists())
            self.assertFalse(owned.exists(), "the owned file outlived --uninstall")
            self.assertEqual([x["type"] for x in json.loads(primary.read_text())["plugins"]], ["calico", "portmap"])
        finally:
            buildah("rm", ctr)

    def test_oci_archives(self):
        for arch in ("amd64", "arm64"):
            with self.subTest(arch=arch):
                path = REPO / "target" / "image" / f"install-cni-{self.version}-{arch}.oci.tar"
                self.assertIn(f"archive target/image/{path.name} ", self.out)
                with tarfile.open(path) as t:
                    names = t.getnames()
                self.assertIn("index.json", names)
                self.assertIn("oci-layout", names)


if __name__ == "__main__":
    unittest.main()
