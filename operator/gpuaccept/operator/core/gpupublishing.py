"""How a node publishes its GPUs, and whether its DRA pool is complete (pure).

A GPU node shows its GPUs to the scheduler one of two ways:

* the device plugin: the extended resource ``nvidia.com/gpu`` in the Node's
  capacity and allocatable (what the probe pod requests today);
* Dynamic Resource Allocation (``resource.k8s.io/v1``): a DRA driver (NVIDIA's
  is ``gpu.nvidia.com``) publishes each GPU as a device of a ResourceSlice whose
  pool is the node; no ``nvidia.com/gpu`` at all.

:func:`node_gpus` decides per node, from the Node's capacity and the node's
slices of the configured drivers:

==================  ==================  ===================================================
nvidia.com/gpu      configured slices   mode
==================  ==================  ===================================================
in capacity         none                ``DevicePlugin`` (the gate waits for allocatable)
none                some                ``DRA`` (the gate waits for a complete pool)
in capacity         some                ``Both``: the same GPUs could be handed out twice;
                                        not probed (a wait, not a verdict)
none                none                none: still waiting for GPUs (``WaitingForGPUs``)
==================  ==================  ===================================================

A pool is complete (the DRA counterpart of allocatable ``nvidia.com/gpu``) when
every slice of its highest ``spec.pool.generation`` is seen: as many as that
generation's ``resourceSliceCount``. Older generations are ignored (a driver
republishing its pool leaves them for a moment). Slices of one generation that
disagree on the count, more slices than the count, or a device name twice in a
pool are inconsistent: the pool is not complete, and says why.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from gpuaccept.contracts.nodeacceptance import GpuPublishing
from gpuaccept.operator.core.model import DraDevice, NodeView, ResourceSliceView

# Attribute ``type`` of NVIDIA's driver: a whole GPU ("gpu"), or a MIG or VFIO device.
GPU_DEVICE_TYPE = "gpu"
MIG_DEVICE_TYPE = "mig"  # a MIG device; attribute parentUUID names its GPU


@dataclass(frozen=True)
class DraPool:
    """One pool (driver, pool name) of the node, at its highest generation."""

    driver: str
    name: str
    generation: int
    slice_count: int  # resourceSliceCount of that generation (0: inconsistent)
    slices_seen: int
    devices: tuple[DraDevice, ...]
    inconsistent: str = ""  # why the slices disagree ("" when they do not)

    @property
    def complete(self) -> bool:
        return not self.inconsistent and 0 < self.slice_count == self.slices_seen

    @property
    def gpus(self) -> tuple[DraDevice, ...]:
        """The whole GPUs of the pool (a device whose ``type`` is ``gpu``, or that has
        no ``type``): MIG and VFIO devices are not counted as GPUs."""
        return tuple(d for d in self.devices if d.kind in ("", GPU_DEVICE_TYPE))

    def describe(self) -> str:
        where = f"pool {self.name} of driver {self.driver} (generation {self.generation})"
        if self.inconsistent:
            return f"{where} is inconsistent: {self.inconsistent}"
        if not self.complete:
            return f"{where} has {self.slices_seen} of its {self.slice_count} ResourceSlices"
        return f"{where} is complete: {len(self.gpus)} GPU device(s)"


@dataclass(frozen=True)
class PublishedGpus:
    """How the node publishes its GPUs, and its DRA pools."""

    mode: GpuPublishing | None
    pools: tuple[DraPool, ...] = ()

    @property
    def pools_complete(self) -> bool:
        return bool(self.pools) and all(p.complete for p in self.pools)

    @property
    def dra_gpus(self) -> tuple[DraDevice, ...]:
        """The GPU devices of complete pools only (what plays allocatable's role)."""
        return tuple(d for p in self.pools if p.complete for d in p.gpus)

    @property
    def physical_gpus(self) -> int:
        """How many GPUs the complete pools hold: the whole GPUs, and each GPU cut into
        MIG devices once (the distinct ``parentUUID`` of its MIG devices that no whole
        GPU device carries)."""
        whole = {d.uuid or d.name for d in self.dra_gpus}
        cut = {
            d.parent_uuid
            for p in self.pools
            if p.complete
            for d in p.devices
            if d.kind == MIG_DEVICE_TYPE and d.parent_uuid
        }
        return len(whole | cut)

    @property
    def ready(self) -> bool:
        """A DRA node that may be probed: every pool complete, at least one GPU."""
        return self.mode == GpuPublishing.DRA and self.pools_complete and bool(self.dra_gpus)

    def describe(self) -> str:
        """What the pools say, for a waiting message (empty when there is none)."""
        text = "; ".join(p.describe() for p in self.pools)
        if self.pools_complete and not self.dra_gpus:
            text += "; no GPU device in it"
        return text


NO_GPUS_PUBLISHED = PublishedGpus(None)  # neither way (yet)


def _pool(driver: str, name: str, slices: list[ResourceSliceView]) -> DraPool:
    generation = max(s.generation for s in slices)
    current = [s for s in slices if s.generation == generation]
    counts = sorted({s.slice_count for s in current})
    devices = tuple(d for s in sorted(current, key=lambda s: s.name) for d in s.devices)
    names = [d.name for d in devices]
    inconsistent = ""
    if len(counts) > 1:
        inconsistent = f"its slices disagree on resourceSliceCount ({counts})"
    elif len(current) > counts[0]:
        inconsistent = f"{len(current)} slices for a resourceSliceCount of {counts[0]}"
    elif len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        inconsistent = f"device name(s) {', '.join(twice)} published twice"
    return DraPool(
        driver=driver,
        name=name,
        generation=generation,
        slice_count=counts[0] if len(counts) == 1 else 0,
        slices_seen=len(current),
        devices=devices,
        inconsistent=inconsistent,
    )


def dra_pools(slices: Iterable[ResourceSliceView], drivers: Iterable[str]) -> tuple[DraPool, ...]:
    """The pools of the configured ``drivers`` among ``slices`` (the node's), in order."""
    wanted = frozenset(drivers)
    grouped: dict[tuple[str, str], list[ResourceSliceView]] = {}
    for item in slices:
        if item.driver in wanted:
            grouped.setdefault((item.driver, item.pool), []).append(item)
    return tuple(_pool(driver, name, grouped[driver, name]) for driver, name in sorted(grouped))


def node_gpus(
    node: NodeView, slices: Iterable[ResourceSliceView], drivers: Iterable[str]
) -> PublishedGpus:
    """How ``node`` publishes its GPUs (the table in the module's docstring)."""
    pools = dra_pools(slices, drivers)
    device_plugin = node.gpu_capacity > 0 or node.gpus > 0
    if device_plugin and pools:
        return PublishedGpus(GpuPublishing.BOTH, pools)
    if device_plugin:
        return PublishedGpus(GpuPublishing.DEVICE_PLUGIN)
    if pools:
        return PublishedGpus(GpuPublishing.DRA, pools)
    return NO_GPUS_PUBLISHED


def counted_node(node: NodeView, gpus: PublishedGpus) -> NodeView:
    """``node`` as a report is held to and a pod is sized by: on a DRA node (``gpus``)
    its complete pools' GPUs play allocatable's and capacity's part, as
    ``nvidia.com/gpu`` does on a device-plugin node; any other node as it is."""
    if gpus.mode != GpuPublishing.DRA:
        return node
    count = len(gpus.dra_gpus)
    return replace(node, gpus=count, gpu_capacity=count)
