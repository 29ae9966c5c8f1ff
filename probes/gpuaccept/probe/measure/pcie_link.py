"""Measures :mod:`gpuaccept.checks.pcie_link`: each GPU's link while copying, and its bandwidth."""

from gpuaccept.checks.pcie_link import PcieLinkObserved, PcieLinkPolicy
from gpuaccept.probe.hardware.base import HardwareBackend, Unavailable
from gpuaccept.probe.measure.context import ProbeContext
from gpuaccept.probe.measure.rounding import round1

COPY_BYTES = 256 << 20


def measure(
    hardware: HardwareBackend, policy: PcieLinkPolicy, context: ProbeContext
) -> PcieLinkObserved:
    gpus = hardware.gpus()
    if not gpus:
        raise Unavailable("no GPU to measure")
    gen: list[int] = []
    width: list[int] = []
    max_gen: list[int] = []
    max_width: list[int] = []
    idle_gen: list[int] = []
    h2d: list[float] = []
    d2h: list[float] = []
    for gpu in gpus:
        context.progress(f"GPU {gpu.index}: copy bandwidth")
        idle = hardware.pcie_link(gpu.index)
        copy = hardware.copy_bandwidth(gpu.index, COPY_BYTES)
        link = copy.link_under_load
        gen.append(link.generation)
        width.append(link.width)
        max_gen.append(link.max_generation)
        max_width.append(link.max_width)
        idle_gen.append(idle.generation)
        h2d.append(round1(copy.h2d_gbps))
        d2h.append(round1(copy.d2h_gbps))
    return PcieLinkObserved(
        gen=gen,
        width=width,
        max_gen=max_gen,
        max_width=max_width,
        idle_gen=idle_gen,
        h2d_gbps=h2d,
        d2h_gbps=d2h,
    )
