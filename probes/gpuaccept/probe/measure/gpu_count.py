"""Measures :mod:`gpuaccept.checks.gpu_count`: the GPUs NVML sees, the NVIDIA GPUs on
the PCI bus, and the node's counts the operator passed in."""

from gpuaccept.checks.gpu_count import GpuCountObserved, GpuCountPolicy
from gpuaccept.checks.spec import clip
from gpuaccept.probe.hardware.base import HardwareBackend
from gpuaccept.probe.measure.context import ProbeContext

PROBLEM_MAX = 160


def _uuid_comparison(
    published: tuple[str, ...] | None, seen: list[str], visible: int
) -> tuple[bool | None, list[str], list[str]]:
    """Whether the pool's UUIDs were compared with NVML's (None: no pool published
    them; False: some GPU gave NVML no UUID), and the GPUs published and not seen, and
    seen and not published."""
    if published is None:
        return None, [], []
    if len(seen) != visible:
        return False, [], []
    return True, sorted(set(published) - set(seen)), sorted(set(seen) - set(published))


def measure(
    hardware: HardwareBackend, policy: GpuCountPolicy, context: ProbeContext
) -> GpuCountObserved:
    problem = hardware.gpu_problem()
    node = context.node_gpus
    gpus = hardware.gpus()
    published = node.published_uuids
    compared, missing, unpublished = _uuid_comparison(
        published, [g.uuid for g in gpus if g.uuid], len(gpus)
    )
    return GpuCountObserved(
        published=len(published) if published is not None else None,
        uuids_compared=compared,
        missing=missing or None,
        unpublished=unpublished or None,
        visible=len(gpus),
        allocatable=node.allocatable,
        capacity=node.capacity,
        labelled=node.labelled,
        replicas=node.replicas if node.replicas and node.replicas > 1 else None,
        pci_devices=hardware.pci_gpu_count() or None,
        problem=clip(problem, PROBLEM_MAX) if problem else None,
    )
