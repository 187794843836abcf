"""manifests/monitoring as kubectl renders it: a PodMonitor that selects the base DaemonSet's pods and
port in their namespace, the PrometheusRule holding exactly the plain rules file's groups (the drift check
again, after kustomize), and the dashboard ConfigMap holding grafana-dashboard.json under Grafana's sidecar
label; the ConfigMap validates against the Kubernetes schemas. (promtool, the unit tests and a real Prometheus:
tests/unprivileged/monitoring_*.rs and tests/root/monitoring_e2e.rs.)"""

import json
import os
import tempfile
import unittest
from pathlib import Path

import kubernetes_validate
import yaml

from common import MANIFESTS, render

KIT = MANIFESTS / "monitoring"


def one(docs, kind):
    found = [d for d in docs if d["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


class TestMonitoringKit(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.docs = render(KIT)
        base = render(MANIFESTS / "base")
        cls.ds = one(base, "DaemonSet")
        cls.pod = cls.ds["spec"]["template"]

    def test_only_expected_kinds(self):
        self.assertEqual(sorted(d["kind"] for d in self.docs), ["ConfigMap", "PodMonitor", "PrometheusRule"])
        for d in self.docs:
            self.assertEqual(d["metadata"]["namespace"], self.ds["metadata"]["namespace"])
            self.assertEqual(d["metadata"]["labels"]["app.kubernetes.io/name"], "istio-cni-node")

    def test_pod_monitor_selects_the_daemonset_pods_and_port(self):
        pm = one(self.docs, "PodMonitor")
        self.assertEqual(pm["apiVersion"], "monitoring.coreos.com/v1")
        spec = pm["spec"]
        labels = self.pod["metadata"]["labels"]
        for k, v in spec["selector"]["matchLabels"].items():
            self.assertEqual(labels.get(k), v, f"selector {k}")
        self.assertEqual(spec["namespaceSelector"], {"matchNames": [self.ds["metadata"]["namespace"]]})
        self.assertIn(spec["jobLabel"], labels)
        ports = {p["name"]: p for p in self.pod["spec"]["containers"][0]["ports"]}
        (ep,) = spec["podMetricsEndpoints"]
        self.assertIn(ep["port"], ports)
        self.assertEqual(ep["path"], self.pod["metadata"]["annotations"]["prometheus.io/path"])
        self.assertEqual(str(ports[ep["port"]]["containerPort"]), self.pod["metadata"]["annotations"]["prometheus.io/port"])
        self.assertIn({"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node"}, ep["relabelings"])

    def test_prometheus_rule_holds_the_plain_rules_files_groups(self):
        pr = one(self.docs, "PrometheusRule")
        self.assertEqual(pr["apiVersion"], "monitoring.coreos.com/v1")
        plain = yaml.safe_load((KIT / "prometheus" / "istio-cni-node.rules.yaml").read_text())
        self.assertEqual(pr["spec"], plain)
        names = [r.get("alert") or r.get("record") for g in plain["groups"] for r in g["rules"]]
        self.assertEqual(len(names), len(set(names)), "rule names unique")

    def test_dashboard_config_map(self):
        cm = one(self.docs, "ConfigMap")
        self.assertEqual(cm["metadata"]["name"], "istio-cni-node-dashboard", "a fixed name, no hash suffix")
        self.assertEqual(cm["metadata"]["labels"]["grafana_dashboard"], "1")
        (key,) = cm["data"]
        self.assertTrue(key.endswith(".json"))
        self.assertEqual(json.loads(cm["data"][key]), json.loads((KIT / "grafana-dashboard.json").read_text()))
        for version in ["1.30.0", kubernetes_validate.latest_version()]:
            kubernetes_validate.validate(cm, version, strict=True)

    def test_drift_after_kustomize_fails(self):
        # The comparison above can fail: a PrometheusRule whose groups differ from the plain file's.
        with tempfile.TemporaryDirectory() as d:
            for f in KIT.rglob("*"):
                if f.is_file():
                    dst = Path(d) / f.relative_to(KIT)
                    dst.parent.mkdir(parents=True, exist_ok=True)
                    dst.write_bytes(f.read_bytes())
            pr = Path(d) / "prometheusrule.yaml"
            pr.write_text(pr.read_text().replace("for: 5m", "for: 6m", 1))
            rendered = one(render(Path(d)), "PrometheusRule")
            plain = yaml.safe_load((Path(d) / "prometheus" / "istio-cni-node.rules.yaml").read_text())
            self.assertNotEqual(rendered["spec"], plain)


if __name__ == "__main__":
    unittest.main()
