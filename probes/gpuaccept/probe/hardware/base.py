"""The narrow interface between the checks and the machine.

A check calls only the methods of :class:`HardwareBackend`. Two backends
implement it: :mod:`.real` (NVML, sysfs, /proc, torch) and :mod:`.simulated`
(a hardware-profile YAML). Both read CPU governors, PCIe links (where sysfs
has them), the kernel module version and the boot ID through the same readers
in :mod:`.sysfs`.
"""

from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Protocol

from gpuaccept.contracts.report import HardwareMode


class Unavailable(Exception):  # noqa: N818 - reads as "the hardware is unavailable"
    """The hardware cannot answer this question; the check result is ``skip``."""


@dataclass(frozen=True)
class GpuInfo:
    index: int
    name: str
    bus_id: str | None = None  # sysfs form, e.g. "0000:1b:00.0"
    uuid: str | None = None


@dataclass(frozen=True)
class PcieLinkState:
    generation: int
    width: int
    max_generation: int
    max_width: int


@dataclass(frozen=True)
class CopyMeasurement:
    """Pinned-memory copy bandwidth of one GPU, and its link while copying."""

    h2d_gbps: float
    d2h_gbps: float
    link_under_load: PcieLinkState


@dataclass(frozen=True)
class AllreduceMeasurement:
    backend: str  # "nccl" | "gloo" | "profile"
    ranks: int
    # (bytes, seconds per iteration of the slowest rank, algbw GB/s, busbw GB/s)
    sweep: tuple[tuple[int, float, float, float], ...]
    source: str = "measured"  # "measured" | "profile"

    @property
    def busbw_gbps(self) -> float:
        """The bus bandwidth of the largest message (the bandwidth-bound regime)."""
        return self.sweep[-1][3] if self.sweep else 0.0

    @property
    def algbw_gbps(self) -> float:
        return self.sweep[-1][2] if self.sweep else 0.0


@dataclass(frozen=True)
class VersionInfo:
    """Driver and library versions; ``None`` where the source could not answer."""

    kernel_module: str | None = None
    nvml_library: str | None = None
    nvml_mismatch: bool = False
    gpu_drivers: tuple[str, ...] = ()
    cuda_driver: str | None = None
    cuda_runtime: str | None = None
    nccl: str | None = None
    notes: tuple[str, ...] = field(default=())


class HardwareBackend(Protocol):
    """What the checks may ask of the machine. Everything else is off limits."""

    mode: HardwareMode

    def gpus(self) -> list[GpuInfo]:
        """The GPUs visible to the probe (empty when there are none)."""

    def gpu_problem(self) -> str | None:
        """Why no GPU could be enumerated (NVML missing, driver not loaded...)."""

    def pcie_link(self, gpu: int) -> PcieLinkState:
        """The link as it is now (may be downshifted when idle)."""

    def copy_bandwidth(self, gpu: int, nbytes: int) -> CopyMeasurement:
        """H2D and D2H pinned-memory bandwidth, sampling the link while copying."""

    def gpu_load(self) -> AbstractContextManager[None]:
        """Keep every GPU busy inside the ``with`` block."""

    def clock_event_reasons(self, gpu: int) -> int:
        """NVML clock event reason bitmask (nvmlClocksEventReason*)."""

    def versions(self) -> VersionInfo: ...

    def allreduce(self, sizes: list[int], iterations: int, warmup: int) -> AllreduceMeasurement: ...

    def cpu_governors(self) -> dict[int, str]:
        """``{cpu: cpufreq governor}`` for the online CPUs; raises :class:`Unavailable`
        when the kernel exposes no cpufreq (common in VMs)."""

    def boot_id(self) -> str | None:
        """The host's boot ID (``<proc>/sys/kernel/random/boot_id``), if readable."""

    def sleep(self, seconds: float) -> None:
        """Wait between samples (instant in simulation)."""

    def close(self) -> None: ...
