"""How a node publishes its GPUs (device plugin, DRA, both, neither), when a DRA
pool is complete, and the gate that waits for it (core/gpupublishing.py,
core/phases/pending.py)."""

from __future__ import annotations

import dataclasses

import pytest
from world import World

from gpuaccept.contracts.nodeacceptance import GpuPublishing, Phase
from gpuaccept.operator.core.gpupublishing import dra_pools, node_gpus
from gpuaccept.operator.core.model import CreateProbePod, DraDevice, NodeView, ResourceSliceView
from gpuaccept.operator.core.phases.pending import (
    REASON_GPUS_PUBLISHED_TWICE,
    REASON_NO_GPUS,
    REASON_WAITING_FOR_RESOURCE_SLICES,
)

DRIVER = "gpu.nvidia.com"
DRIVERS = (DRIVER,)


def gpu(i: int, kind: str = "gpu") -> DraDevice:
    return DraDevice(
        f"gpu-{i}", uuid=f"GPU-{i:08x}", product_name="NVIDIA H100 80GB HBM3", kind=kind
    )


def piece(
    name: str,
    devices: range | list[int],
    *,
    generation: int = 1,
    count: int = 1,
    driver: str = DRIVER,
) -> ResourceSliceView:
    return ResourceSliceView(
        name=name,
        driver=driver,
        pool="gpu-1",
        generation=generation,
        slice_count=count,
        node_name="gpu-1",
        devices=tuple(gpu(i) for i in devices),
    )


DP = NodeView("gpu-1", gpus=8, gpu_capacity=8)
DP_UNHEALTHY = NodeView("gpu-1", gpus=0, gpu_capacity=8)
BARE = NodeView("gpu-1")
ONE_SLICE = (piece("s", range(8)),)

# node, slices: mode
MODES = {
    "nvidia.com/gpu only: the device plugin": (DP, (), GpuPublishing.DEVICE_PLUGIN),
    "capacity without allocatable is still the device plugin": (
        DP_UNHEALTHY,
        (),
        GpuPublishing.DEVICE_PLUGIN,
    ),
    "slices of the configured driver only: DRA": (BARE, ONE_SLICE, GpuPublishing.DRA),
    "both at once": (DP, ONE_SLICE, GpuPublishing.BOTH),
    "neither: no mode (still waiting for GPUs)": (BARE, (), None),
    "a slice of a driver not configured does not count": (
        BARE,
        (piece("s", range(8), driver="other.example.com"),),
        None,
    ),
    "nor beside the device plugin": (
        DP,
        (piece("s", range(8), driver="other.example.com"),),
        GpuPublishing.DEVICE_PLUGIN,
    ),
}


@pytest.mark.parametrize(("node", "slices", "mode"), MODES.values(), ids=MODES)
def test_the_publishing_mode(
    node: NodeView, slices: tuple[ResourceSliceView, ...], mode: GpuPublishing | None
) -> None:
    assert node_gpus(node, slices, DRIVERS).mode == mode


# slices: (complete, GPUs counted)
POOLS = {
    "one slice of one": ([piece("a", range(8))], (True, 8)),
    "one slice of two: incomplete, nothing counted": (
        [piece("a", range(4), count=2)],
        (False, 0),
    ),
    "two slices of two": (
        [piece("a", range(4), count=2), piece("b", range(4, 8), count=2)],
        (True, 8),
    ),
    "an older generation is ignored": (
        [piece("a", range(8), generation=1), piece("b", range(7), generation=2)],
        (True, 7),
    ),
    "a republished pool half there: incomplete even though the old one was whole": (
        [
            piece("a", range(8), generation=1),
            piece("b", range(4), generation=2, count=2),
        ],
        (False, 0),
    ),
    "slices of one generation disagreeing on the count: inconsistent": (
        [piece("a", range(4), count=2), piece("b", range(4, 8), count=1)],
        (False, 0),
    ),
    "more slices than the count: inconsistent": (
        [piece("a", range(4)), piece("b", range(4, 8))],
        (False, 0),
    ),
    "a device name twice: inconsistent": (
        [piece("a", range(4), count=2), piece("b", range(3, 8), count=2)],
        (False, 0),
    ),
    "a complete pool without devices counts none": ([piece("a", [])], (True, 0)),
}


@pytest.mark.parametrize(("slices", "expected"), POOLS.values(), ids=POOLS)
def test_pool_completeness(slices: list[ResourceSliceView], expected: tuple[bool, int]) -> None:
    gpus = node_gpus(BARE, slices, DRIVERS)
    assert (gpus.pools_complete, len(gpus.dra_gpus)) == expected
    if not expected[0]:
        assert not gpus.ready


def test_mig_and_vfio_devices_are_not_counted_as_gpus() -> None:
    sliced = dataclasses.replace(
        piece("a", range(2)), devices=(gpu(0), gpu(1, kind="mig"), gpu(2, kind="vfio"))
    )
    (pool,) = dra_pools([sliced], DRIVERS)
    assert [d.name for d in pool.gpus] == ["gpu-0"]


def mig(parent: int, part: int, *, named: bool = True) -> DraDevice:
    return DraDevice(
        f"gpu-{parent}-mig-3g40gb-9-{part}",
        uuid=f"MIG-{parent}-{part}",
        kind="mig",
        parent_uuid=f"GPU-{parent:08x}" if named else "",
    )


