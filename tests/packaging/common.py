"""Shared helpers for the packaging tests: paths, the crate version, rendering with `kubectl kustomize`, and
the names and defaults install-cni reads, parsed from its source so that the manifests cannot drift from it."""

import functools
import json
import os
import re
import subprocess
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
MANIFESTS = REPO / "manifests"
INSTALL_DIR = REPO / "src" / "install"
INSTALL_CONFIG = INSTALL_DIR / "settings" / "options.rs"
REPAIR_OPTIONS = REPO / "src" / "repair" / "options.rs"
# The agents' settings the installer reads through agents::Options (AUDIT_INTERVAL and the REPAIR_* parser).
AGENTS_OPTIONS = REPO / "src" / "agents" / "mod.rs"

TRIPLES = {"amd64": "x86_64-unknown-linux-musl", "arm64": "aarch64-unknown-linux-musl"}


def conformance_dir() -> Path:
    """The conformance vectors: $CONFORMANCE_DIR, else <repo>/../shared/conformance (as the Rust tests)."""
    d = Path(os.environ.get("CONFORMANCE_DIR") or REPO.parent / "shared" / "conformance")
    assert (d / "chart").is_dir(), f"conformance vectors not found at {d} (set CONFORMANCE_DIR)"
    return d


def crate_version() -> str:
    m = re.search(r'^version\s*=\s*"([^"]+)"', (REPO / "Cargo.toml").read_text(), re.M)
    assert m, "no version in Cargo.toml"
    return m.group(1)


@functools.lru_cache(maxsize=None)
def release_binary(arch: str) -> Path:
    """The release binary scripts/build-multiarch made for ARCH: where scripts/lib.sh's release_bin says (the
    one place that decides; it honours CARGO_TARGET_DIR)."""
    p = run(["bash", "-c", '. scripts/lib.sh && release_bin "$1"', "release_bin", TRIPLES[arch]], cwd=REPO)
    assert p.returncode == 0 and p.stdout.strip(), f"release_bin failed: {p.stderr}"
    return Path(p.stdout.strip())


# The design card's runtime crates: the binary's only direct dependencies.
CARD = {"argh", "miniserde", "nix", "ureq", "rustls", "ipnet", "log", "env_logger"}


@functools.lru_cache(maxsize=None)
def cargo_metadata(triple: str) -> dict:
    """`cargo metadata --locked --filter-platform TRIPLE`: Cargo.lock's graph as it resolves for TRIPLE."""
    p = run(["cargo", "metadata", "--format-version", "1", "--locked", "--filter-platform", triple], cwd=REPO)
    assert p.returncode == 0, f"cargo metadata failed:\n{p.stderr}"
    return json.loads(p.stdout)


def lock_graph(triple: str, through_proc_macros: bool) -> set:
    """(name, version) of every crate Cargo.lock resolves for TRIPLE as the binary's [dependencies],
    transitively, the binary's own package excluded: no dev-dependency (the test crates) and no
    build-dependency (build scripts' helpers). through_proc_macros=False also leaves out the proc-macro crates
    and what only they need: those run inside the compiler, and cargo auditable lists them as "build"."""
    m = cargo_metadata(triple)
    pkgs = {p["id"]: p for p in m["packages"]}
    nodes = {n["id"]: n for n in m["resolve"]["nodes"]}
    root = next(i for i, p in pkgs.items() if p["name"] == "istio-cni-node" and p["source"] is None)

    def proc_macro(i):
        return any("proc-macro" in t["kind"] for t in pkgs[i]["targets"])

    seen, todo = {root}, [root]
    while todo:
        for d in nodes[todo.pop()]["deps"]:
            normal = any(k["kind"] is None for k in d["dep_kinds"])
            if normal and d["pkg"] not in seen and (through_proc_macros or not proc_macro(d["pkg"])):
                seen.add(d["pkg"])
                todo.append(d["pkg"])
    return {(pkgs[i]["name"], pkgs[i]["version"]) for i in seen - {root}}


