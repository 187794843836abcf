"""Every kustomization under manifests/ renders with `kubectl kustomize`, validates offline against the
Kubernetes JSON schemas (kubernetes-validate, strict), and says what the DaemonSet needs and no more: RBAC
verbs per repair mode, mounts, probes, capabilities, and env names install-cni really reads."""

import os
import re
import tempfile
import unittest
from pathlib import Path

import kubernetes_validate
import yaml

from common import (
    MANIFESTS,
    REPO,
    conformance_dir,
    crate_version,
    env_names_read,
    host_proc_default,
    installer_defaults,
    render,
)

# Kubernetes versions validated against: the oldest still commonly run (1.30: the first with
# securityContext.appArmorProfile) and the newest the schemas know.
K8S_VERSIONS = ["1.30.0", kubernetes_validate.latest_version()]

REPAIR_CAPS = {"SYS_ADMIN", "SYS_PTRACE", "NET_ADMIN", "NET_RAW", "DAC_OVERRIDE"}
# Nothing beyond upstream's chart: the node's own iptables run through the node's dynamic loader by path,
# with no chroot (manifests/base/daemonset.yaml), so SYS_CHROOT is not needed.
BEYOND_UPSTREAM_CAPS = set()
APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/install-cni"
# What istiod's untaint controller (pilot.taint.enabled) looks for: pods with this label in its CNI
# namespace (pilot.taint.namespace), Ready on the node; then it removes this taint.
UNTAINT_LABEL = ("k8s-app", "istio-cni-node")
NOT_READY_TAINT = "cni.istio.io/not-ready"

# The repair RBAC each mode needs beyond the istio-cni role's (its pods come from install-cni's pod watch):
# (resource, verb) pairs in the core group. None = no repair role at all.
REPAIR_RULES = {
    "repair": {("events", "create")},
    "delete": {("pods", "delete"), ("events", "create")},
    "label": {("pods/status", "patch"), ("events", "create")},
    "off": None,
}
# The istio-cni role, in every mode: the plugin's GET on a pod cache miss, install-cni's watch of its node's
# pods for the cache (and the repair agent).
PLUGIN_RULES = {("pods", "get"), ("pods", "list"), ("pods", "watch")}

# Every API call the crate's Kubernetes client can make (src/kube/client.rs) and the RBAC it needs. A new
# call fails TestCoverage until it is added here, which makes someone decide which role needs it.
CLIENT_CALLS = {
    "get_pod": ("pods", "get"),
    "get_pod_within": ("pods", "get"),
    "get_pod_attempt": ("pods", "get"),
    "list_pods": ("pods", "list"),
    "watch_pods": ("pods", "watch"),
    "patch_pod_status": ("pods/status", "patch"),
    "delete_pod": ("pods", "delete"),
    "create_event": ("events", "create"),
    # The SIGTERM decision (install-cni, rbac-upgrade.yaml): daemonsets are in the apps group.
    "get_daemonset_within": ("daemonsets", "get"),
    "get_node_within": ("nodes", "get"),
}
# pub fns of the client that make no request.
CLIENT_NON_CALLS = {"from_config", "with_timeouts", "from_kubeconfig", "in_cluster", "from_env", "server", "timeouts"}

DEFAULT_DIRS = {"bin": "/opt/cni/bin", "conf": "/etc/cni/net.d"}

# What each shipped kustomization must produce.
VARIANTS = {
    "base": dict(mode="repair", chained=True, **DEFAULT_DIRS),
    "overlays/gke": dict(mode="repair", chained=True, bin="/home/kubernetes/bin", conf="/etc/cni/net.d"),
    "overlays/openshift-multus": dict(
        mode="repair", chained=False, bin="/var/lib/cni/bin", conf="/etc/cni/multus/net.d", multus=True
    ),
    "overlays/repair-delete": dict(mode="delete", chained=True, **DEFAULT_DIRS),
    "overlays/repair-label": dict(mode="label", chained=True, **DEFAULT_DIRS),
    "overlays/repair-off": dict(mode="off", chained=True, **DEFAULT_DIRS),
}

