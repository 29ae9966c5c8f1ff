"""A node whose GPUs the device plugin shares is never convicted for it: where the
probe's whole-node request cannot be admitted (MPS, a renamed resource, a refused
request for more than one replica) the node waits with reason GPUSharing; a
time-sliced node that admits the request is probed as any other."""

from __future__ import annotations

import dataclasses

import pytest
from world import World

from gpuaccept.contracts.nodeacceptance import Phase
from gpuaccept.operator.core.gpusharing import (
    REASON_GPU_SHARING,
    admission_refused_by_sharing,
    sharing_refusal,
)
from gpuaccept.operator.core.model import NodeView

MPS = {"nvidia.com/gpu.sharing-strategy": "mps", "nvidia.com/gpu.replicas": "4"}
SLICED = {"nvidia.com/gpu.sharing-strategy": "time-slicing", "nvidia.com/gpu.replicas": "4"}
NONE = {"nvidia.com/gpu.sharing-strategy": "none", "nvidia.com/gpu.replicas": "1"}

# (labels, nvidia.com/gpu allocatable, nvidia.com/gpu.shared allocatable): refused?
REFUSAL = {
    "not shared, no GFD labels": ({}, 8, 0, False),
    "GFD says none": (NONE, 8, 0, False),
    "time-slicing under nvidia.com/gpu: probed": (SLICED, 32, 0, False),
    "MPS under nvidia.com/gpu": (MPS, 32, 0, True),
    "renameByDefault: only nvidia.com/gpu.shared": (SLICED, 0, 32, True),
    "no GPUs advertised at all: the GPU wait, not sharing": ({}, 0, 0, False),
}


@pytest.mark.parametrize(("labels", "gpus", "shared", "refused"), REFUSAL.values(), ids=REFUSAL)
def test_when_sharing_refuses_the_probe(
    labels: dict[str, str], gpus: int, shared: int, refused: bool
) -> None:
    node = NodeView("n", labels=labels, gpus=gpus, gpu_capacity=gpus, shared_gpus=shared)
    assert (sharing_refusal(node) is not None) == refused


ADMISSION = {
    "time-sliced node": (SLICED, True),
    "replicas label only": ({"nvidia.com/gpu.replicas": "2"}, True),
    "not shared": (NONE, False),
    "no labels": ({}, False),
}


@pytest.mark.parametrize(("labels", "sharing"), ADMISSION.values(), ids=ADMISSION)
def test_an_admission_error_is_the_sharing_only_on_a_shared_node(
    labels: dict[str, str], sharing: bool
) -> None:
    node = NodeView("n", labels=labels, gpus=32)
    assert (admission_refused_by_sharing(node, "Allocate failed") is not None) == sharing


def test_an_mps_node_waits_and_is_probed_once_sharing_is_off() -> None:
    world = World()
    assert world.node is not None
    world.node = dataclasses.replace(world.node, labels={**world.node.labels, **MPS})
    world.settle()
    st = world.status
    assert (st.phase, st.reason, st.attempts) == (Phase.WAITING, REASON_GPU_SHARING, 0)
    assert "MPS" in (st.message or "")
    assert world.pods == {}
    world.node = dataclasses.replace(world.node, labels={**world.node.labels, **NONE})
    world.advance(3600)  # past the wait's backoff
    world.settle()
    assert (world.status.phase, world.status.attempts) == (Phase.PROBING, 1)


def test_a_refused_multi_replica_request_waits_instead_of_convicting() -> None:
    world = World()
    assert world.node is not None
    world.node = dataclasses.replace(world.node, labels={**world.node.labels, **SLICED})
    world.settle()
    assert world.status.phase == Phase.PROBING
    pod = world.current_pod()
    world.pods[pod.name] = dataclasses.replace(
        pod,
        phase="Failed",
        pod_reason="UnexpectedAdmissionError",
        pod_message="Allocate failed due to request for more than one device",
    )
    world.settle()
    st = world.status
    assert (st.phase, st.reason, st.attempts) == (Phase.WAITING, REASON_GPU_SHARING, 0)
    assert "failRequestsGreaterThanOne" in (st.message or "")