def lock_checksums() -> dict:
    """(name, version) -> the sha256 Cargo.lock records for each crates.io package."""
    text = (REPO / "Cargo.lock").read_text()
    out = {}
    for block in text.split("[[package]]")[1:]:
        f = dict(re.findall(r'^(name|version|checksum) = "([^"]+)"', block, re.M))
        if "checksum" in f:
            out[(f["name"], f["version"])] = f["checksum"]
    return out


def run(cmd, **kw) -> subprocess.CompletedProcess:
    """Runs a command, capturing text output; never raises on a non-zero exit (the caller asserts)."""
    if "input" not in kw:
        kw["stdin"] = subprocess.DEVNULL
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def render(kustomization_dir: Path) -> list:
    """`kubectl kustomize DIR`, parsed; fails with kubectl's message."""
    p = run(["kubectl", "kustomize", str(kustomization_dir)])
    if p.returncode != 0:
        raise AssertionError(f"kubectl kustomize {kustomization_dir} failed ({p.returncode}):\n{p.stderr}")
    return [d for d in yaml.safe_load_all(p.stdout) if d]


def _without_tests(src: str) -> str:
    """The source up to its `#[cfg(test)]` module: names only a test uses do not count as read."""
    i = src.find("#[cfg(test)]")
    return src if i < 0 else src[:i]


def install_sources() -> list:
    """install-cni's settings code: src/install/**/*.rs without the test files (options.rs, flags.rs,
    log_settings.rs, ...; the module is split into rooms as it grows, so take all of it)."""
    files = sorted(p for p in INSTALL_DIR.rglob("*.rs") if not p.name.endswith("_tests.rs") and p.name != "tests.rs")
    assert INSTALL_CONFIG in files, f"{INSTALL_CONFIG} missing"
    return files


def env_names_read() -> set:
    """Upper-case string literals in install-cni's sources outside tests: the env names it reads."""
    names = set()
    # install-cni also reads the REPAIR_* settings through the agent's own parser, which skips
    # REPAIR_RUN_AS_DAEMON for it, and AUDIT_INTERVAL through the agents' settings (agents::Options).
    for path in install_sources() + [REPAIR_OPTIONS, AGENTS_OPTIONS]:
        names |= set(re.findall(r'"([A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+)"', _without_tests(path.read_text())))
    return names - {"REPAIR_RUN_AS_DAEMON"}


def installer_defaults() -> dict:
    """`NAME -> default` for the settings install-cni resolves as r.text(&f.x, "NAME", "default"),
    path(&r, &f.x, "NAME", "default") or opt_path(...), the lists (list(&r, &f.x, "NAME", sep): ""), and the numbers as r.typed(&f.x, "NAME", 8000, ...)."""
    src = "\n".join(_without_tests(p.read_text()) for p in install_sources())
    text = r'\b(?:text|path|opt_path)\(\s*(?:&?r,\s*)?&f\.\w+,\s*"([A-Z_]+)",\s*"([^"]*)"\s*,?\s*\)'
    found = dict(re.findall(text, src))
    for name in re.findall(r'\blist\(\s*&?r,\s*&f\.\w+,\s*"([A-Z_]+)"', src):
        found[name] = ""
    for name, default in re.findall(r'\btyped\(\s*&f\.\w+,\s*"([A-Z_]+)",\s*(\d+),', src):
        found[name] = default
    return found


def host_proc_default() -> str:
    m = re.search(r'DEFAULT_HOST_PROC:\s*&str\s*=\s*"([^"]+)"', REPAIR_OPTIONS.read_text())
    assert m, f"no DEFAULT_HOST_PROC in {REPAIR_OPTIONS}"
    return m.group(1)


def need_root(test):
    """Root-only tests fail when not root, unless ISTIO_CNI_SKIP_ROOT_TESTS=1 (then they skip, saying so)."""
    if os.geteuid() != 0:
        if os.environ.get("ISTIO_CNI_SKIP_ROOT_TESTS") == "1":
            test.skipTest("not root and ISTIO_CNI_SKIP_ROOT_TESTS=1: skipping a root-only packaging test")
        raise AssertionError("this packaging test needs root (set ISTIO_CNI_SKIP_ROOT_TESTS=1 to skip it)")
