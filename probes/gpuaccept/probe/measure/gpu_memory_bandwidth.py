"""Measures :mod:`gpuaccept.checks.gpu_memory_bandwidth`: a STREAM triad on every
GPU at once (the backend's ``memory_bandwidth``), GB/s per GPU."""

from gpuaccept.checks.gpu_memory_bandwidth import (
    GpuMemoryBandwidthObserved,
    GpuMemoryBandwidthPolicy,
)
from gpuaccept.contracts.report import HardwareMode
from gpuaccept.probe.hardware.base import HardwareBackend, Unavailable
from gpuaccept.probe.measure.context import ProbeContext

FAILURE_MAX = 120


def measure(
    hardware: HardwareBackend, policy: GpuMemoryBandwidthPolicy, context: ProbeContext
) -> GpuMemoryBandwidthObserved:
    infos = hardware.gpus()
    if not infos:
        raise Unavailable("no GPU to measure")
    context.progress("memory bandwidth (triad)")
    result = hardware.memory_bandwidth(
        policy.buffer_bytes, policy.iterations, policy.warmup_iterations
    )
    failed = {g.index: g.problem for g in infos if g.problem}
    failed.update({g: what for g, what in result.failed.items() if g not in failed})
    return GpuMemoryBandwidthObserved(
        source="profile" if hardware.mode is HardwareMode.SIMULATED else "measured",
        bytes=policy.buffer_bytes,
        iterations=policy.iterations,
        gbps=[result.values.get(g.index, 0.0) for g in infos],
        failed_gpus={str(g): what[:FAILURE_MAX] for g, what in sorted(failed.items())} or None,
    )
