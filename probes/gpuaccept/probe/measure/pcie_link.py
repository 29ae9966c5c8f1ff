"""Measures :mod:`gpuaccept.checks.pcie_link`: each GPU's link while copying, and its bandwidth.

Each GPU's copies run from its own NUMA node (the backend pins the copy thread
and the pinned host buffer to the GPU's ``local_cpulist`` within the process's
affinity). A GPU that fails (NVML lost it, or a copy hung past its deadline)
is recorded by name with zero columns; the others are still measured.
"""

from gpuaccept.checks.pcie_link import PcieLinkObserved, PcieLinkPolicy
from gpuaccept.probe.hardware.base import (
    CopyMeasurement,
    GpuFailedError,
    HardwareBackend,
    PcieLinkState,
    Unavailable,
)
from gpuaccept.probe.measure.context import ProbeContext
from gpuaccept.probe.measure.rounding import round_figure

COPY_BYTES = 256 << 20
FAILURE_MAX = 120
_FAILED = CopyMeasurement(0.0, 0.0, PcieLinkState(0, 0, 0, 0))


def measure(
    hardware: HardwareBackend, policy: PcieLinkPolicy, context: ProbeContext
) -> PcieLinkObserved:
    gpus = hardware.gpus()
    if not gpus:
        raise Unavailable("no GPU to measure")
    cc = hardware.conf_compute()
    cc_mode = "unread" if cc is None else (cc if cc != "off" else None)
    gen: list[int] = []
    width: list[int] = []
    max_gen: list[int] = []
    max_width: list[int] = []
    device_max_gen: list[int] = []
    idle_gen: list[int] = []
    h2d: list[float] = []
    d2h: list[float] = []
    numa: list[int] = []
    unpinned: list[int] = []
    failed: dict[str, str] = {}
    for gpu in gpus:
        context.progress(f"GPU {gpu.index}: copy bandwidth")
        try:
            if gpu.problem:
                raise GpuFailedError(gpu.index, "enumeration", gpu.problem)
            idle = hardware.pcie_link(gpu.index)
            copy = hardware.copy_bandwidth(gpu.index, COPY_BYTES)
        except GpuFailedError as exc:
            failed[str(gpu.index)] = f"{exc.step}: {exc.detail}"[:FAILURE_MAX]
            idle, copy = _FAILED.link_under_load, _FAILED
        else:
            numa.append(-1 if copy.numa_node is None else copy.numa_node)
            if not copy.pinned_local:
                unpinned.append(gpu.index)
        if str(gpu.index) in failed:
            numa.append(-1)
        link = copy.link_under_load
        gen.append(link.generation)
        width.append(link.width)
        max_gen.append(link.max_generation)
        max_width.append(link.max_width)
        device_max_gen.append(link.device_max_generation or link.max_generation)
        idle_gen.append(idle.generation)
        h2d.append(round_figure(copy.h2d_gbps))
        d2h.append(round_figure(copy.d2h_gbps))
        if str(gpu.index) not in failed and h2d[-1] > 0:
            context.h2d_gbps[gpu.index] = h2d[-1]
    return PcieLinkObserved(
        gen=gen,
        width=width,
        max_gen=max_gen,
        max_width=max_width,
        device_max_gen=device_max_gen if device_max_gen != max_gen else None,
        idle_gen=idle_gen,
        h2d_gbps=h2d,
        d2h_gbps=d2h,
        numa_node=numa,
        cc_mode=cc_mode,
        unpinned=unpinned or None,
        failed_gpus=failed or None,
    )
