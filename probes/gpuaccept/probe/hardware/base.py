"""The narrow interface between the checks and the machine.

A check calls only the methods of :class:`HardwareBackend`. Two backends
implement it: :mod:`.real` (NVML, sysfs, /proc, torch) and :mod:`.simulated`
(a hardware-profile YAML). Both read CPU governors, PCIe links (where sysfs
has them), the kernel module version and the boot ID through the same readers
in :mod:`.sysfs`.
"""

from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Literal, Protocol

from gpuaccept.contracts.report import HardwareMode

# The errors are part of this interface: re-exported (`X as X`), a measurement imports
# them from here.
from gpuaccept.probe.hardware.errors import GpuFailedError as GpuFailedError  # noqa: PLC0414
from gpuaccept.probe.hardware.errors import GpuHungError as GpuHungError  # noqa: PLC0414
from gpuaccept.probe.hardware.errors import NoSuchInterface as NoSuchInterface  # noqa: PLC0414
from gpuaccept.probe.hardware.errors import PeerCopyFailedError as PeerCopyFailedError  # noqa: PLC0414
from gpuaccept.probe.hardware.errors import Unavailable as Unavailable  # noqa: PLC0414
from gpuaccept.probe.hardware.infiniband import InfinibandView
from gpuaccept.probe.hardware.sysfs import PciNuma
from gpuaccept.probe.hardware.topology import HostTopology
from gpuaccept.probe.hardware.xid_events import XidLog


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
    """A GPU's PCIe link: the current generation and width, the best generation the
    link can train at in this system (the lower of the GPU's and the platform's: NVML's
    ``nvmlDeviceGetMaxPcieLinkGeneration``), and the GPU's own maximum width and
    generation (its LNKCAP: sysfs ``max_link_*``, ``nvmlDeviceGetGpuMaxPcieLinkGeneration``)."""

    generation: int
    width: int
    max_generation: int  # in this system
    max_width: int  # the GPU's own: a x8 slot or riser is a fault, not a cap
    device_max_generation: int | None = None  # the GPU's own (None: not known apart)


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
    timing: str = "host-batch-mean"  # nccl-tests' way (see gpuaccept.probe.hardware.allreduce)

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


@dataclass(frozen=True)
class NvlinkLinks:
    """One GPU's NVLinks: the device's link count (``NVML_FI_DEV_NVLINK_LINK_COUNT``),
    which of them are active, and each link's cumulative error counters."""

    count: int
    active: tuple[int, ...]  # the indices of the active links
    # counter ("replay", "recovery", "crc", "ecc") -> per link, index order, for the counters NVML
    # answered; None: NVML answers none of them (each is read on its own: DCGM's NVLink
    # health reads every field separately, and Hopper lacks some per-link ones)
    errors: dict[str, tuple[int, ...]] | None = None
    # The NVML counters (replay, recovery, crc_flit, crc_data, ecc_data) answered with
    # NotSupported.
    not_supported: tuple[str, ...] = ()
    # The NVML counters answered with another error on some link: not judged on this GPU
    not_read: tuple[str, ...] = ()


@dataclass(frozen=True)
class FabricInfo:
    """One GPU's ``nvmlDeviceGetGpuFabricInfoV`` answer."""

    state: str  # "not_supported" | "not_started" | "in_progress" | "completed"
    status: int = 0  # nvmlReturn_t of the registration (meaningful once completed)
    conditions: tuple[str, ...] = ()  # flagged health conditions (FabricCondition names)
    struct_version: int = 3


@dataclass(frozen=True)
class GpuSettings:
    """One GPU's configuration; ``None`` where NVML answers NotSupported."""

    power_limit_mw: int | None = None  # enforced
    default_power_limit_mw: int | None = None
    persistence: bool | None = None
    mig_current: bool | None = None  # True: enabled
    mig_pending: bool | None = None
    compute_mode: str | None = None  # "default" | "exclusive_process" | "prohibited" | ...


