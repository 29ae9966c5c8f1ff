"""The probe is told the GPU feature discovery label nvidia.com/gpu.replicas, so that
gpu_count divides a shared node's device plugin counts by it."""

import pytest
from world import spec

from gpuaccept.operator.core import NodeView, OperatorConfig
from gpuaccept.operator.core.podspec import ProbeAttempt, probe_pod_manifest


@pytest.mark.parametrize(
    ("labels", "replicas"),
    [({"nvidia.com/gpu.replicas": "4"}, "4"), ({}, None), ({"nvidia.com/gpu.replicas": "x"}, None)],
)
def test_the_probe_is_told_the_replicas_label(labels: dict[str, str], replicas: str | None) -> None:
    node = NodeView(name="gpu-1", gpus=32, gpu_capacity=32, labels=labels, boot_id="b")
    attempt = ProbeAttempt(name="p", serial=1, node=node, policy_name="default", spec=spec())
    container = probe_pod_manifest(attempt, OperatorConfig())["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env.get("GPUACCEPT_GFD_GPU_REPLICAS") == replicas
