"""What a vulnerability scanner and an air-gapped site read from a release (built before this runs by
scripts/build-multiarch, and by scripts/release here):

- the dependency list inside each release binary (cargo auditable), read back with rust-audit-info (pinned):
  exactly the runtime crates Cargo.lock resolves for that target, no dev-dependency;
- the SBOMs (cargo-cyclonedx): valid CycloneDX 1.5 JSON by cyclonedx-python-lib's schema validator (pinned),
  listing the same crates, versions and checksums as Cargo.lock, with licences, and no host path or date
  other than the commit's;
- target/release-dist (scripts/release): both binaries, both OCI archives (holding the binary and its SBOM,
  with the label naming it), both SBOMs, and a SHA256SUMS that `sha256sum -c` accepts and that catches a
  changed byte.
"""

import copy
import gzip
import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
import unittest
from pathlib import Path

from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator

from common import (CARD, REPO, TRIPLES, cargo_metadata, crate_version, lock_checksums, lock_graph, need_root,
                    release_binary, run)

DIST = REPO / "target" / "release-dist"
SBOM_IN_IMAGE = "sbom/istio-cni-node.cdx.json"


def commit_time() -> str:
    epoch = os.environ.get("SOURCE_DATE_EPOCH") or run(["git", "log", "-1", "--format=%ct"], cwd=REPO).stdout.strip()
    return subprocess.run(["date", "-u", "-d", f"@{epoch}", "+%Y-%m-%dT%H:%M:%S"], capture_output=True,
                          text=True, check=True).stdout.strip()


def audit_info(binary: Path) -> dict:
    p = run(["rust-audit-info", str(binary)])
    assert p.returncode == 0, f"rust-audit-info {binary}: {p.stderr}"
    return json.loads(p.stdout)


def compiled_crates(triple: str) -> set:
    """What cargo really compiles into the binary for TRIPLE (cargo tree's feature resolution, proc-macros
    left out), as (name, version), the binary's own package excluded."""
    p = run(["cargo", "tree", "--locked", "-e", "normal,no-proc-macro", "--target", triple, "-p", "istio-cni-node",
             "--prefix", "none"], cwd=REPO)
    assert p.returncode == 0, p.stderr
    out = set()
    for line in p.stdout.splitlines():
        name, version = line.split()[:2]
        if name != "istio-cni-node":
            out.add((name, version.lstrip("v")))
    return out


class TestEmbeddedDependencies(unittest.TestCase):
    """rust-audit-info on each release binary: what Trivy, Grype and osv-scanner read from the one file."""

    def test_lists_exactly_the_runtime_crates_of_cargo_lock(self):
        for arch, triple in TRIPLES.items():
            with self.subTest(arch=arch):
                data = audit_info(release_binary(arch))
                pkgs = data["packages"]
                roots = [p for p in pkgs if p.get("root")]
                self.assertEqual([(p["name"], p["version"]) for p in roots], [("istio-cni-node", crate_version())])
                runtime = {(p["name"], p["version"]) for p in pkgs if p.get("kind", "runtime") == "runtime"
                           and not p.get("root")}
                self.assertEqual(runtime, lock_graph(triple, through_proc_macros=False))
                # The binary's direct dependencies are the design card's eight.
                self.assertEqual({pkgs[i]["name"] for i in roots[0]["dependencies"]}, CARD)
                # Every crate the binary is compiled from is listed: a scanner misses none. (The list may hold
                # more: cargo metadata, which cargo auditable reads, resolves features without resolver 2's
                # per-target split, so an optional dependency that Cargo.lock records but this build does not
                # compile shows up; README "Supply chain" names them.)
                compiled = compiled_crates(triple)
                self.assertEqual(compiled - runtime, set(), "crates in the binary that its dependency list lacks")
                print(f"\n    {arch}: {len(runtime)} runtime crates listed, {len(compiled)} compiled;"
                      f" listed, not compiled: {sorted(n for n, _ in runtime - compiled)}", end="")

    def test_no_dev_dependency_in_the_binary(self):
        # The test crates and what only they pull in (the kube double's TLS certificate generator, the CRI
        # client) are in Cargo.lock but must not be in any binary's list, as runtime or build.
        in_lock = {p["name"] for p in cargo_metadata(TRIPLES["amd64"])["packages"]}
        dev = {"kube-double", "cri-e2e", "rcgen", "k8s-cri", "tokio"}
        self.assertEqual(dev - in_lock, set(), "Cargo.lock should hold these dev crates")
        for arch in TRIPLES:
            with self.subTest(arch=arch):
                names = {p["name"] for p in audit_info(release_binary(arch))["packages"]}
                self.assertEqual(names & dev, set())

    def test_section_is_small(self):
        for arch in TRIPLES:
            with self.subTest(arch=arch):
                p = run(["readelf", "-SW", str(release_binary(arch))])
                line = next((l for l in p.stdout.splitlines() if ".dep-v0" in l), None)
                self.assertIsNotNone(line, f"no .dep-v0 section in {release_binary(arch)}: not built with cargo auditable")
                size = int(line.split(".dep-v0")[1].split()[3], 16)
                print(f"\n    {arch}: .dep-v0 {size} bytes", end="")
                self.assertLess(size, 1024)

    def test_rust_audit_info_fails_without_the_data(self):
        # The check above can fail: a binary without the section has nothing to read.
        p = run(["rust-audit-info", "/bin/true"])
        self.assertNotEqual(p.returncode, 0)


