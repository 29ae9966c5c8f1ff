"""Per-GPU verdicts on the real API server (issue 40): a device-plugin node with one
bad GPU of eight, under ``fencing: gpu``, is quarantined as a whole (no supported way to
fence one GPU outside its plugin) and its status names that GPU by index and UUID.

The operator, the kubelet stand-in and the real probe on simulated hardware, as in
test_operator.py (gpuaccept.testsupport.operator_env)."""

from __future__ import annotations

import pytest

from gpuaccept.probe.hardware.simulated import simulated_uuid
from gpuaccept.testsupport.operator_env import ROOT, Env, suite_id, wait_node_side

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

REMAP_PENDING = str(ROOT / "profiles/faults/row-remap-pending.yaml")  # GPU 5


def test_a_device_plugin_node_with_one_bad_gpu_under_gpu_fencing_is_quarantined_naming_it(
    env: Env,
) -> None:
    suite = suite_id("fence")
    env.policy(suite, fencing={"mode": "gpu", "maxFencedGpus": 1})
    (name,) = env.nodes(suite, {"remap": REMAP_PENDING})
    env.wait_phase([name], "Quarantined", timeout=180)
    status = env.status(name)
    assert status["reason"] == "MemoryHealthFailed", env.describe([name])
    assert status["gpuPublishing"] == "DevicePlugin"
    assert status["gpuVerdicts"] == [
        {"index": 5, "uuid": simulated_uuid(name, 5), "checks": ["memory_health"], "fenced": False}
    ]
    assert "fenced" not in status  # nothing fenced: the FENCED column stays empty
    assert "not fenced: DevicePlugin node: a GPU is fenced only through DRA" in status["message"]
    assert simulated_uuid(name, 5) in status["message"]
    wait_node_side(env, name, "Quarantined", reason="MemoryHealthFailed")
