"""Measures :mod:`gpuaccept.checks.pcie_link`: each GPU's link while copying, and its bandwidth.

Each GPU's copies run from its own NUMA node (the backend pins the copy thread
and the pinned host buffer to the GPU's ``local_cpulist`` within the process's
affinity). A GPU that fails (NVML lost it, or a copy hung past its deadline)
is recorded by name with zero columns; the others are still measured.
"""

from dataclasses import dataclass, field

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


@dataclass
class _Columns:
    """One entry per GPU in each list, in GPU order (zeros for a GPU that failed)."""

    gen: list[int] = field(default_factory=list)
    width: list[int] = field(default_factory=list)
    max_gen: list[int] = field(default_factory=list)
    max_width: list[int] = field(default_factory=list)
    device_max_gen: list[int] = field(default_factory=list)
    idle_gen: list[int] = field(default_factory=list)
    h2d: list[float] = field(default_factory=list)
    d2h: list[float] = field(default_factory=list)
    numa: list[int] = field(default_factory=list)

    def add(self, idle: PcieLinkState, copy: CopyMeasurement, numa_node: int | None) -> None:
        link = copy.link_under_load
        self.gen.append(link.generation)
        self.width.append(link.width)
        self.max_gen.append(link.max_generation)
        self.max_width.append(link.max_width)
        self.device_max_gen.append(link.device_max_generation or link.max_generation)
        self.idle_gen.append(idle.generation)
        self.h2d.append(round_figure(copy.h2d_gbps))
        self.d2h.append(round_figure(copy.d2h_gbps))
        self.numa.append(-1 if numa_node is None else numa_node)


def _cc_mode(hardware: HardwareBackend) -> str | None:
    """The confidential-computing mode when on ("unread" when it could not be read)."""
    cc = hardware.conf_compute()
    return "unread" if cc is None else (cc if cc != "off" else None)


def measure(
    hardware: HardwareBackend, policy: PcieLinkPolicy, context: ProbeContext
) -> PcieLinkObserved:
    gpus = hardware.gpus()
    if not gpus:
        raise Unavailable("no GPU to measure")
    cc_mode = _cc_mode(hardware)
    columns = _Columns()
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
            columns.add(_FAILED.link_under_load, _FAILED, None)
            continue
        if not copy.pinned_local:
            unpinned.append(gpu.index)
        columns.add(idle, copy, copy.numa_node)
        if columns.h2d[-1] > 0:
            context.h2d_gbps[gpu.index] = columns.h2d[-1]
    return PcieLinkObserved(
        gen=columns.gen,
        width=columns.width,
        max_gen=columns.max_gen,
        max_width=columns.max_width,
        device_max_gen=columns.device_max_gen
        if columns.device_max_gen != columns.max_gen
        else None,
        idle_gen=columns.idle_gen,
        h2d_gbps=columns.h2d,
        d2h_gbps=columns.d2h,
        numa_node=columns.numa,
        cc_mode=cc_mode,
        unpinned=unpinned or None,
        failed_gpus=failed or None,
    )
