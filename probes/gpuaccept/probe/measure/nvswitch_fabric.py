"""Measures :mod:`gpuaccept.checks.nvswitch_fabric`: each GPU's fabric state and health.

``unsupported`` (the fabric call answers NotSupported) and ``not_supported`` (a
state NVML reports: the GPU is on no fabric) are both recorded as they are.
"""

from gpuaccept.checks.gpu_ranges import format_gpus, group
from gpuaccept.checks.nvswitch_fabric import NvswitchFabricObserved, NvswitchFabricPolicy
from gpuaccept.probe.hardware.base import (
    FabricInfo,
    GpuFailedError,
    HardwareBackend,
    Unavailable,
)
from gpuaccept.probe.measure.context import ProbeContext

FAILURE_MAX = 120
POLL_S = 2.0


def _settled(hardware: HardwareBackend, gpu: int, wait_s: float) -> FabricInfo:
    """The GPU's fabric info once its registration is no longer in progress, read again
    every POLL_S for up to ``wait_s`` (right after boot nvidia-fabricmanager is still
    registering the GPUs; a state stuck in progress is what makes CUDA fail with
    "system not yet initialized")."""
    info = hardware.gpu_fabric(gpu)
    waited = 0.0
    while info.state == "in_progress" and waited < wait_s:
        hardware.sleep(POLL_S)
        waited += POLL_S
        info = hardware.gpu_fabric(gpu)
    return info


def measure(
    hardware: HardwareBackend, policy: NvswitchFabricPolicy, context: ProbeContext
) -> NvswitchFabricObserved:
    gpus = hardware.gpus()
    if not gpus:
        raise Unavailable("no GPU to read the fabric state of")
    completed = 0
    states: dict[int, str] = {}
    status_errors: dict[int, int] = {}
    health: dict[str, list[int]] = {}
    versions: set[int] = set()
    failed: dict[str, str] = {}
    for gpu in gpus:
        try:
            if gpu.problem:
                raise GpuFailedError(gpu.index, "enumeration", gpu.problem)
            info = _settled(hardware, gpu.index, policy.in_progress_wait_seconds)
        except GpuFailedError as exc:
            failed[str(gpu.index)] = f"{exc.step}: {exc.detail}"[:FAILURE_MAX]
            continue
        if info.struct_version:
            versions.add(info.struct_version)
        if info.state != "completed":
            states[gpu.index] = info.state
            continue
        completed += 1
        if info.status != 0:
            status_errors[gpu.index] = info.status
        for condition in info.conditions:
            health.setdefault(condition, []).append(gpu.index)
    return NvswitchFabricObserved(
        gpus=len(gpus),
        completed=completed,
        not_completed=group(states) or None,
        status_errors=group(status_errors) or None,
        health={condition: format_gpus(g) for condition, g in health.items()} or None,
        struct_version=min(versions) if versions else None,
        failed_gpus=failed or None,
    )
