"""Measures :mod:`gpuaccept.checks.nvlink`: each GPU's active NVLinks and error counters.

The link count is the device's own (``NVML_FI_DEV_NVLINK_LINK_COUNT``), never
the binding's maximum of 36. A GPU NVML lost is named in ``failedGpus``; a
GPU whose link count NVML cannot give makes the check ``skip`` (naming it).
"""

from gpuaccept.checks.gpu_ranges import format_gpus, group
from gpuaccept.checks.nvlink import NvlinkObserved, NvlinkPolicy
from gpuaccept.probe.hardware.base import GpuFailedError, HardwareBackend, Unavailable
from gpuaccept.probe.measure.context import ProbeContext

FAILURE_MAX = 120


def measure(
    hardware: HardwareBackend, policy: NvlinkPolicy, context: ProbeContext
) -> NvlinkObserved:
    gpus = hardware.gpus()
    if not gpus:
        raise Unavailable("no GPU to read NVLinks of")
    links: dict[int, int] = {}
    active: dict[int, int] = {}
    inactive: dict[str, list[int]] = {}
    errors: dict[str, dict[str, int]] = {}
    unsupported: list[int] = []
    failed: dict[str, str] = {}
    for gpu in gpus:
        try:
            if gpu.problem:
                raise GpuFailedError(gpu.index, "enumeration", gpu.problem)
            state = hardware.nvlink(gpu.index)
        except GpuFailedError as exc:
            failed[str(gpu.index)] = f"{exc.step}: {exc.detail}"[:FAILURE_MAX]
            links[gpu.index] = active[gpu.index] = 0
            continue
        links[gpu.index] = state.count
        active[gpu.index] = len(state.active)
        down = [link for link in range(state.count) if link not in state.active]
        if down:
            inactive[str(gpu.index)] = down
        if state.errors is None:
            unsupported.append(gpu.index)
            continue
        for counter, per_link in state.errors.items():
            for link, count in enumerate(per_link):
                if count > 0:
                    errors.setdefault(counter, {})[f"{gpu.index}:{link}"] = count
    return NvlinkObserved(
        links=group(links),
        active=group(active),
        inactive=inactive or None,
        errors=errors or None,
        counters_unsupported=format_gpus(unsupported) or None,
        failed_gpus=failed or None,
    )