@dataclass(frozen=True)
class RemappedRows:
    """``nvmlDeviceGetRemappedRows``: rows remapped for each cause, and the flags."""

    correctable: int
    uncorrectable: int
    pending: bool  # a remap waits for the next GPU reset
    failed: bool  # a remap failed in the past: the GPU is out of spare rows


# GpuMemoryHealth.not_read's reason for NVML_ERROR_NOT_SUPPORTED: for the ECC mode, the
# GPU has no ECC (nvmlDeviceGetEccMode: "Only applicable to devices with ECC")
NOT_SUPPORTED = "NotSupported"


@dataclass(frozen=True)
class GpuMemoryHealth:
    """One GPU's memory error state; ``None`` where NVML did not answer."""

    ecc_mode: tuple[bool, bool] | None  # (current, pending) enabled
    volatile_uncorrected: int | None  # since the driver loaded
    aggregate_uncorrected: int | None  # the GPU's lifetime
    remapped_rows: RemappedRows | None  # None: the GPU does not remap rows (before Ampere)
    retired_pages: int | None  # None: the GPU does not retire pages (Ampere and later)
    retire_pending: bool | None
    not_read: dict[str, str] = field(default_factory=dict)  # part → why


ConfComputeMode = Literal["off", "on", "devtools"]


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

    def gpu_load(
        self, precision: "MatmulPrecision" = "bf16"
    ) -> AbstractContextManager["LoadTimer"]:
        """Keep every GPU busy with ``precision`` matmuls inside the ``with`` block; the
        :class:`LoadTimer` it yields times them (raises :class:`Unavailable` when no GPU
        can run ``precision``)."""

    def clock_event_reasons(self, gpu: int) -> int:
        """NVML clock event reason bitmask (nvmlClocksEventReason*); raises
        :class:`GpuFailedError` when NVML lost the GPU."""

    def sm_clock(self, gpu: int) -> tuple[int, int]:
        """(current SM clock, max SM clock) in MHz; raises :class:`Unavailable`."""

    def versions(self) -> VersionInfo: ...

    def allreduce(self, sizes: list[int], iterations: int, warmup: int) -> AllreduceMeasurement: ...

    def cpu_governors(self) -> dict[int, str]:
        """``{cpu: cpufreq governor}`` for the online CPUs; raises :class:`NoSuchInterface`
        when the kernel has no cpufreq driver (VMs; hosts whose BIOS owns the P-states)."""

    def boot_id(self) -> str | None:
        """The host's boot ID (``<proc>/sys/kernel/random/boot_id``), if readable."""

    def sleep(self, seconds: float) -> None:
        """Wait between samples (instant in simulation)."""

    def phase_seconds(self, phase: str, measured_s: float | None, budget_s: float) -> float | None:
        """The seconds to report for ``phase`` (a check's name, or the start before the
        first check): what was measured on real hardware (``None``: not measurable);
        on a simulated node what its profile states, else ``budget_s`` (the budget
        table's figure)."""

    def close(self) -> None: ...

    def nvlink(self, gpu: int) -> NvlinkLinks:
        """The GPU's NVLinks; raises :class:`Unavailable` when NVML cannot report the
        link count, :class:`GpuFailedError` when NVML lost the GPU."""

    def gpu_fabric(self, gpu: int) -> FabricInfo:
        """The GPU's NVSwitch fabric state; raises :class:`Unavailable` when the driver
        has no fabric call."""

    def gpu_settings(self, gpu: int) -> GpuSettings:
        """Power limits, persistence, MIG and compute mode (``None`` where unsupported)."""

    def persistenced_socket(self) -> bool:
        """Whether nvidia-persistenced's socket is reachable from here (without it, NVML
        in a container reads persistence mode as Off although it is on)."""

    def gpu_numa(self, gpu: int) -> PciNuma:
        """The GPU's PCI ``numa_node`` (None: -1) and ``local_cpulist``; raises
        :class:`GpuFailedError` when its PCI device cannot be read."""

    def host_topology(self) -> HostTopology:
        """The CPU sockets and NUMA nodes; raises :class:`Unavailable`."""

    def conf_compute(self) -> ConfComputeMode | None:
        """The system's confidential computing mode (NVML ``nvmlSystemGetConfComputeState``:
        ``ccFeature``, ``devToolsMode``); ``"off"`` where the driver or GPUs have none;
        None where it could not be read."""

    def infiniband(self) -> InfinibandView:
        """The InfiniBand/RoCE HCAs visible here (``/sys/class/infiniband``) and the
        RDMA netns mode; raises :class:`Unavailable` when sysfs cannot be read."""

    def xid_listener(self) -> AbstractContextManager[XidLog]:
        """Record critical Xids on every GPU inside the ``with`` block (never raises:
        what could not be watched is in the log)."""

    def gpu_recovery_action(self, gpu: int) -> int:
        """NVML's GPU recovery action (0 none … 7 system reboot); raises
        :class:`Unavailable` with the reason when the driver present cannot answer it,
        :class:`GpuFailedError` when NVML lost the GPU."""

    def memory_health(self, gpu: int) -> GpuMemoryHealth:
        """ECC mode and counts, remapped rows, retired pages; raises
        :class:`GpuFailedError` when NVML lost the GPU."""

    def pci_gpu_count(self) -> int:
        """NVIDIA display/3D controllers on the host's PCI bus (sysfs; 0: none found)."""

    def pci_nvswitch_count(self) -> int:
        """NVSwitches on the host's PCI bus (sysfs class 0x068000; 0: none)."""

    # --- per-GPU throughput (gpu_compute, gpu_memory_bandwidth) ---------------------
    def memory_bandwidth(self, nbytes: int, iterations: int, warmup: int) -> "PerGpuFigures":
        """Every usable GPU's STREAM triad bandwidth, GB/s (3 arrays of ``nbytes``
        counted per triad), all GPUs at once; raises :class:`Unavailable`."""

    # --- GPU-to-GPU peer copies (peer_bandwidth) -----------------------------------------
    def peer_access(self, src: int, dst: int) -> "PeerAccess":
        """NVML's P2P status and CUDA's peer access for the ordered pair; raises
        :class:`GpuFailedError` when NVML lost a GPU."""

    def peer_copy(self, src: int, dst: int, nbytes: int, iterations: int, warmup: int) -> float:
        """GB/s of ``iterations`` copies of ``nbytes`` from ``src`` to ``dst`` (after
        ``warmup``), timed with CUDA events; raises :class:`GpuFailedError` (or
        :class:`GpuHungError`) naming the GPU."""

    def peer_copy_bidirectional(
        self, first: int, second: int, nbytes: int, iterations: int, warmup: int
    ) -> float:
        """GB/s of both directions at once on two streams, summed."""


