"""Measures :mod:`gpuaccept.checks.gpu_count`: the GPUs NVML sees, the NVIDIA GPUs on
the PCI bus, and the node's counts the operator passed in."""

from gpuaccept.checks.gpu_count import GpuCountObserved, GpuCountPolicy
from gpuaccept.checks.spec import clip
from gpuaccept.probe.hardware.base import HardwareBackend
from gpuaccept.probe.measure.context import ProbeContext

PROBLEM_MAX = 160


def measure(
    hardware: HardwareBackend, policy: GpuCountPolicy, context: ProbeContext
) -> GpuCountObserved:
    problem = hardware.gpu_problem()
    node = context.node_gpus
    gpus = hardware.gpus()
    published = node.published_uuids
    seen = [g.uuid for g in gpus if g.uuid]
    compared = published is not None and len(seen) == len(gpus)
    missing = sorted(set(published or ()) - set(seen)) if compared else []
    unpublished = sorted(set(seen) - set(published or ())) if compared else []
    return GpuCountObserved(
        published=len(published) if published is not None else None,
        uuids_compared=compared if published is not None else None,
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