# A user's own combination of components, as manifests/README.md describes it.
COMPOSED = {
    "gke+repair-label": (["gke", "repair-label"], dict(mode="label", chained=True, bin="/home/kubernetes/bin",
                                                       conf="/etc/cni/net.d")),
    "openshift-multus+repair-delete": (["openshift-multus", "repair-delete"],
                                       dict(mode="delete", chained=False, bin="/var/lib/cni/bin",
                                            conf="/etc/cni/multus/net.d", multus=True)),
}


def upstream_chart_caps():
    """The capabilities upstream's istio-cni chart adds (conformance/chart/default.yaml, as rendered by Helm)."""
    docs = [d for d in yaml.safe_load_all((conformance_dir() / "chart" / "default.yaml").read_text()) if d]
    ds = one(docs, "DaemonSet", "istio-cni-node")
    c = ds["spec"]["template"]["spec"]["containers"][0]
    assert c["securityContext"]["capabilities"]["drop"] == ["ALL"]
    return set(c["securityContext"]["capabilities"]["add"])


def by_kind(docs, kind):
    return [d for d in docs if d["kind"] == kind]


def one(docs, kind, name=None):
    found = [d for d in by_kind(docs, kind) if name is None or d["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def core_rules(role):
    pairs = set()
    for r in role.get("rules", []):
        if r.get("apiGroups") != [""]:
            continue
        assert "resourceNames" not in r, f"unexpected resourceNames in {role['metadata']['name']}"
        for res in r["resources"]:
            for v in r["verbs"]:
                pairs.add((res, v))
    return pairs


def go_bool(v: str) -> bool:
    if v in ("1", "t", "T", "true", "TRUE", "True"):
        return True
    if v in ("0", "f", "F", "false", "FALSE", "False"):
        return False
    raise AssertionError(f"{v!r} is not a Go boolean")


class Rendered:
    """One rendered kustomization and the facts every check needs."""

    def __init__(self, docs):
        self.docs = docs
        self.ds = one(docs, "DaemonSet", "istio-cni-node")
        self.pod = self.ds["spec"]["template"]
        spec = self.pod["spec"]
        assert len(spec["containers"]) == 1
        self.c = spec["containers"][0]
        self.cm = one(docs, "ConfigMap")
        self.config = self.cm["data"]


class ManifestChecks:
    """Mixed into one TestCase per variant (see the classes made at the bottom)."""

    variant = None  # dict from VARIANTS
    path = None  # kustomization dir

    @classmethod
    def setUpClass(cls):
        cls.r = Rendered(render(cls.path))

    # --- schemas -------------------------------------------------------------------------------------------
    def test_validates_against_kubernetes_schemas(self):
        for version in K8S_VERSIONS:
            for d in self.r.docs:
                if d["kind"] == "NetworkAttachmentDefinition":
                    continue  # a CRD (multus): checked by test_openshift_multus
                with self.subTest(version=version, kind=d["kind"], name=d["metadata"]["name"]):
                    kubernetes_validate.validate(d, version, strict=True)

    def test_only_expected_kinds(self):
        kinds = sorted(d["kind"] for d in self.r.docs)
        expected = ["ClusterRole", "ClusterRoleBinding", "ConfigMap", "DaemonSet", "ServiceAccount",
                    # rbac-upgrade.yaml: the DaemonSet (Role) and nodes (ClusterRole) for safe upgrades
                    "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"]
        if self.variant["mode"] != "off":
            expected += ["ClusterRole", "ClusterRoleBinding"]
        if self.variant.get("multus"):
            expected.append("NetworkAttachmentDefinition")
        self.assertEqual(kinds, sorted(expected))

    # --- RBAC ----------------------------------------------------------------------------------------------
    def test_plugin_role_reads_pods_only(self):
        role = one(self.r.docs, "ClusterRole", "istio-cni")
        self.assertEqual(core_rules(role), PLUGIN_RULES)
        other = [r for r in role["rules"] if r.get("apiGroups") != [""]]
        if self.variant.get("multus"):
            self.assertEqual(other, [{"apiGroups": ["security.openshift.io"], "resources": ["securitycontextconstraints"],
                                      "resourceNames": ["privileged"], "verbs": ["use"]}])
        else:
            self.assertEqual(other, [])

    def test_repair_role_has_least_verbs_for_the_mode(self):
        want = REPAIR_RULES[self.variant["mode"]]
        roles = [d for d in by_kind(self.r.docs, "ClusterRole") if d["metadata"]["name"] == "istio-cni-repair-role"]
        if want is None:
            self.assertEqual(roles, [], "repair off must not grant repair RBAC")
            return
        self.assertEqual(len(roles), 1)
        self.assertEqual(core_rules(roles[0]), want)
        self.assertTrue(all(r.get("apiGroups") == [""] for r in roles[0]["rules"]))

    def test_upgrade_roles_get_our_daemonset_and_nodes_only(self):
        # At SIGTERM install-cni reads its DaemonSet and node (src/install/handover/lookup.rs): a Role in the
        # DaemonSet's namespace for exactly that DaemonSet, and get on nodes; its own pod through get pods.
        sa = one(self.r.docs, "ServiceAccount")
        role = one(self.r.docs, "Role", "istio-cni-upgrade")
        self.assertEqual(role["metadata"]["namespace"], self.r.ds["metadata"]["namespace"])
        self.assertEqual(role["rules"], [{"apiGroups": ["apps"], "resources": ["daemonsets"],
                                          "resourceNames": [self.r.ds["metadata"]["name"]], "verbs": ["get"]}])
        binding = one(self.r.docs, "RoleBinding", "istio-cni-upgrade")
        self.assertEqual(binding["metadata"]["namespace"], role["metadata"]["namespace"])
        self.assertEqual(binding["roleRef"], {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                              "name": "istio-cni-upgrade"})
        self.assertEqual(binding["subjects"], [{"kind": "ServiceAccount", "name": sa["metadata"]["name"],
                                                "namespace": sa["metadata"]["namespace"]}])
        nodes = one(self.r.docs, "ClusterRole", "istio-cni-upgrade")
        self.assertEqual(core_rules(nodes), {("nodes", "get")})
        self.assertEqual(len(nodes["rules"]), 1)
        refs = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in self.r.c["env"]}
        self.assertEqual(refs.get("POD_NAME"), "metadata.name")

    def test_bindings_point_at_the_service_account(self):
        sa = one(self.r.docs, "ServiceAccount")
        self.assertEqual(self.r.pod["spec"]["serviceAccountName"], sa["metadata"]["name"])
        roles = {d["metadata"]["name"] for d in by_kind(self.r.docs, "ClusterRole")}
        bindings = by_kind(self.r.docs, "ClusterRoleBinding")
        self.assertEqual({b["roleRef"]["name"] for b in bindings}, roles, "every role bound, no dangling binding")
        for b in bindings:
            self.assertEqual(b["subjects"], [{"kind": "ServiceAccount", "name": sa["metadata"]["name"],
                                              "namespace": sa["metadata"]["namespace"]}])

    # --- settings ------------------------------------------------------------------------------------------
    def test_env_names_are_read_by_install_cni(self):
        read = env_names_read()
        set_here = set(self.r.config) | {e["name"] for e in self.r.c.get("env", [])}
        unknown = sorted(set_here - read)
        self.assertEqual(unknown, [], f"set in the manifests but never read by install-cni (src/install/**/*.rs): {unknown}")
        # The ConfigMap is what envFrom loads.
        self.assertEqual(self.r.c["envFrom"], [{"configMapRef": {"name": self.r.cm["metadata"]["name"]}}])
        # Values parse the way install-cni parses them.
        for k in ("CHAINED_CNI_PLUGIN", "REPAIR_ENABLED", "REPAIR_REPAIR_PODS", "REPAIR_DELETE_PODS", "REPAIR_LABEL_PODS"):
            go_bool(self.r.config[k])
        for e in self.r.c["env"]:
            self.assertIn("valueFrom", e, f"{e['name']}: fixed values belong in the ConfigMap")
        refs = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in self.r.c["env"]}
        self.assertEqual(refs.get("REPAIR_NODE_NAME"), "spec.nodeName")
        self.assertEqual(refs.get("KUBERNETES_NODE_NAME"), "spec.nodeName")
        self.assertEqual(refs.get("POD_NAMESPACE"), "metadata.namespace")

    def test_repair_mode_settings(self):
        mode = self.variant["mode"]
        flags = {k: go_bool(self.r.config[k]) for k in
                 ("REPAIR_ENABLED", "REPAIR_REPAIR_PODS", "REPAIR_DELETE_PODS", "REPAIR_LABEL_PODS")}
        self.assertEqual(flags, {
            "REPAIR_ENABLED": mode != "off",
            "REPAIR_REPAIR_PODS": mode == "repair",
            "REPAIR_DELETE_PODS": mode == "delete",
            "REPAIR_LABEL_PODS": mode == "label",
        })
        self.assertEqual(self.r.config["REPAIR_INIT_CONTAINER_NAME"], "istio-validation")
        self.assertEqual(self.r.config["REPAIR_BROKEN_POD_LABEL_KEY"], "cni.istio.io/uninitialized")
        self.assertEqual(self.r.config["REPAIR_BROKEN_POD_LABEL_VALUE"], "true")
        # Nothing runs the node's iptables any more (issue 40): no node root is named in any mode.
        self.assertNotIn("ISTIO_CNI_HOST_ROOT", self.r.config)

    def test_chained_mode(self):
        self.assertEqual(go_bool(self.r.config["CHAINED_CNI_PLUGIN"]), self.variant["chained"])
        if not self.variant["chained"]:
            self.assertEqual(self.r.config.get("CNI_CONF_NAME"), "istio-cni.conf")

    # --- pod -----------------------------------------------------------------------------------------------
    def test_scheduling(self):
        spec = self.r.pod["spec"]
        self.assertEqual(spec["priorityClassName"], "system-node-critical")
        self.assertEqual(spec["nodeSelector"], {"kubernetes.io/os": "linux"})
        tol = spec["tolerations"]
        self.assertIn({"effect": "NoSchedule", "operator": "Exists"}, tol)
        self.assertIn({"effect": "NoExecute", "operator": "Exists"}, tol)
        self.assertIn({"key": "CriticalAddonsOnly", "operator": "Exists"}, tol)
        for host_ns in ("hostNetwork", "hostPID", "hostIPC"):
            self.assertNotIn(host_ns, spec, f"{host_ns} is not needed")
        self.assertEqual(self.r.ds["metadata"]["namespace"], "kube-system")
        excluded = [n.strip() for n in self.r.config["EXCLUDE_NAMESPACES"].split(",")]
        self.assertIn(self.r.ds["metadata"]["namespace"], excluded, "the plugin must skip istio-cni-node's own pods")
        self.assertEqual(self.r.ds["spec"]["updateStrategy"]["type"], "RollingUpdate")
        self.assertEqual(self.r.pod["metadata"]["labels"]["sidecar.istio.io/inject"], "false")

    def test_image(self):
        self.assertEqual(self.r.c["image"], f"localhost/install-cni:{crate_version()}")
        self.assertEqual(self.r.c["imagePullPolicy"], "IfNotPresent")
        self.assertNotIn("command", self.r.c, "the image's entrypoint is install-cni")

    def test_probe_and_metrics_match_the_installer(self):
        defaults = installer_defaults()
        health = int(defaults["HEALTH_PORT"])
        monitoring = int(self.r.config.get("MONITORING_PORT", defaults["MONITORING_PORT"]))
        probe = self.r.c["readinessProbe"]["httpGet"]
        self.assertEqual((probe["path"], probe["port"]), ("/readyz", health))
        self.assertNotIn("livenessProbe", self.r.c)
        self.assertEqual(self.r.c["ports"], [{"name": "metrics", "containerPort": monitoring, "protocol": "TCP"}])
        ann = self.r.pod["metadata"]["annotations"]
        self.assertEqual(ann["prometheus.io/scrape"], "true")
        self.assertEqual(ann["prometheus.io/port"], str(monitoring))
        self.assertEqual(ann["prometheus.io/path"], "/metrics")

    def test_mounts(self):
        defaults = installer_defaults()
        volumes = {v["name"]: v for v in self.r.pod["spec"]["volumes"]}
        mounts = {m["mountPath"]: m for m in self.r.c["volumeMounts"]}
        self.assertEqual({m["name"] for m in mounts.values()}, set(volumes), "every volume mounted exactly once")
        self.assertEqual(len(mounts), len(volumes))

        def host(path_in_container):
            self.assertIn(path_in_container, mounts, f"no mount at {path_in_container}")
            return volumes[mounts[path_in_container]["name"]]["hostPath"]["path"]

        # The container paths are install-cni's defaults (none is overridden in the ConfigMap).
        for var in ("CNI_BIN_DIR", "MOUNTED_CNI_NET_DIR", "CNI_AGENT_RUN_DIR"):
            self.assertNotIn(var, self.r.config)
        self.assertEqual(host(defaults["CNI_BIN_DIR"]), self.variant["bin"])
        self.assertEqual(host(defaults["MOUNTED_CNI_NET_DIR"]), self.variant["conf"])
        self.assertEqual(host(defaults["CNI_AGENT_RUN_DIR"]), "/var/run/istio-cni")
        self.assertEqual(self.r.config.get("CNI_NET_DIR", defaults["CNI_NET_DIR"]), self.variant["conf"],
                         "CNI_NET_DIR names the host conf dir")
        proc = host_proc_default()
        if self.variant["mode"] == "repair":
            self.assertEqual(host(proc), "/proc")
            self.assertIs(mounts[proc].get("readOnly"), True)
            self.assertEqual(volumes[mounts[proc]["name"]]["hostPath"]["type"], "Directory")
            self.assertEqual(len(mounts), 4)
        else:
            self.assertNotIn(proc, mounts, "host /proc only for repair in place")
            self.assertEqual(len(mounts), 3)
        for m in mounts.values():
            if m["mountPath"] != proc:
                self.assertNotIn("readOnly", m)

    def test_capabilities(self):
        sc = self.r.c["securityContext"]
        self.assertIs(sc["privileged"], False)
        self.assertEqual(sc["runAsUser"], 0)
        self.assertIs(sc["readOnlyRootFilesystem"], True)
        self.assertEqual(sc["capabilities"]["drop"], ["ALL"])
        add = set(sc["capabilities"].get("add") or [])
        if self.variant["mode"] == "repair":
            self.assertEqual(add, REPAIR_CAPS)
            self.assertNotIn("allowPrivilegeEscalation", sc)
            # Upstream's chart's set, and only what the README explains beyond it.
            self.assertEqual(add - upstream_chart_caps(), BEYOND_UPSTREAM_CAPS)
            self.assertEqual(upstream_chart_caps() - add, set())
        else:
            self.assertEqual(add, set(), "no capability without repair in place")
            self.assertIs(sc["allowPrivilegeEscalation"], False)
        self.assertEqual(self.r.pod["spec"]["securityContext"], {"seccompProfile": {"type": "RuntimeDefault"}})
        if self.variant.get("multus"):
            self.assertEqual(sc["seLinuxOptions"], {"type": "spc_t"})
        else:
            self.assertNotIn("seLinuxOptions", sc)

    def test_apparmor_unconfined(self):
        # Both forms, as upstream's chart (annotation) and Kubernetes >= 1.30 (field); they must agree.
        self.assertEqual(self.r.pod["metadata"]["annotations"][APPARMOR_ANNOTATION], "unconfined")
        self.assertEqual(self.r.c["securityContext"]["appArmorProfile"], {"type": "Unconfined"})

    def test_untaint_controller_finds_the_pod(self):
        # istiod's untaint controller lists pods labelled k8s-app=istio-cni-node in its CNI namespace and
        # untaints a node once that pod is Ready there: the label on the pod (and the selector), a
        # readiness probe that reports the installer's readiness, and the namespace the README tells
        # istiod about (pilot.taint.namespace).
        k, v = UNTAINT_LABEL
        self.assertEqual(self.r.pod["metadata"]["labels"].get(k), v)
        self.assertEqual(self.r.ds["spec"]["selector"]["matchLabels"].get(k), v)
        self.assertEqual(self.r.c["readinessProbe"]["httpGet"]["path"], "/readyz")
        # The pod must run on a tainted node: a toleration that covers NOT_READY_TAINT (NoSchedule).
        tol = self.r.pod["spec"]["tolerations"]
        self.assertTrue(any(t.get("operator") == "Exists" and "key" not in t and t.get("effect") == "NoSchedule"
                            for t in tol), f"no toleration for {NOT_READY_TAINT}")
        ns = self.r.ds["metadata"]["namespace"]
        readme = (MANIFESTS / "README.md").read_text()
        self.assertIn(f"pilot.taint.namespace={ns}", readme)
        self.assertIn(f"{k}: {v}", readme)

    def test_grace_period_and_resources(self):
        spec = self.r.pod["spec"]
        self.assertEqual(spec["terminationGracePeriodSeconds"], 30, "upstream's chart value")
        res = self.r.c["resources"]
        self.assertEqual(set(res), {"requests"}, "requests only: a limit can kill or throttle the installer")
        readme = (MANIFESTS / "README.md").read_text()
        self.assertIn(f"terminationGracePeriodSeconds: {spec['terminationGracePeriodSeconds']}", readme)
        for k, v in res["requests"].items():
            self.assertIn(f"{k} {v}", readme, "resources documented in manifests/README.md")

    def test_openshift_multus(self):
        nads = by_kind(self.r.docs, "NetworkAttachmentDefinition")
        if not self.variant.get("multus"):
            self.assertEqual(nads, [])
            return
        self.assertEqual(nads, [{"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
                                 "metadata": {"name": "istio-cni", "namespace": "default"}}])
        # multus finds the standalone config by the NetworkAttachmentDefinition's name
        self.assertEqual(self.r.config["CNI_CONF_NAME"], nads[0]["metadata"]["name"] + ".conf")