class TestSbom(unittest.TestCase):
    """The SBOM next to each release binary (scripts/build-multiarch wrote it)."""

    def sbom(self, arch) -> tuple:
        path = Path(f"{release_binary(arch)}.cdx.json")
        self.assertTrue(path.is_file(), f"{path} missing: scripts/build-multiarch {arch} writes it")
        text = path.read_text()
        return text, json.loads(text)

    def test_validates_against_the_cyclonedx_schema(self):
        validator = JsonStrictValidator(SchemaVersion.V1_5)
        for arch in TRIPLES:
            with self.subTest(arch=arch):
                text, doc = self.sbom(arch)
                self.assertEqual((doc["bomFormat"], doc["specVersion"]), ("CycloneDX", "1.5"))
                self.assertIsNone(validator.validate_str(text))

    def test_validator_rejects_a_broken_sbom(self):
        validator = JsonStrictValidator(SchemaVersion.V1_5)
        _, doc = self.sbom("amd64")
        bad = copy.deepcopy(doc)
        bad["components"][0]["licenses"] = [{"expression": 1}]
        self.assertIsNotNone(validator.validate_str(json.dumps(bad)))
        bad = copy.deepcopy(doc)
        bad["components"][0]["surprise"] = True
        self.assertIsNotNone(validator.validate_str(json.dumps(bad)))

    def test_lists_cargo_locks_runtime_graph_with_licences_and_checksums(self):
        checksums = lock_checksums()
        for arch, triple in TRIPLES.items():
            with self.subTest(arch=arch):
                _, doc = self.sbom(arch)
                comps = doc["components"]
                listed = {(c["name"], c["version"]) for c in comps}
                self.assertEqual(len(listed), len(comps), "a crate listed twice")
                self.assertEqual(listed, lock_graph(triple, through_proc_macros=True))
                for c in comps:
                    key = (c["name"], c["version"])
                    self.assertEqual(c["purl"], f"pkg:cargo/{c['name']}@{c['version']}")
                    self.assertTrue(c.get("licenses"), f"{key}: no licence")
                    self.assertEqual(c["hashes"], [{"alg": "SHA-256", "content": checksums[key]}], key)
                top = doc["metadata"]["component"]
                self.assertEqual((top["name"], top["version"], top["type"]),
                                 ("istio-cni-node", crate_version(), "application"))
                self.assertIn({"name": "cdx:rustc:sbom:target:triple", "value": triple}, doc["metadata"]["properties"])
                self.assertTrue(CARD <= {n for n, _ in listed})

    def test_reproducible(self):
        # No random serial number, the commit's time as its only date, no host path: the same commit gives
        # the same file anywhere.
        for arch in TRIPLES:
            with self.subTest(arch=arch):
                text, doc = self.sbom(arch)
                self.assertNotIn("serialNumber", doc)
                self.assertTrue(doc["metadata"]["timestamp"].startswith(commit_time()), doc["metadata"]["timestamp"])
                for host in {str(REPO), str(REPO.resolve()), str(Path.home())}:
                    self.assertNotIn(host, text)