@pytest.mark.parametrize(
    ("devices", "whole", "physical"),
    [
        ((gpu(0), gpu(1)), 2, 2),
        # GPU 1 cut into two MIG devices: one GPU still, not zero and not two
        ((gpu(0), mig(1, 0), mig(1, 4)), 1, 2),
        # a GPU in MIG mode that still publishes its own device counts once
        ((gpu(0), gpu(1), mig(1, 0)), 2, 2),
        # MIG devices that name no parent cannot be counted as a GPU
        ((gpu(0), mig(1, 0, named=False)), 1, 1),
        ((mig(0, 0), mig(1, 0), mig(2, 0)), 0, 3),
    ],
)
def test_the_gpus_a_pool_holds_count_a_gpu_cut_into_mig_devices_once(
    devices: tuple[DraDevice, ...], whole: int, physical: int
) -> None:
    sliced = dataclasses.replace(piece("a", []), devices=devices)
    gpus = node_gpus(BARE, [sliced], DRIVERS)
    assert (len(gpus.dra_gpus), gpus.physical_gpus) == (whole, physical)


def test_each_driver_and_pool_is_its_own_pool() -> None:
    slices = [
        piece("a", range(8)),
        piece("b", range(2), driver="second.example.com", count=2),
    ]
    gpus = node_gpus(BARE, slices, (DRIVER, "second.example.com"))
    assert [(p.driver, p.complete) for p in gpus.pools] == [
        (DRIVER, True),
        ("second.example.com", False),
    ]
    assert not gpus.ready  # every pool must be complete


def dra_world(*slices: ResourceSliceView) -> World:
    world = World(resource_slices=slices)
    assert world.node is not None
    world.node = dataclasses.replace(world.node, gpus=0, gpu_capacity=0)
    return world


def test_a_dra_node_waits_for_its_pool_then_is_probed_through_a_claim() -> None:
    world = dra_world(piece("a", range(4), count=2))
    world.settle()
    st = world.status
    assert (st.phase, st.reason, st.gpu_publishing) == (
        Phase.PENDING,
        REASON_WAITING_FOR_RESOURCE_SLICES,
        GpuPublishing.DRA,
    )
    assert "1 of its 2 ResourceSlices" in (st.message or "")
    assert st.waiting_since is not None
    assert world.pods == {}
    world.resource_slices = (piece("a", range(4), count=2), piece("b", range(4, 8), count=2))
    world.settle()
    st = world.status
    # Complete: probed through its claim, never through nvidia.com/gpu.
    assert (st.phase, st.reason, st.attempts) == (Phase.PROBING, None, 1)
    (create,) = [a for plan in world.log for a in plan.actions if isinstance(a, CreateProbePod)]
    assert "nvidia.com/gpu" not in str(create.manifest)
    assert list(world.claims) == [create.name]


def test_an_incomplete_pool_stalls_at_the_wait_for_gpus_deadline() -> None:
    world = dra_world(piece("a", range(4), count=2))
    world.settle()
    world.advance(world.policies[0].spec.wait_for_gpus.timeout_seconds + 1)  # type: ignore[union-attr]
    world.settle()
    st = world.status
    assert (st.phase, st.reason) == (Phase.STALLED, REASON_NO_GPUS)
    assert "DRA pool was not complete" in (st.message or "")
    assert any(e.reason == REASON_NO_GPUS for e in world.events)


def test_a_pool_republished_under_a_new_generation_waits_again() -> None:
    world = dra_world(piece("a", range(4), count=2))
    world.settle()
    world.resource_slices = (
        piece("a", range(4), count=2),
        piece("b", range(4, 8), count=2),
        piece("c", range(8), generation=2, count=2),
    )
    world.settle()
    assert world.status.reason == REASON_WAITING_FOR_RESOURCE_SLICES


def test_a_node_published_both_ways_is_not_probed() -> None:
    world = World(resource_slices=(piece("a", range(8)),))
    world.settle()
    st = world.status
    assert (st.phase, st.reason, st.gpu_publishing) == (
        Phase.WAITING,
        REASON_GPUS_PUBLISHED_TWICE,
        GpuPublishing.BOTH,
    )
    assert world.pods == {}


def test_a_device_plugin_node_records_its_mode_and_is_probed() -> None:
    world = World(resource_slices=(piece("a", range(8), driver="other.example.com"),))
    world.settle()
    assert (world.status.phase, world.status.gpu_publishing) == (
        Phase.PROBING,
        GpuPublishing.DEVICE_PLUGIN,
    )


def test_a_stalled_dra_node_leaves_the_gate_once_its_pool_is_complete() -> None:
    world = dra_world(piece("a", range(4), count=2))
    world.settle()
    world.advance(world.policies[0].spec.wait_for_gpus.timeout_seconds + 1)  # type: ignore[union-attr]
    world.settle()
    assert world.status.phase == Phase.STALLED
    world.resource_slices = (piece("a", range(4), count=2), piece("b", range(4, 8), count=2))
    world.settle()
    assert (world.status.phase, world.status.reason) == (Phase.PROBING, None)
    assert list(world.pods) == list(world.claims)
