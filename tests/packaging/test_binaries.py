"""The static release binaries for x86_64 and aarch64 (built by scripts/build-multiarch before this runs):
static, for the right machine, and answering --version; the aarch64 one under qemu-aarch64-static, both as
itself and under an applet name (argv[0] dispatch). How they are linked: the x86_64 one a static-pie (ASLR)
with its relative relocations packed (DT_RELR), both without unwind tables, and a panic in a program linked
the same way (tests/panic-probe) still prints its message and aborts."""

import errno
import os
import re
import resource
import shutil
import signal
import tempfile
import unittest
from pathlib import Path

from common import REPO, TRIPLES, crate_version, release_binary, run

MACHINE = {"amd64": "X86-64", "arm64": "AArch64"}


def readelf(*args):
    p = run(["readelf", *args])
    assert p.returncode == 0, p.stderr
    return p.stdout


def sections(path) -> dict:
    """Section name -> size in bytes (readelf -SW)."""
    out = {}
    for line in readelf("-SW", str(path)).splitlines():
        m = re.match(r"\s*\[\s*\d+\]\s+(\S+)\s+\S+\s+[0-9a-f]+\s+[0-9a-f]+\s+([0-9a-f]+)\s", line)
        if m:
            out[m.group(1)] = int(m.group(2), 16)
    return out


# What the C runtime's crtbegin/crtend keep of .eh_frame once the release link step discards the rest (one
# CIE and the FDEs of crtbegin's two functions: 80 bytes on x86_64, 88 on aarch64); with the tables it is
# ~300 KB.
EH_FRAME_LEFT = 256


