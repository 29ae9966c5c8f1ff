"""The chart on the real API server: server-side apply, helm install, helm upgrade.

The control plane has no scheduler or kubelet, so the operator Deployment never
gets a pod here; what is proven is that the API server accepts every object the
chart renders (schemas, RBAC, CRs against the generated CRDs), and that an
upgrade from the previous chart version keeps NodeAcceptance objects and node
state. The operator itself runs under the chart's RBAC in
tests/integration/test_chart_rbac.py and in the operator's integration tests.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuaccept.testsupport.chart_rbac import (
    apply_crds,
    apply_manifests,
    chart_dir,
    chart_version,
    helm,
    previous_and_next_chart,
    render_chart,
)
from gpuaccept.testsupport.controlplane import ControlPlane

pytestmark = pytest.mark.integration

HA_VALUES = chart_dir() / "ci" / "ha-values.yaml"
GROUP_VERSION = "gpuaccept.io/v1alpha1"

# Stand-ins for the Prometheus Operator CRDs, so that the ServiceMonitor and
# PrometheusRule the HA values render can be applied (the real CRDs' schemas are
# not checked here).
MONITORING_CRDS = [
    {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.monitoring.coreos.com"},
        "spec": {
            "group": "monitoring.coreos.com",
            "scope": "Namespaced",
            "names": {"kind": kind, "plural": plural, "singular": kind.lower()},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }
    for kind, plural in (
        ("ServiceMonitor", "servicemonitors"),
        ("PrometheusRule", "prometheusrules"),
    )
]


@pytest.fixture(scope="module")
def cp(control_plane: ControlPlane) -> ControlPlane:
    apply_crds(control_plane)
    return control_plane


def _unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def _delete(cp: ControlPlane, objs: list[dict[str, Any]]) -> None:
    body = json.dumps({"apiVersion": "v1", "kind": "List", "items": objs})
    cp.kubectl("delete", "--ignore-not-found", "--wait=false", "-f", "-", input=body, check=False)


@pytest.mark.parametrize("values", [None, HA_VALUES], ids=["defaults", "ha-values"])
def test_rendered_manifests_apply_server_side(cp: ControlPlane, values: Path | None) -> None:
    release = _unique("ssa")
    namespace = _unique("gpuaccept-ssa")
    policy = _unique("ssa-policy")
    docs = render_chart(
        release=release,
        namespace=namespace,
        values_files=[values] if values else [],
        set_values={"fullnameOverride": release, "defaultPolicy.name": policy},
    )
    # What `helm install` creates: not the `helm test` hooks (test_kubeconform.py
    # validates those; they run on `helm test` only).
    docs = [d for d in docs if "helm.sh/hook" not in (d["metadata"].get("annotations") or {})]
    if any(d["kind"] in {"ServiceMonitor", "PrometheusRule"} for d in docs):
        apply_manifests(cp, MONITORING_CRDS)
        cp.kubectl(
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "crd/servicemonitors.monitoring.coreos.com",
            "crd/prometheusrules.monitoring.coreos.com",
        )
    cp.kubectl("create", "namespace", namespace)
    try:
        out = apply_manifests(cp, docs, field_manager="helm-template-test").stdout
        for doc in docs:
            assert doc["metadata"]["name"] in out, f"{doc['kind']} not applied:\n{out}"
        stored = json.loads(cp.kubectl("get", "nodeacceptancepolicy", policy, "-o", "json").stdout)
        assert stored["spec"]["dryRun"] is (values is None)
        deployment = json.loads(
            cp.kubectl("-n", namespace, "get", "deployment", release, "-o", "json").stdout
        )
        assert deployment["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"] is True
    finally:
        _delete(cp, [d for d in docs if d["kind"] != "Namespace"])
        cp.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


@pytest.fixture
def release(cp: ControlPlane) -> Iterator[tuple[str, str]]:
    name, namespace = _unique("it"), _unique("gpuaccept-it")
    yield name, namespace
    helm("uninstall", name, "-n", namespace, kubeconfig=cp.kubeconfig, check=False)
    cp.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def test_install_then_upgrade_keeps_node_acceptances(
    cp: ControlPlane, tmp_path: Path, release: tuple[str, str]
) -> None:
    name, namespace = release
    previous, upgraded, where = previous_and_next_chart(tmp_path)
    policy = f"{name}-policy"
    common = ["-n", namespace, "--set", f"defaultPolicy.name={policy}"]

    helm("install", name, str(previous), "--create-namespace", *common, kubeconfig=cp.kubeconfig)
    status = json.loads(
        helm("status", name, "-n", namespace, "-o", "json", kubeconfig=cp.kubeconfig).stdout
    )
    assert status["info"]["status"] == "deployed", where
    notes = status["info"].get("notes", "")
    assert "DRY RUN" in notes, notes
    assert f"kubectl -n {namespace} rollout status deployment/{name}-gpuaccept" in notes
    stored = json.loads(cp.kubectl("get", "nap", policy, "-o", "json").stdout)
    assert stored["spec"]["dryRun"] is True

    # The operator's state: a node under the quarantine taint and its NodeAcceptance.
    node = f"{name}-gpu-0"
    taint = {"key": "gpuaccept.io/quarantined", "value": "true", "effect": "NoSchedule"}
    apply_manifests(
        cp,
        [
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": node, "labels": {"nvidia.com/gpu.present": "true"}},
                "spec": {"taints": [taint]},
            },
            {
                "apiVersion": GROUP_VERSION,
                "kind": "NodeAcceptance",
                "metadata": {"name": node},
                "spec": {"nodeName": node},
            },
        ],
        field_manager="gpuaccept-operator",
    )
    na_status = {"phase": "Quarantined", "reason": "LowBusBandwidth", "policy": policy}
    cp.kubectl(
        "patch", "na", node, "--subresource=status", "--type=merge",
        "-p", json.dumps({"status": na_status}),
    )  # fmt: skip
    try:
        # The documented upgrade: CRDs first (helm never upgrades crds/), then the chart.
        cp.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(upgraded / "crds"))
        helm(
            "upgrade", name, str(upgraded), *common, "--set", "operator.replicas=2",
            kubeconfig=cp.kubeconfig,
        )  # fmt: skip
        history = json.loads(
            helm("history", name, "-n", namespace, "-o", "json", kubeconfig=cp.kubeconfig).stdout
        )
        assert [h["status"] for h in history] == ["superseded", "deployed"]
        assert history[-1]["chart"] == f"gpuaccept-{chart_version(upgraded)}"

        na = json.loads(cp.kubectl("get", "na", node, "-o", "json").stdout)
        assert na["status"]["phase"] == "Quarantined"
        assert na["status"]["reason"] == "LowBusBandwidth"
        stored_node = json.loads(cp.kubectl("get", "node", node, "-o", "json").stdout)
        assert taint in stored_node["spec"]["taints"]
        deployment = json.loads(
            cp.kubectl(
                "-n", namespace, "get", "deployment", name + "-gpuaccept", "-o", "json"
            ).stdout
        )
        assert deployment["spec"]["replicas"] == 2

        # Uninstalling leaves the CRDs, hence the NodeAcceptances, in place.
        helm("uninstall", name, "-n", namespace, kubeconfig=cp.kubeconfig)
        assert cp.kubectl("get", "na", node, check=False).returncode == 0
        assert cp.kubectl("get", "crd", "nodeacceptances.gpuaccept.io").returncode == 0
    finally:
        cp.kubectl("delete", "na", node, "--ignore-not-found")
        cp.kubectl("delete", "node", node, "--ignore-not-found")


def test_install_refuses_bad_values(cp: ControlPlane) -> None:
    proc = helm(
        "install", _unique("bad"), str(chart_dir()), "-n", "default", "--dry-run=server",
        "--set", "operator.replicas=-3", kubeconfig=cp.kubeconfig, check=False,
    )  # fmt: skip
    assert proc.returncode != 0
    assert "operator/replicas" in proc.stderr or "operator.replicas" in proc.stderr


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        # the CRD's schema, as values.schema.json holds it (hack/chart/values_schema.py):
        # refused before anything is sent to the API server
        (
            "defaultPolicy.probe.pcieLink.minGeneration=9",
            "/defaultPolicy/probe/pcieLink/minGeneration",
        ),
        ("defaultPolicy.probe.pcieLnk.enabled=false", "additional properties 'pcieLnk'"),
        # a CEL rule (not expressible in JSON Schema): the API server's
        ("defaultPolicy.quarantine.taintKey=gpuaccept.io/pending", "must differ"),
    ],
)
def test_install_refuses_a_bad_policy_with_the_crd_message(
    cp: ControlPlane, release: tuple[str, str], setting: str, message: str
) -> None:
    """A bad policy field fails the install naming the field: the values schema
    (the CRD's own, generated) refuses it first, and the API server applies the
    CRD's CEL rules; no policy is created."""
    name, namespace = release
    proc = helm(
        "install", name, str(chart_dir()), "-n", namespace, "--create-namespace",
        "--set", f"defaultPolicy.name={name}", "--set", setting,
        kubeconfig=cp.kubeconfig, check=False,
    )  # fmt: skip
    assert proc.returncode != 0, proc.stdout
    assert message in proc.stderr, proc.stderr
    assert cp.kubectl("get", "nap", name, check=False).returncode != 0
