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


# The GPU Operator in DRA mode (issue 39): NVIDIA's DRA driver instead of the device plugin.
EXAMPLES = VALUES.parent
DRA_DRIVER_VALUES = EXAMPLES / "dra-driver-values.yaml"
GPU_OPERATOR_DRA_VALUES = EXAMPLES / "gpu-operator-dra-values.yaml"


@pytest.mark.parametrize("taint", PENDING + QUARANTINE, ids=lambda t: f"{t['key']}:{t['effect']}")
def test_the_dra_drivers_kubelet_plugin_tolerates_gpuaccepts_taints(taint: Taint) -> None:
    """Its chart tolerates nothing by default: without these the plugin never runs on a
    node under the pending taint, and the node's pool never appears."""
    tolerations = yaml.safe_load(DRA_DRIVER_VALUES.read_text())["kubeletPlugin"]["tolerations"]
    assert any(tolerates(t, taint) for t in tolerations), taint
    gpu = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    assert any(tolerates(t, gpu) for t in tolerations)


def test_the_dra_driver_allocates_gpus_on_the_labelled_nodes() -> None:
    values = yaml.safe_load(DRA_DRIVER_VALUES.read_text())
    assert values["gpuResourcesEnabledOverride"] is True
    assert "resources" not in values  # resources.gpus.enabled keeps its default, true
    assert values["kubeletPlugin"]["nodeSelector"] == {"nvidia.com/dra-kubelet-plugin": "true"}
    assert values["nvidiaDriverRoot"] == "/run/nvidia/driver"  # the GPU Operator's driver


def test_the_gpu_operator_in_dra_mode_runs_no_device_plugin() -> None:
    """The DRA values go after gpu-operator-values.yaml (its tolerations) and only turn the
    device plugin off, whose command line names the DRA driver's node label."""
    values = yaml.safe_load(GPU_OPERATOR_DRA_VALUES.read_text())
    assert values == {"devicePlugin": {"enabled": False}}
    text = GPU_OPERATOR_DRA_VALUES.read_text()
    assert "-f charts/gpuaccept/examples/gpu-operator-values.yaml" in text
    label = next(
        iter(yaml.safe_load(DRA_DRIVER_VALUES.read_text())["kubeletPlugin"]["nodeSelector"])
    )
    assert f"driver.manager.env[0].value={label}" in text