class TestReleaseBinaries(unittest.TestCase):
    def binary(self, arch):
        b = release_binary(arch)
        self.assertTrue(b.is_file(), f"{b} missing: scripts/build-multiarch {arch} makes it")
        return b

    def test_static_and_right_machine(self):
        for arch in ("amd64", "arm64"):
            with self.subTest(arch=arch):
                b = self.binary(arch)
                self.assertIn(MACHINE[arch], readelf("-hW", str(b)))
                self.assertNotIn("INTERP", readelf("-lW", str(b)), f"{b} has a program interpreter")
                self.assertNotIn("(NEEDED)", readelf("-dW", str(b)), f"{b} needs shared libraries")
                size = b.stat().st_size
                print(f"\n    {arch}: {b} {size} bytes", end="")
                self.assertLess(size, 3_000_000)

    def test_amd64_is_static_pie(self):
        # ASLR for the binary image: a position-independent executable (ELF type DYN) that relocates itself.
        b = self.binary("amd64")
        self.assertRegex(readelf("-hW", str(b)), r"Type:\s+DYN ")
        desc = run(["file", "-b", str(b)]).stdout
        self.assertIn("static-pie linked", desc)

    def test_amd64_relative_relocations_are_packed(self):
        # -z pack-relative-relocs (.cargo/config.toml): the ~4,200 relative relocations as a DT_RELR bitmap, none
        # left as 24-byte RELA entries. The binary got past its start-up in the tests above, so musl's
        # static-pie start applied them.
        b = self.binary("amd64")
        secs = sections(b)
        self.assertGreater(secs.get(".relr.dyn", 0), 0, f"no .relr.dyn in {b}: {secs}")
        self.assertEqual(secs.get(".rela.dyn", 0), 0, f"{b} still has RELA relocations: {secs}")
        self.assertRegex(readelf("-dW", str(b)), r"\(RELR\)")

    def test_unwind_tables_are_discarded(self):
        # release_build's link step (.cargo/discard-unwind-tables.ld): nothing unwinds with panic = "abort".
        for arch in ("amd64", "arm64"):
            with self.subTest(arch=arch):
                secs = sections(self.binary(arch))
                self.assertLessEqual(secs.get(".eh_frame", 0), EH_FRAME_LEFT, secs)
                self.assertNotIn(".gcc_except_table", secs)

    def test_panic_without_unwind_tables_prints_and_aborts(self):
        # A panic's backtrace is the one thing that reads unwind tables in a panic = "abort" binary. Without
        # them the backtrace is empty; the message must still be printed and the process must abort (SIGABRT,
        # as before), not crash or report a failed unwind, whatever RUST_BACKTRACE says.
        qemu = shutil.which("qemu-aarch64-static")
        self.assertIsNotNone(qemu, "qemu-aarch64-static missing: run scripts/setup-packaging")
        for arch in ("amd64", "arm64"):
            triple = TRIPLES[arch]
            built = run(["bash", "-c", '. scripts/lib.sh && release_cargo "$1" -p panic-probe', "release_cargo", triple],
                        cwd=REPO)
            self.assertEqual(built.returncode, 0, built.stderr)
            probe = release_binary(arch).parent / "panic-probe"
            secs = sections(probe)
            self.assertLessEqual(secs.get(".eh_frame", 0), EH_FRAME_LEFT, f"{probe} kept its unwind tables: {secs}")
            cmd = [str(probe)] if arch == "amd64" else [qemu, str(probe)]
            for backtrace in (None, "0", "1", "full"):
                with self.subTest(arch=arch, RUST_BACKTRACE=backtrace):
                    env = {"PATH": os.environ["PATH"]}
                    if backtrace is not None:
                        env["RUST_BACKTRACE"] = backtrace
                    with tempfile.TemporaryDirectory() as cwd:
                        p = run(cmd, env=env, cwd=cwd,
                                preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_CORE, (0, 0)))
                    self.assertEqual(p.returncode, -signal.SIGABRT, p.stderr)
                    self.assertIn("panicked at tests/panic-probe/src/main.rs:", p.stderr)
                    self.assertIn("panic probe at depth 3", p.stderr)
                    self.assertNotIn("failed to initiate panic", p.stderr)
                    self.assertNotIn("fatal runtime error", p.stderr)
                    if backtrace in ("1", "full"):
                        self.assertIn("stack backtrace:", p.stderr)
                    self.assertEqual(p.stdout, "")

    def version(self, cmd):
        p = run(cmd)
        self.assertEqual(p.returncode, 0, f"{cmd}: {p.stderr}")
        return p.stdout.strip()

    def test_amd64_version(self):
        out = self.version([str(self.binary("amd64")), "--version"])
        self.assertTrue(out.startswith(f"istio-cni-node {crate_version()} (commit "), out)

    def test_arm64_version_under_qemu(self):
        qemu = shutil.which("qemu-aarch64-static")
        self.assertIsNotNone(qemu, "qemu-aarch64-static missing: run scripts/setup-packaging")
        b = str(self.binary("arm64"))
        out = self.version([qemu, b, "--version"])
        self.assertTrue(out.startswith(f"istio-cni-node {crate_version()} (commit "), out)
        self.assertIn("; aarch64-unknown-linux-musl; rustc ", out)
        # Same source, same answer as the x86_64 build but for the target (the commit may differ if one was
        # rebuilt since).
        native = self.version([str(self.binary("amd64")), "--version"])
        self.assertIn("; x86_64-unknown-linux-musl; rustc ", native)
        strip = lambda s: re.sub(r"\(commit \w+; [\w-]+; ", "(commit; ", s)
        self.assertEqual(strip(out), strip(native))
        # argv[0] dispatch: qemu's -0 sets the guest's argv[0], as a symlink named install-cni would.
        out = self.version([qemu, "-0", "/usr/local/bin/install-cni", b, "--version"])
        self.assertTrue(out.startswith(f"install-cni {crate_version()} "), out)
        # And the applet list is complete on aarch64 too.
        self.assertEqual(self.version([qemu, b, "--list"]).split(),
                         ["istio-cni", "install-cni", "istio-cni-repair", "istio-validation"])

    def test_arm64_plugin_speaks_cni_under_qemu(self):
        # Beyond --version: the CNI plugin applet answers VERSION with the same JSON on both arches.
        qemu = shutil.which("qemu-aarch64-static")
        self.assertIsNotNone(qemu, "qemu-aarch64-static missing: run scripts/setup-packaging")
        conf = '{"cniVersion":"1.0.0","name":"n","type":"istio-cni"}'
        env = {"CNI_COMMAND": "VERSION", "PATH": "/usr/bin:/bin"}
        native = run([str(self.binary("amd64"))], input=conf, env=dict(env, CNI_COMMAND="VERSION"))
        emulated = run([qemu, "-0", "istio-cni", str(self.binary("arm64"))], input=conf, env=env)
        self.assertEqual(native.returncode, 0, native.stderr)
        self.assertEqual(emulated.returncode, 0, emulated.stderr)
        self.assertIn('"supportedVersions"', emulated.stdout)
        self.assertEqual(emulated.stdout, native.stdout)

    def test_arm64_binary_does_not_run_natively(self):
        # Guards the qemu test: on this x86_64 machine the aarch64 binary must not simply run by itself
        # (that would mean it is not an aarch64 binary, or binfmt_misc runs qemu behind our back).
        if Path("/proc/sys/fs/binfmt_misc/qemu-aarch64").exists():
            self.skipTest("binfmt_misc runs aarch64 binaries here")
        with self.assertRaises(OSError) as e:
            run([str(self.binary("arm64")), "--version"])
        self.assertEqual(e.exception.errno, errno.ENOEXEC)


if __name__ == "__main__":
    unittest.main()