def _case(name, path, variant):
    return type(name, (ManifestChecks, unittest.TestCase), {"path": path, "variant": variant})


for _rel, _v in VARIANTS.items():
    _n = "Test_" + re.sub(r"\W", "_", _rel)
    globals()[_n] = _case(_n, MANIFESTS / _rel, _v)

_composed_root = tempfile.TemporaryDirectory(prefix="istio-cni-kustomize-")
for _name, (_components, _v) in COMPOSED.items():
    _d = Path(_composed_root.name) / _name
    _d.mkdir()
    (_d / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        f"resources:\n  - {os.path.relpath(MANIFESTS / 'base', _d)}\n"
        "components:\n" + "".join(f"  - {os.path.relpath(MANIFESTS / 'components' / c, _d)}\n" for c in _components)
    )
    _n = "TestComposed_" + re.sub(r"\W", "_", _name)
    globals()[_n] = _case(_n, _d, _v)


class TestCoverage(unittest.TestCase):
    def test_every_overlay_and_component_is_tested(self):
        overlays = {f"overlays/{p.name}" for p in (MANIFESTS / "overlays").iterdir() if p.is_dir()}
        self.assertEqual(overlays, set(VARIANTS) - {"base"})
        used = {c for cs, _ in COMPOSED.values() for c in cs} | {o.split("/")[1] for o in overlays}
        components = {p.name for p in (MANIFESTS / "components").iterdir() if p.is_dir()}
        self.assertEqual(components - used, {"no-repair-in-place"}, "a component no test renders")

    def test_rbac_covers_exactly_what_the_client_can_do(self):
        src = (REPO / "src" / "kube" / "client.rs").read_text()
        i = src.find("impl Client")
        self.assertGreaterEqual(i, 0, "no impl Client in src/kube/client.rs")
        fns = set(re.findall(r"^    pub fn (\w+)", src[i:], re.M))
        self.assertEqual(fns - CLIENT_NON_CALLS - set(CLIENT_CALLS), set(),
                         "new Kubernetes client calls: add them to CLIENT_CALLS and to the role that needs them")
        possible = set(CLIENT_CALLS.values())
        self.assertLessEqual(PLUGIN_RULES, possible, "a granted verb no code path uses")
        for rules in REPAIR_RULES.values():
            self.assertLessEqual(rules or set(), possible, "a granted verb no code path uses")

    def test_broken_kustomization_fails(self):
        # The render check can fail: a patch against an object that does not exist is an error.
        with tempfile.TemporaryDirectory() as d:
            Path(d, "kustomization.yaml").write_text(
                f"resources:\n  - {os.path.relpath(MANIFESTS / 'base', d)}\npatches:\n  - patch: |-\n"
                "      apiVersion: apps/v1\n      kind: DaemonSet\n      metadata:\n        name: nope\n"
            )
            with self.assertRaises(AssertionError):
                render(Path(d))

    def test_schema_validation_can_fail(self):
        r = Rendered(render(MANIFESTS / "base"))
        bad = dict(r.ds, spec=dict(r.ds["spec"], updateStrategy={"type": "RollingUpdate", "bogus": 1}))
        with self.assertRaises(kubernetes_validate.ValidationError):
            kubernetes_validate.validate(bad, K8S_VERSIONS[-1], strict=True)


