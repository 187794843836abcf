"""A release describes the binary it just built, in a known environment (scripts/lib.sh: release_bin,
release_build):

- with CARGO_TARGET_DIR set, scripts/release (build-multiarch, image, SBOMs, release-dist, SHA256SUMS) ships the
  binaries it built there, never an older one left at target/<triple>/release;
- the caller's RUSTFLAGS, CARGO_ENCODED_RUSTFLAGS, CARGO_PROFILE_*, RUSTC_WRAPPER, CARGO_BUILD_*, C flags ... are
  refused by name before anything is built, and cargo runs with the allow-listed environment only.

The compiler is the one thing stood in for: a `cargo` earlier on PATH that answers `cargo auditable build` the way
cargo lays out its output (--target-dir, else $CARGO_TARGET_DIR, else ./target) with a copy of this checkout's
real release binary plus a marker, and records the environment and arguments it was given; every other cargo
command (cargo cyclonedx, cargo metadata) goes to the real cargo. Everything else is the real scripts, run in a
copy of this checkout's tracked files (with its uncommitted changes), buildah included.
"""

import fnmatch
import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
import unittest
from pathlib import Path

from common import REPO, TRIPLES, crate_version, need_root, release_binary, run

# `cargo auditable build ... --target T [--target-dir D]` writes D/T/release/istio-cni-node: the real binary
# of that triple (named in @LOG@/FRESH_<triple>) plus a marker, as cargo would place it. Anything else: the
# real cargo (@CARGO@). Its settings are baked in: release_build passes cargo no variable of this test's.
SHIM = r"""#!/usr/bin/env bash
set -euo pipefail
if [ "${1:-}" = auditable ] && [ "${2:-}" = build ]; then
	target= dir=${CARGO_TARGET_DIR:-target}
	args=("$@")
	for ((i = 0; i < ${#args[@]}; i++)); do
		case ${args[i]} in
		--target) target=${args[i + 1]} ;;
		--target-dir) dir=${args[i + 1]} ;;
		esac
	done
	env -0 >"@LOG@/env.$target"
	printf '%s\0' "$@" >"@LOG@/args.$target"
	src_var=FRESH_${target//-/_}
	src=$(cat "@LOG@/$src_var")
	mkdir -p "$dir/$target/release"
	cp "$src" "$dir/$target/release/istio-cni-node"
	printf 'fresh build %s %s' "$target" "$(cat "@LOG@/marker")" >>"$dir/$target/release/istio-cni-node"
	exit 0
fi
exec "@CARGO@" "$@"
"""


