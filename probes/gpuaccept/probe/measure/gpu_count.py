"""Measures :mod:`gpuaccept.checks.gpu_count`: the GPUs visible, and the count advertised."""

from gpuaccept.checks.gpu_count import GpuCountObserved, GpuCountPolicy
from gpuaccept.checks.spec import clip
from gpuaccept.probe.hardware.base import HardwareBackend
from gpuaccept.probe.measure.context import ProbeContext

PROBLEM_MAX = 160


def measure(
    hardware: HardwareBackend, policy: GpuCountPolicy, context: ProbeContext
) -> GpuCountObserved:
    problem = hardware.gpu_problem()
    return GpuCountObserved(
        visible=len(hardware.gpus()),
        advertised=context.advertised_gpus,
        problem=clip(problem, PROBLEM_MAX) if problem else None,
    )