class TestReadme(unittest.TestCase):
    SEED_OPTIONS = [
        "hub", "tag", "pullPolicy", "logLevel", "excludeNamespaces", "cniBinDir", "cniConfDir", "cniConfFileName",
        "chained", "podAnnotations", "repair.enabled", "repair.initContainerName", "repair.labelPods",
        "repair.deletePods", "repair.brokenPodLabelKey", "repair.brokenPodLabelValue", "repair.hub", "repair.tag",
    ]

    def test_every_seed_option_has_a_table_row(self):
        rows = [l for l in (MANIFESTS / "README.md").read_text().splitlines() if l.startswith("|")]
        firsts = set()
        for row in rows:
            cell = row.split("|")[1]
            firsts.update(re.findall(r"`([^`]+)`", cell))
        missing = [o for o in self.SEED_OPTIONS if o not in firsts]
        self.assertEqual(missing, [], "seed options without a row in manifests/README.md")

    def test_aks_exclusions_are_the_seed_list(self):
        # The list the AKS section gives is what upstream's chart renders for the seed blog's exclusions.
        docs = [d for d in yaml.safe_load_all((conformance_dir() / "chart" / "aks-seed.yaml").read_text()) if d]
        want = one(docs, "ConfigMap", "istio-cni-config")["data"]["EXCLUDE_NAMESPACES"]
        readme = (MANIFESTS / "README.md").read_text()
        self.assertIn(f"EXCLUDE_NAMESPACES={want}", readme)

    def test_replacing_upstream_names_exactly_the_shared_objects(self):
        # "Replacing upstream's DaemonSet": the objects both install under the same kind, namespace and
        # name (the second apply takes them over) are the ones the README names, and no other.
        def key(d):
            return d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]
        ours = {key(d) for d in render(MANIFESTS / "base")}
        chart = (conformance_dir() / "chart" / "default.yaml").read_text()
        theirs = {key(d) for d in yaml.safe_load_all(chart) if d}
        shared = {name for _, _, name in ours & theirs}
        ds_ns = {ns for kind, ns, _ in ours | theirs if kind == "DaemonSet"}
        self.assertEqual(ds_ns, {"istio-system", "kube-system"}, "the README says the DaemonSets' namespaces differ")
        readme = (MANIFESTS / "README.md").read_text()
        section = readme.split("## Replacing upstream's DaemonSet")[1].split("**Upstream to ours**")[0]
        named = set(re.findall(r"`(istio-cni[\w-]*)`", section))
        self.assertEqual(named, shared)

    def test_istiod_side_is_documented(self):
        readme = (MANIFESTS / "README.md").read_text()
        for fact in ("pilot.cni.enabled", "values.istio_cni.enabled", "istio-validation", "istio-init",
                     "pilot.taint.enabled", NOT_READY_TAINT, "k8s.v1.cni.cncf.io/networks", "runAsUser: 1337",
                     "traffic.sidecar.istio.io/excludeOutboundIPRanges", APPARMOR_ANNOTATION):
            self.assertIn(fact, readme)
        # The capabilities the README names for repair in place are the base's.
        r = Rendered(render(MANIFESTS / "base"))
        for cap in r.c["securityContext"]["capabilities"]["add"]:
            self.assertIn(f"`{cap}`", readme)

    def test_readme_paths_exist(self):
        text = (MANIFESTS / "README.md").read_text()
        for p in set(re.findall(r"manifests/[\w./-]+", text)):
            p = p.rstrip(".")
            self.assertTrue((MANIFESTS.parent / p).exists(), f"manifests/README.md names {p}, which does not exist")


if __name__ == "__main__":
    unittest.main()