def sha256(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


class Shim:
    """A temp dir with the cargo stand-in first on PATH and its log dir."""

    def __init__(self, d: Path, marker: str):
        self.bin = d / "shim-bin"
        self.log = d / "shim-log"
        self.bin.mkdir()
        self.log.mkdir()
        (self.bin / "cargo").write_text(SHIM.replace("@LOG@", str(self.log)).replace("@CARGO@", shutil.which("cargo")))
        (self.bin / "cargo").chmod(0o755)
        (self.log / "marker").write_text(marker)
        for arch, triple in TRIPLES.items():
            (self.log / f"FRESH_{triple.replace('-', '_')}").write_text(str(release_binary(arch)))

    def env(self, **extra) -> dict:
        env = {k: v for k, v in os.environ.items() if k not in ("CARGO_TARGET_DIR", "CARGO_BUILD_TARGET_DIR")}
        env["PATH"] = f"{self.bin}:{env['PATH']}"
        env.update(extra)
        return env

    def called(self, triple: str) -> bool:
        return (self.log / f"env.{triple}").exists()

    def seen_env(self, triple: str) -> dict:
        items = (self.log / f"env.{triple}").read_bytes().split(b"\0")
        return dict(i.decode().split("=", 1) for i in items if i)

    def seen_args(self, triple: str) -> list:
        return [a.decode() for a in (self.log / f"args.{triple}").read_bytes().split(b"\0") if a]


def copy_checkout(dst: Path):
    """This checkout's tracked files as they are now (uncommitted changes included), without target/."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    tar = subprocess.run(["tar", "--null", "-T", "-", "-cf", "-"], cwd=REPO, input=files, capture_output=True,
                         check=True).stdout
    dst.mkdir(parents=True)
    subprocess.run(["tar", "-xf", "-"], cwd=dst, input=tar, check=True)


def release_build(repo: Path, shim: Shim, triple: str, **env) -> subprocess.CompletedProcess:
    """scripts/lib.sh's release_build TRIPLE, in REPO, with the stand-in cargo."""
    return run(["bash", "-c", '. scripts/lib.sh && release_build "$1"', "release_build", triple], cwd=repo,
               env=shim.env(**env))


class TestReleaseEnvironment(unittest.TestCase):
    """R2: the caller's build environment never reaches a release build silently."""

    triple = TRIPLES["amd64"]

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.d = Path(self.tmp.name)
        self.shim = Shim(self.d, "env-test")

    def tearDown(self):
        self.tmp.cleanup()

    def test_variables_that_change_the_output_are_refused_by_name(self):
        for name, value in [("RUSTFLAGS", "-C debuginfo=2"),
                            ("CARGO_ENCODED_RUSTFLAGS", "-Ctarget-feature=-crt-static"),
                            ("CARGO_PROFILE_RELEASE_LTO", "false"),
                            ("CARGO_PROFILE_RELEASE_DEBUG", "true"),
                            ("RUSTC_WRAPPER", "/usr/bin/env"),
                            ("RUSTC_WORKSPACE_WRAPPER", "/usr/bin/env"),
                            ("CARGO_BUILD_RUSTFLAGS", "-Cdebuginfo=2"),
                            ("CARGO_BUILD_TARGET_DIR", str(self.d / "elsewhere")),
                            ("CARGO_TARGET_X86_64_UNKNOWN_LINUX_MUSL_RUSTFLAGS", "-Cdebuginfo=2"),
                            ("CFLAGS", "-O0"),
                            ("CC_x86_64_unknown_linux_musl", "gcc"),
                            ("AR_aarch64_unknown_linux_musl", "ar")]:
            with self.subTest(variable=name):
                # In a temp target dir: should the build go ahead, the stand-in writes there, not into target/.
                p = release_build(REPO, self.shim, self.triple, CARGO_TARGET_DIR=str(self.d / "t"), **{name: value})
                self.assertNotEqual(p.returncode, 0, f"release_build accepted {name}={value}:\n{p.stderr}")
                self.assertIn(name, p.stderr)
                self.assertIn("refuses", p.stderr)
                self.assertFalse(self.shim.called(self.triple), f"cargo ran with {name}={value} in its environment")

    def test_an_unwinding_release_profile_is_refused(self):
        # The release link step discards the unwind tables (.cargo/discard-unwind-tables.ld), which only a
        # panic = "abort" binary can do without: a release profile that unwinds is refused before cargo runs.
        repo = self.d / "checkout"
        copy_checkout(repo)
        manifest = repo / "Cargo.toml"
        text = manifest.read_text()
        profile = text.index("[profile.release]")
        self.assertIn('panic = "abort"', text[profile:])
        manifest.write_text(text[:profile] + text[profile:].replace('panic = "abort"', 'panic = "unwind"', 1))
        p = release_build(repo, self.shim, self.triple, CARGO_TARGET_DIR=str(self.d / "t"))
        self.assertNotEqual(p.returncode, 0, f"release_build accepted panic = \"unwind\":\n{p.stderr}")
        self.assertIn('must say panic = "abort"', p.stderr)
        self.assertFalse(self.shim.called(self.triple), "cargo ran for an unwinding release profile")
        # The checkout as it is builds.
        manifest.write_text(text)
        p = release_build(repo, self.shim, self.triple, CARGO_TARGET_DIR=str(self.d / "t"))
        self.assertEqual(p.returncode, 0, p.stderr)
        config = self.shim.seen_args(self.triple)
        config = config[config.index("--config") + 1]
        self.assertIn(f'"link-arg={repo}/.cargo/discard-unwind-tables.ld"', config)

    def test_cargo_gets_the_allow_listed_environment_only(self):
        target_dir = self.d / "t"
        # The C compiler release_build names itself is no change (cargo test puts the config's [env] there).
        p = release_build(REPO, self.shim, self.triple, CARGO_TARGET_DIR=str(target_dir),
                          ISTIO_CNI_STRAY_SETTING="1", GOFLAGS="-mod=vendor", RUST_LOG="trace",
                          CC_x86_64_unknown_linux_musl="musl-gcc")
        self.assertEqual(p.returncode, 0, p.stderr)
        env = self.shim.seen_env(self.triple)
        for stray in ("ISTIO_CNI_STRAY_SETTING", "GOFLAGS", "RUST_LOG"):
            self.assertNotIn(stray, env)
        self.assertEqual(env.get("CARGO_TARGET_DIR"), str(target_dir))
        self.assertEqual(env.get("CC_x86_64_unknown_linux_musl"), "musl-gcc")
        # Everything cargo saw is on the allow-list (or the C compiler release_build names itself).
        allowed = run(["bash", "-c", '. scripts/lib.sh && printf "%s\\n" "${RELEASE_ENV_ALLOWED[@]}"'],
                      cwd=REPO).stdout.split()
        # (PWD, SHLVL and _ are set by the bash that runs the stand-in itself.)
        extra = [k for k in env if k not in ("CC_x86_64_unknown_linux_musl", "PWD", "SHLVL", "_")
                 and not any(fnmatch.fnmatchcase(k, a) for a in allowed)]
        self.assertEqual(extra, [])
        args = self.shim.seen_args(self.triple)
        self.assertIn("--locked", args)
        self.assertEqual(args[args.index("--target-dir") + 1], str(target_dir))
        config = args[args.index("--config") + 1]
        self.assertIn(f'--remap-path-prefix={target_dir}=/target', config)
        self.assertTrue((target_dir / self.triple / "release" / "istio-cni-node").is_file())


class TestReleaseHonoursTargetDir(unittest.TestCase):
    """R1: with CARGO_TARGET_DIR set, the release, its images, SBOMs and SHA256SUMS hold the binaries just built
    there, not the stale ones (and their SBOMs) at target/<triple>/release."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        d = Path(cls.tmp.name)
        cls.repo = d / "checkout"
        cls.target_dir = d / "elsewhere" / "ci-target"
        cls.marker = f"marker-{os.getpid()}-{os.urandom(4).hex()}"
        cls.shim = Shim(d, cls.marker)
        cls.out = None
        if os.geteuid() != 0:
            return
        copy_checkout(cls.repo)
        # The stale binaries and SBOMs a previous build left where the scripts used to look.
        for arch, triple in TRIPLES.items():
            stale = cls.repo / "target" / triple / "release"
            stale.mkdir(parents=True)
            shutil.copy(release_binary(arch), stale / "istio-cni-node")
            with open(stale / "istio-cni-node", "ab") as f:
                f.write(b"stale binary from an older build")
            (stale / "istio-cni-node.cdx.json").write_text('{"stale": "sbom of an older build"}')
        env = cls.shim.env(CARGO_TARGET_DIR=str(cls.target_dir), ISTIO_CNI_IMAGE_STORE=str(d / "store"))
        cls.out = run(["scripts/release"], cwd=cls.repo, env=env)

    @classmethod
    def tearDownClass(cls):
        store = Path(cls.tmp.name) / "store"
        if store.exists():
            # buildah's vfs layers hold read-only directories.
            subprocess.run(["chmod", "-R", "u+w", str(store)], check=False)
        cls.tmp.cleanup()

    def setUp(self):
        need_root(self)
        self.assertEqual(self.out.returncode, 0, f"scripts/release failed:\n{self.out.stdout}\n{self.out.stderr}")
        self.dist = self.repo / "target" / "release-dist"
        self.version = crate_version()

    def fresh(self, triple: str) -> Path:
        return self.target_dir / triple / "release" / "istio-cni-node"

    def test_binaries_and_sboms_in_the_release_are_the_fresh_ones(self):
        for arch, triple in TRIPLES.items():
            with self.subTest(arch=arch):
                shipped = (self.dist / f"istio-cni-node-{triple}").read_bytes()
                self.assertTrue(shipped.endswith(f"fresh build {triple} {self.marker}".encode()),
                                "the release ships a binary that was not built by this release")
                self.assertEqual(shipped, self.fresh(triple).read_bytes())
                sbom = (self.dist / f"istio-cni-node-{triple}.cdx.json").read_text()
                self.assertNotIn("older build", sbom)
                self.assertEqual(sbom, Path(f"{self.fresh(triple)}.cdx.json").read_text())
                self.assertEqual(json.loads(sbom)["bomFormat"], "CycloneDX")

    def test_sha256sums_name_the_fresh_binaries(self):
        sums = dict(reversed(l.split(None, 1)) for l in (self.dist / "SHA256SUMS").read_text().splitlines())
        for triple in TRIPLES.values():
            self.assertEqual(sums[f"istio-cni-node-{triple}"], sha256(self.fresh(triple)))

    def test_images_carry_the_fresh_binaries_and_sboms(self):
        for arch, triple in TRIPLES.items():
            with self.subTest(arch=arch):
                with tarfile.open(self.dist / f"install-cni-{self.version}-{arch}.oci.tar") as t:
                    def blob(digest):
                        return t.extractfile("blobs/" + digest.replace(":", "/")).read()
                    index = json.loads(t.extractfile("index.json").read())
                    manifest = json.loads(blob(index["manifests"][0]["digest"]))
                    [layer] = manifest["layers"]
                    raw = blob(layer["digest"])
                    if layer["mediaType"].endswith("+gzip"):
                        raw = gzip.decompress(raw)
                with tarfile.open(fileobj=io.BytesIO(raw)) as lt:
                    files = {m.name.lstrip("./"): m for m in lt.getmembers() if m.isfile()}
                    binary = lt.extractfile(files["opt/cni/bin/istio-cni"]).read()
                    sbom = lt.extractfile(files["sbom/istio-cni-node.cdx.json"]).read()
                self.assertEqual(binary, self.fresh(triple).read_bytes())
                self.assertEqual(sbom, Path(f"{self.fresh(triple)}.cdx.json").read_bytes())


if __name__ == "__main__":
    unittest.main()
