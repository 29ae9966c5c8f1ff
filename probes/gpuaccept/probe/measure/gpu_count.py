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
    return GpuCountObserved(
        visible=len(hardware.gpus()),
        allocatable=node.allocatable,
        capacity=node.capacity,
        labelled=node.labelled,
        replicas=node.replicas if node.replicas and node.replicas > 1 else None,
        pci_devices=hardware.pci_gpu_count() or None,
        problem=clip(problem, PROBLEM_MAX) if problem else None,
    )
