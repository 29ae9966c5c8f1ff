"""``gpuaccept cleanup`` on the real kube-apiserver: a dry run changes nothing; with
``--yes`` it removes exactly what gpuaccept left (its own and recorded keys, the
condition, probe pods, the Lease, the NodeAcceptances) and nothing else; it refuses
while an operator holds the Lease; ``--crds`` deletes the CRDs.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from gpuaccept.cli import main as gpuaccept_main
from gpuaccept.operator.cleanup import main as cleanup_main
from gpuaccept.testsupport.chart_rbac import apply_crds
from gpuaccept.testsupport.controlplane import ControlPlane

pytestmark = pytest.mark.integration

NODE = "cleanup-gpu-1"
NAMESPACE = "cleanup-system"
LEASE = "cleanup-gpuaccept"
API = "gpuaccept.io/v1alpha1"
KEPT_TAINT = {"key": "other.example/keep", "value": "x", "effect": "NoSchedule"}


def _create(cp: ControlPlane, obj: dict[str, Any]) -> None:
    cp.kubectl("create", "-f", "-", input=json.dumps(obj))


def _get(cp: ControlPlane, *what: str) -> dict[str, Any]:
    obj: dict[str, Any] = json.loads(cp.kubectl("get", *what, "-o", "json").stdout)
    return obj


def _exists(cp: ControlPlane, *what: str) -> bool:
    return cp.kubectl("get", *what, check=False).returncode == 0


def _lease(cp: ControlPlane, renewed: datetime) -> None:
    lease = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": LEASE, "namespace": NAMESPACE},
        "spec": {
            "holderIdentity": "gpuaccept-7d9-abc_1a2b3c",
            "leaseDurationSeconds": 15,
            "renewTime": renewed.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        },
    }
    cp.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=json.dumps(lease))


FENCE_RULE = "gpuaccept-fence-cleanup-node"  # a fenced GPU's rule (core/fencerules.py)
OTHER_RULE = "someone-elses-rule"


@pytest.fixture
def leftovers(control_plane: ControlPlane) -> Iterator[ControlPlane]:
    """A node, NodeAcceptance, Lease and probe pod as an uninstalled gpuaccept leaves them."""
    cp = control_plane
    apply_crds(cp)
    cp.kubectl("delete", "node", NODE, "--ignore-not-found")
    cp.kubectl("delete", "nodeacceptance", NODE, "--ignore-not-found")
    cp.kubectl("create", "namespace", NAMESPACE, check=False)
    # No controller manager here: the namespace's default ServiceAccount is ours to make.
    cp.kubectl("create", "serviceaccount", "default", "-n", NAMESPACE, check=False)
    cp.kubectl("delete", "pods", "--all", "-n", NAMESPACE, "--grace-period=0", "--force")
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": NODE,
            "labels": {
                "gpuaccept.io/acceptance": "Quarantined",
                "example.com/gpu-bad": "true",  # recorded as applied: removed
                "example.com/gpu-pool": "a",  # same prefix, not recorded: kept
                "nvidia.com/gpu.present": "true",
            },
            "annotations": {"gpuaccept.io/reprobe": "1", "example.com/note": "kept"},
        },
        "spec": {
            "taints": [
                {"key": "gpuaccept.io/quarantined", "value": "true", "effect": "NoSchedule"},
                {"key": "example.com/gpu-q", "value": "true", "effect": "NoSchedule"},
                KEPT_TAINT,
            ]
        },
    }
    _create(cp, node)
    condition = {"type": "GPUAcceptance", "status": "False", "reason": "Quarantined"}
    cp.kubectl(
        "patch", "node", NODE, "--subresource=status", "--type=strategic",
        "-p", json.dumps({"status": {"conditions": [condition]}}),
    )  # fmt: skip
    _create(cp, {"apiVersion": API, "kind": "NodeAcceptance",
                 "metadata": {"name": NODE}, "spec": {"nodeName": NODE}})  # fmt: skip
    # a forged record too: KEPT_TAINT's key, under no owned prefix (issue 42 item 10)
    status = {
        "appliedTaints": ["example.com/gpu-q", KEPT_TAINT["key"]],
        "appliedLabels": ["example.com/gpu-bad"],
    }
    cp.kubectl(
        "patch", "nodeacceptance", NODE, "--subresource=status", "--type=merge",
        "-p", json.dumps({"status": status}),
    )  # fmt: skip
    _lease(cp, datetime.now(UTC) - timedelta(minutes=5))
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "gpuaccept-probe-cleanup-1",
            "namespace": NAMESPACE,
            "labels": {
                "app.kubernetes.io/managed-by": "gpuaccept",
                "app.kubernetes.io/component": "probe",
            },
        },
        "spec": {
            "automountServiceAccountToken": False,
            "containers": [{"name": "probe", "image": "probe:1"}],
        },
    }
    _create(cp, pod)
    for name, key in ((FENCE_RULE, "gpuaccept.io/fenced"), (OTHER_RULE, "example.com/broken")):
        cp.kubectl("delete", "devicetaintrule", name, "--ignore-not-found")
        labels = {"app.kubernetes.io/managed-by": "gpuaccept"} if name == FENCE_RULE else {}
        if name == FENCE_RULE:
            labels["app.kubernetes.io/component"] = "gpu-fence"
        _create(cp, {
            "apiVersion": "resource.k8s.io/v1", "kind": "DeviceTaintRule",
            "metadata": {"name": name, "labels": labels},
            "spec": {"deviceSelector": {"driver": "gpu.nvidia.com", "pool": NODE,
                                        "device": "gpu-5"},
                     "taint": {"key": key, "value": "x", "effect": "NoSchedule"}},
        })  # fmt: skip
    yield cp
    cp.kubectl("delete", "devicetaintrule", FENCE_RULE, OTHER_RULE, "--ignore-not-found")
    cp.kubectl("delete", "node", NODE, "--ignore-not-found")
    cp.kubectl("delete", "nodeacceptance", NODE, "--ignore-not-found", check=False)
    # The namespace stays: without a namespace controller it would never finish terminating.
    cp.kubectl("delete", "pods,leases", "--all", "-n", NAMESPACE, "--grace-period=0", "--force")
    if not _exists(cp, "crd", "nodeacceptances.gpuaccept.io"):
        apply_crds(cp)  # --crds deleted them (and waited): later tests need them


def _cleanup(cp: ControlPlane, *args: str) -> tuple[int, str]:
    out = io.StringIO()
    argv = ["--kubeconfig", str(cp.kubeconfig), "--namespace", NAMESPACE, "--lease-name", LEASE,
            "--owned-key-prefix", "example.com/gpu-"]  # fmt: skip
    code = cleanup_main([*argv, *args], out=out)
    return code, out.getvalue()


def test_dry_run_then_cleanup_removes_exactly_what_gpuaccept_left(
    leftovers: ControlPlane,
) -> None:
    cp = leftovers
    before = _get(cp, "node", NODE)
    code, text = _cleanup(cp)
    assert code == 0
    for line in (
        f"would remove taint gpuaccept.io/quarantined from node {NODE}",
        f"would remove taint example.com/gpu-q from node {NODE}",
        f"would remove label gpuaccept.io/acceptance from node {NODE}",
        f"would remove label example.com/gpu-bad from node {NODE}",
        f"would remove annotation gpuaccept.io/reprobe from node {NODE}",
        f"would remove condition GPUAcceptance from node {NODE}",
        f"would remove probe pod {NAMESPACE}/gpuaccept-probe-cleanup-1",
        f"would remove DeviceTaintRule {FENCE_RULE}",
        f"would remove Lease {NAMESPACE}/{LEASE}",
        f"would remove NodeAcceptance {NODE}",
        f"kept taint {KEPT_TAINT['key']} of node {NODE}: recorded as applied in its "
        "NodeAcceptance, but under no owned prefix (--owned-key-prefix)",
    ):
        assert line in text.splitlines(), text
    assert "run again with --yes" in text
    after = _get(cp, "node", NODE)
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert _exists(cp, "nodeacceptance", NODE)

    code, text = _cleanup(cp, "--yes")
    assert code == 0, text
    node = _get(cp, "node", NODE)
    assert node["spec"]["taints"] == [KEPT_TAINT]
    assert node["metadata"]["labels"] == {
        "example.com/gpu-pool": "a",
        "nvidia.com/gpu.present": "true",
    }
    assert node["metadata"]["annotations"] == {"example.com/note": "kept"}
    types = [c["type"] for c in node["status"].get("conditions") or []]
    assert "GPUAcceptance" not in types
    assert not _exists(cp, "nodeacceptance", NODE)
    assert not _exists(cp, "lease", LEASE, "-n", NAMESPACE)
    assert not _exists(cp, "pod", "gpuaccept-probe-cleanup-1", "-n", NAMESPACE)
    assert not _exists(cp, "devicetaintrule", FENCE_RULE)  # a fenced GPU back in service
    assert _exists(cp, "devicetaintrule", OTHER_RULE)  # another's rule: not ours
    assert _exists(cp, "crd", "nodeacceptances.gpuaccept.io")

    # Idempotent: nothing of ours is left on this node.
    code, text = _cleanup(cp, "--yes")
    assert code == 0
    assert NODE not in text


def test_refuses_while_an_operator_holds_the_lease(leftovers: ControlPlane) -> None:
    cp = leftovers
    _lease(cp, datetime.now(UTC))
    code, text = _cleanup(cp, "--yes")
    assert code == 1
    assert text == ""
    assert _get(cp, "node", NODE)["spec"]["taints"][0]["key"] == "gpuaccept.io/quarantined"
    assert _exists(cp, "nodeacceptance", NODE)
    # A dry run still reports, and says why --yes would refuse.
    code, text = _cleanup(cp)
    assert code == 0
    assert "holds the Lease" in text


def test_crds_are_deleted_only_when_asked(leftovers: ControlPlane) -> None:
    cp = leftovers
    code, text = _cleanup(cp, "--yes", "--crds")
    assert code == 0, text
    assert "removed CustomResourceDefinition nodeacceptancepolicies.gpuaccept.io" in text
    cp.kubectl("wait", "--for=delete", "--timeout=60s", "crd/nodeacceptances.gpuaccept.io",
               "crd/nodeacceptancepolicies.gpuaccept.io")  # fmt: skip
    assert not _exists(cp, "crd", "nodeacceptances.gpuaccept.io")
    assert not _exists(cp, "crd", "nodeacceptancepolicies.gpuaccept.io")


def test_the_gpuaccept_command_runs_it(control_plane: ControlPlane, capsys: Any) -> None:
    code = gpuaccept_main(
        ["cleanup", "--kubeconfig", str(control_plane.kubeconfig), "--namespace", NAMESPACE]
    )
    assert code == 0
    assert "dry run:" in capsys.readouterr().out