class TestReleaseDist(unittest.TestCase):
    """scripts/release and target/release-dist, as an air-gapped site receives it."""

    @classmethod
    def setUpClass(cls):
        cls.build = None
        if os.geteuid() == 0:
            cls.build = run([str(REPO / "scripts" / "release")], cwd=REPO)

    def setUp(self):
        need_root(self)
        self.assertEqual(self.build.returncode, 0, f"scripts/release failed:\n{self.build.stdout}\n{self.build.stderr}")
        self.version = crate_version()

    def expected(self):
        names = {"SHA256SUMS"}
        for arch, triple in TRIPLES.items():
            names |= {f"istio-cni-node-{triple}", f"istio-cni-node-{triple}.cdx.json",
                      f"install-cni-{self.version}-{arch}.oci.tar"}
        return names

    def test_directory_holds_exactly_the_release(self):
        self.assertEqual({p.name for p in DIST.iterdir()}, self.expected())
        for arch, triple in TRIPLES.items():
            with self.subTest(arch=arch):
                b = DIST / f"istio-cni-node-{triple}"
                self.assertEqual(b.read_bytes(), release_binary(arch).read_bytes())
                self.assertTrue(os.access(b, os.X_OK))
                self.assertEqual((DIST / f"istio-cni-node-{triple}.cdx.json").read_bytes(),
                                 Path(f"{release_binary(arch)}.cdx.json").read_bytes())

    def test_sha256sums_cover_everything_and_check(self):
        sums = (DIST / "SHA256SUMS").read_text().splitlines()
        self.assertEqual({l.split(None, 1)[1] for l in sums}, self.expected() - {"SHA256SUMS"})
        p = run(["sha256sum", "-c", "SHA256SUMS"], cwd=DIST)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertEqual(p.stdout.count(": OK"), len(self.expected()) - 1)
        # and catches one changed byte (in a copy)
        with tempfile.TemporaryDirectory() as d:
            for f in DIST.iterdir():
                shutil.copy(f, d)
            b = Path(d, f"istio-cni-node-{TRIPLES['arm64']}")
            data = bytearray(b.read_bytes())
            data[len(data) // 2] ^= 1
            b.write_bytes(bytes(data))
            p = run(["sha256sum", "-c", "SHA256SUMS"], cwd=d)
            self.assertNotEqual(p.returncode, 0)
            self.assertIn(f"istio-cni-node-{TRIPLES['arm64']}: FAILED", p.stdout)

    def test_archives_carry_the_binary_its_sbom_and_the_label(self):
        for arch, triple in TRIPLES.items():
            with self.subTest(arch=arch):
                with tarfile.open(DIST / f"install-cni-{self.version}-{arch}.oci.tar") as t:
                    def blob(digest):
                        return t.extractfile("blobs/" + digest.replace(":", "/")).read()
                    index = json.loads(t.extractfile("index.json").read())
                    manifest = json.loads(blob(index["manifests"][0]["digest"]))
                    config = json.loads(blob(manifest["config"]["digest"]))
                    self.assertEqual(config["architecture"], arch)
                    labels = config["config"]["Labels"]
                    self.assertEqual(labels["io.istio.cni.sbom"], "/" + SBOM_IN_IMAGE)
                    self.assertEqual(labels["org.opencontainers.image.version"], self.version)
                    [layer] = manifest["layers"]
                    raw = blob(layer["digest"])
                    if layer["mediaType"].endswith("+gzip"):
                        raw = gzip.decompress(raw)
                with tarfile.open(fileobj=io.BytesIO(raw)) as layer_tar:
                    files = {m.name.lstrip("./"): m for m in layer_tar.getmembers() if m.isfile()}
                    self.assertEqual(set(files), {"opt/cni/bin/istio-cni", SBOM_IN_IMAGE})
                    self.assertEqual(layer_tar.extractfile(files["opt/cni/bin/istio-cni"]).read(),
                                     (DIST / f"istio-cni-node-{triple}").read_bytes())
                    self.assertEqual(layer_tar.extractfile(files[SBOM_IN_IMAGE]).read(),
                                     (DIST / f"istio-cni-node-{triple}.cdx.json").read_bytes())


if __name__ == "__main__":
    unittest.main()
