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


class GpuFailedError(Exception):
    """One GPU failed (NVML ``GPU_IS_LOST``, fallen off the bus...) at one step.

    A measurement records the GPU as failed, by name, and goes on with the others.
    """

    def __init__(self, gpu: int, step: str, detail: str) -> None:
        super().__init__(f"GPU {gpu}: {step}: {detail}")
        self.gpu = gpu
        self.step = step
        self.detail = detail


class GpuHungError(GpuFailedError):
    """A wait on one GPU passed its own deadline (below the probe pod's)."""

    def __init__(self, gpu: int, step: str, deadline_s: float) -> None:
        super().__init__(gpu, step, f"hung: no completion within {deadline_s:g} s")
        self.deadline_s = deadline_s


@dataclass(frozen=True)
class GpuInfo:
    index: int
    name: str
    bus_id: str | None = None  # sysfs form, e.g. "0000:1b:00.0"
    uuid: str | None = None
    # Why this GPU cannot be measured (NVML lost it: GPU_IS_LOST...); None when usable.
    problem: str | None = None


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
    numa_node: int | None = None  # the GPU's NUMA node (sysfs numa_node; None: unknown)
    # The copy thread and its pinned host buffer ran on the GPU's local CPUs
    # (local_cpulist ∩ the process's affinity); False: they do not meet, or unknown.
    pinned_local: bool = False


@dataclass(frozen=True)
class AllreduceMeasurement:
    backend: str  # "nccl" | "gloo" | "profile"
    ranks: int
    # (bytes, seconds per iteration, mean over ranks, algbw GB/s, busbw GB/s)
    sweep: tuple[tuple[int, float, float, float], ...]
    source: str = "measured"  # "measured" | "profile"
    timing: str = "host-batch-mean"  # nccl-tests' way (see gpuaccept.probe.allreduce)

    @property
    def busbw_gbps(self) -> float:
        """The bus bandwidth of the largest message (the bandwidth-bound regime)."""
        return self.sweep[-1][3] if self.sweep else 0.0

    @property
    def algbw_gbps(self) -> float:
        return self.sweep[-1][2] if self.sweep else 0.0


@dataclass(frozen=True)
class VersionInfo:
    """Driver and library versions; ``None`` where the source could not answer.

    The node's: ``kernel_module``, ``nvml_driver``, ``cuda_driver`` (and whether
    NVML reported a driver/library mismatch). The probe image's (reported, never
    judged): ``cuda_runtime`` and ``nccl``, each with the library file it came
    from."""

    kernel_module: str | None = None
    nvml_driver: str | None = None
    nvml_mismatch: bool = False
    cuda_driver: str | None = None
    cuda_runtime: str | None = None
    cuda_runtime_library: str | None = None
    nccl: str | None = None
    nccl_library: str | None = None
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
        """NVML clock event reason bitmask (nvmlClocksEventReason*); raises
        :class:`GpuFailedError` when NVML lost the GPU."""

    def sm_clock(self, gpu: int) -> tuple[int, int]:
        """(current SM clock, max SM clock) in MHz; raises :class:`Unavailable`."""

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

    def pci_gpu_count(self) -> int:
        """NVIDIA display/3D controllers on the host's PCI bus (sysfs; 0: none found)."""