MatmulPrecision = Literal["bf16", "fp8"]


@dataclass(frozen=True)
class PerGpuFigures:
    """One figure per GPU (TFLOPS, GB/s) and the GPUs that gave none, with why."""

    values: dict[int, float]
    failed: dict[int, str] = field(default_factory=dict)


class LoadTimer(Protocol):
    """Times the matmuls of a :meth:`HardwareBackend.gpu_load` block."""

    matrix: int  # n of the n x n x n matmuls

    def start(self) -> None:
        """Count the matmul batches that begin from now on (the warm-up is over)."""

    def figures(self) -> PerGpuFigures:
        """TFLOPS per GPU over the batches counted since :meth:`start` (called inside the
        block; waits for each loaded GPU's first counted batches, with a deadline)."""


# --- GPU-to-GPU peer copies (peer_bandwidth) -------------------------------------------
@dataclass(frozen=True)
class PeerAccess:
    """One ordered pair (src, dst): NVML's word on P2P between them and whether CUDA
    grants this process peer access.

    ``nvml``: ``nvlink`` when ``nvmlDeviceGetP2PStatus`` answers OK for the NVLink
    capability, else its answer for the read capability: ``ok`` (P2P over PCIe) or
    ``chipset_not_supported``, ``gpu_not_supported``, ``ioh_topology_not_supported``,
    ``disabled_by_regkey``, ``not_supported``, ``unknown``."""

    nvml: str
    cuda: bool  # cudaDeviceCanAccessPeer(src, dst)
