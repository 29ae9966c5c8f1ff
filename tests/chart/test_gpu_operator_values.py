"""The example values for the NVIDIA GPU Operator beside the chart let its
DaemonSets and node-feature-discovery's worker run on a node under gpuaccept's
pending taint (and on a quarantined one), keeping the GPU Operator's own
tolerations."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuaccept.contracts.api import PENDING_TAINT_KEY, QUARANTINE_TAINT_KEY

ROOT = Path(__file__).resolve().parents[2]
VALUES = ROOT / "charts" / "gpuaccept" / "examples" / "gpu-operator-values.yaml"

Taint = dict[str, str]


def tolerates(toleration: dict[str, Any], taint: Taint) -> bool:
    """Kubernetes' rule (k8s.io/api/core/v1 Toleration.ToleratesTaint): the effect
    matches or is empty, the key matches or is empty with Exists, and Exists
    matches any value, Equal (the default) only the same one."""
    if toleration.get("effect") and toleration["effect"] != taint["effect"]:
        return False
    key = toleration.get("key", "")
    operator = toleration.get("operator", "Equal")
    if key and key != taint["key"]:
        return False
    if not key and operator != "Exists":
        return False
    return operator == "Exists" or str(toleration.get("value", "")) == taint.get("value", "")


def _lists() -> dict[str, list[dict[str, Any]]]:
    values = yaml.safe_load(VALUES.read_text())
    return {
        "daemonsets.tolerations": values["daemonsets"]["tolerations"],
        "node-feature-discovery.worker.tolerations": values["node-feature-discovery"]["worker"][
            "tolerations"
        ],
    }


LISTS = list(_lists())
# The pending taint as kubelet --register-with-taints or Karpenter may write it.
PENDING = [
    {"key": PENDING_TAINT_KEY, "value": "true", "effect": "NoSchedule"},
    {"key": PENDING_TAINT_KEY, "value": "", "effect": "NoSchedule"},
]
QUARANTINE = [
    {"key": QUARANTINE_TAINT_KEY, "value": "true", "effect": "NoSchedule"},
    {"key": QUARANTINE_TAINT_KEY, "value": "true", "effect": "NoExecute"},
]


@pytest.mark.parametrize("where", LISTS)
@pytest.mark.parametrize("taint", PENDING + QUARANTINE, ids=lambda t: f"{t['key']}:{t['effect']}")
def test_the_gpu_operator_and_nfd_tolerate_gpuaccepts_taints(where: str, taint: Taint) -> None:
    assert any(tolerates(t, taint) for t in _lists()[where]), (where, taint)


@pytest.mark.parametrize("where", LISTS)
def test_the_gpu_operators_own_toleration_is_kept(where: str) -> None:
    """Helm replaces lists: the file must repeat the GPU Operator's default."""
    gpu = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    assert any(tolerates(t, gpu) for t in _lists()[where])


def test_nfd_keeps_the_control_plane_tolerations() -> None:
    nfd = _lists()["node-feature-discovery.worker.tolerations"]
    for key in ("node-role.kubernetes.io/master", "node-role.kubernetes.io/control-plane"):
        assert any(tolerates(t, {"key": key, "value": "", "effect": "NoSchedule"}) for t in nfd)


def test_the_rule_itself() -> None:
    taint = {"key": PENDING_TAINT_KEY, "value": "true", "effect": "NoSchedule"}
    assert not tolerates({"key": "nvidia.com/gpu", "operator": "Exists"}, taint)
    assert not tolerates({"key": PENDING_TAINT_KEY, "value": "false"}, taint)
    assert not tolerates(
        {"key": PENDING_TAINT_KEY, "operator": "Exists", "effect": "NoExecute"}, taint
    )
    assert tolerates({"operator": "Exists"}, taint)
