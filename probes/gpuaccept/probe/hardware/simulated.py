"""The simulated backend: a node described by a hardware profile.

The profile's CPUs, PCIe links, kernel module version and boot ID are
materialized as a sysfs/procfs-shaped tree in a temporary directory and read
back with the same readers (:mod:`.sysfs`) that read a real host, so the file
formats are exercised in simulation too. Under load (a copy, or
:meth:`SimulatedBackend.gpu_load`) the PCIe link files switch to the profile's
``pcieLoad`` values. Nothing here sleeps: a probe of a simulated node takes
well under a second, and reports the profile's ``durations`` (default: the
budget table, :mod:`gpuaccept.checks.budget`) as its checks' and its own
times; with a ``time_scale`` above 0 it also takes that long, scaled.
"""

import dataclasses
import math
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import get_args

from gpuaccept.checks.gpu_models import NVSWITCH_CLASSES, gpu_model_class
from gpuaccept.checks.peer_bandwidth import parse_pairs
from gpuaccept.contracts.inservice import NvmlRecoveryAction
from gpuaccept.contracts.report import HardwareMode
from gpuaccept.probe import clocks
from gpuaccept.probe.hardware import topology_backend
from gpuaccept.probe.hardware.base import (
    NOT_SUPPORTED,
    AllreduceMeasurement,
    ConfComputeMode,
    CopyMeasurement,
    FabricInfo,
    GpuFailedError,
    GpuHungError,
    GpuInfo,
    GpuMemoryHealth,
    GpuSettings,
    LoadTimer,
    MatmulPrecision,
    NoSuchInterface,
    NvlinkLinks,
    PcieLinkState,
    PeerAccess,
    PerGpuFigures,
    RemappedRows,
    Unavailable,
    VersionInfo,
)
from gpuaccept.probe.hardware.infiniband import InfinibandView
from gpuaccept.probe.hardware.nvml_health import (
    FIRST_RESET_STATUS_BRANCH,
    recovery_action_field_id,
    reset_status_field_ids,
)
from gpuaccept.probe.hardware.profile import (
    GpuOverride,
    HardwareProfile,
    Link,
)
from gpuaccept.probe.hardware.simulated_throughput import SimulatedTimer, check_figures, triad
from gpuaccept.probe.hardware.simulated_topology import (
    gpu_switch_port,
    link_device,
    materialize_topology,
    refresh_ib_states,
)
from gpuaccept.probe.hardware.sysfs import (
    GEN_TO_SPEED,
    NVIDIA_VENDOR,
    NoCpufreq,
    PciNuma,
    SysfsError,
    copy_cpus,
    count_nvidia_gpus,
    count_nvswitches,
    format_cpu_list,
    parse_cpu_list,
    pci_device_dir,
    read_boot_id,
    read_cpu_governors,
    read_kernel_module_version,
    read_pci_numa,
    read_pcie_link,
)
from gpuaccept.probe.hardware.topology import HostTopology
from gpuaccept.probe.hardware.xid_events import XidLog

# nvmlDeviceGpuRecoveryAction_t values 0-7, in order
RECOVERY_ACTIONS: tuple[NvmlRecoveryAction, ...] = get_args(NvmlRecoveryAction)
# what NVML_FI_DEV_RESET_STATUS / _DRAIN_AND_RESET_STATUS can say (nvml_health.py)
RESET_STATUS_ACTIONS: frozenset[NvmlRecoveryAction] = frozenset(
    {"none", "gpu_reset", "drain_and_reset"}
)
LOST = "NVML: GPU is lost (NVML_ERROR_GPU_IS_LOST)"
# NVIDIA's Xid catalogue (docs.nvidia.com/deploy/xid-errors): Xid 79 "GPU has fallen off
# the bus"; from then on NVML answers GPU_IS_LOST for it and CUDA cannot use it.
FELL_OFF_BUS_XIDS = frozenset({79})
# A fixed namespace: a simulated GPU's UUID is the same for the same node and index.
SIM_UUID_NAMESPACE = uuid.UUID("6b1f3c52-5a3e-4c1e-9a57-0c6a4f1d9e21")


def simulated_uuid(node_name: str, index: int) -> str:
    """The UUID a simulated GPU has on ``node_name`` (the DRA stand-in publishes it too)."""
    return f"GPU-{uuid.uuid5(SIM_UUID_NAMESPACE, f'{node_name}/{index}')}"


NVML_MISMATCH = "NVML: driver/library version mismatch"
SIM_IDLE_SM_MHZ = 345  # an idle H100's SM clock
SIM_DEADLINE_S = 60.0  # the real backend's copy and load deadlines
KERNEL_MODULE_LINE = (
    "NVRM version: NVIDIA UNIX x86_64 Kernel Module  {version}  Tue Mar  5 22:23:56 UTC 2024\n"
    "GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)\n"
)


def _fast_tmp() -> str | None:
    """A RAM-backed directory when there is one (the tree has hundreds of files)."""
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None


def bus_id(index: int) -> str:
    return f"0000:{0x18 + index:02x}:00.0"


def materialize(profile: HardwareProfile, root: Path, host_boot_id: str | None = None) -> None:
    """Write ``root/sys`` and ``root/proc`` as a real host would show them."""
    sys_root, proc_root = root / "sys", root / "proc"
    cpu_root = sys_root / "devices" / "system" / "cpu"
    cpu_root.mkdir(parents=True)
    cpus = profile.cpus
    governors = dict.fromkeys(range(cpus.count), cpus.governor)
    for cpulist, governor in cpus.overrides.items():
        for cpu in parse_cpu_list(cpulist):
            if cpu < cpus.count:
                governors[cpu] = governor
    (cpu_root / "online").write_text(f"0-{cpus.count - 1}\n")
    for cpu, governor in governors.items():
        cpu_dir = cpu_root / f"cpu{cpu}"
        if cpus.cpufreq:
            (cpu_dir / "cpufreq").mkdir(parents=True)
            (cpu_dir / "cpufreq" / "scaling_governor").write_text(governor + "\n")
        else:
            cpu_dir.mkdir()
    for index in range(profile.gpus.count):
        gpu = profile.gpus.gpu(index)
        device = gpu_switch_port(sys_root, index) / bus_id(index)
        device.mkdir(parents=True)
        link_device(pci_device_dir(sys_root, bus_id(index)), device)
        (device / "vendor").write_text(NVIDIA_VENDOR + "\n")
        (device / "class").write_text("0x030200\n")
        (device / "max_link_speed").write_text(GEN_TO_SPEED[gpu.pcie_max_generation] + "\n")
        (device / "max_link_width").write_text(f"{gpu.pcie_max_width}\n")
        # -1: a single-node machine, or firmware without proximity data for the device
        numa = gpu.numa_node if cpus.numa_nodes and gpu.numa_node >= 0 else -1
        (device / "numa_node").write_text(f"{numa}\n")
        (device / "local_cpulist").write_text(format_cpu_list(cpus.node_cpus(gpu.numa_node)) + "\n")
        write_link(sys_root, index, gpu.idle)
    for switch in range(profile.gpus.nvswitch_count):
        # The baseboard's NVSwitches, as the host's PCI bus lists them (class 0x068000).
        device = pci_device_dir(sys_root, f"0000:{0x05 + switch:02x}:00.0")
        device.mkdir(parents=True)
        (device / "vendor").write_text(NVIDIA_VENDOR + "\n")
        (device / "class").write_text("0x068000\n")
    for index in range(profile.gpus.count, profile.gpus.pci_count):
        # On the bus, but not visible to NVML (fell off, or the driver cannot bring it up).
        device = pci_device_dir(sys_root, bus_id(index))
        device.mkdir(parents=True)
        (device / "vendor").write_text(NVIDIA_VENDOR + "\n")
        (device / "class").write_text("0x030200\n")
    nvidia = proc_root / "driver" / "nvidia"
    nvidia.mkdir(parents=True)
    kernel_module = profile.driver.kernel_module or profile.driver.version
    (nvidia / "version").write_text(KERNEL_MODULE_LINE.format(version=kernel_module))
    random_dir = proc_root / "sys" / "kernel" / "random"
    random_dir.mkdir(parents=True)
    boot_id = profile.node.boot_id or host_boot_id or "00000000-0000-4000-8000-000000000000"
    (random_dir / "boot_id").write_text(boot_id + "\n")
    materialize_topology(profile, sys_root)


def write_link(sys_root: Path, index: int, link: Link) -> None:
    device = pci_device_dir(sys_root, bus_id(index))
    (device / "current_link_speed").write_text(GEN_TO_SPEED[link.generation] + "\n")
    (device / "current_link_width").write_text(f"{link.width}\n")


class SimulatedBackend:
    mode = HardwareMode.SIMULATED

    def __init__(
        self,
        profile: HardwareProfile,
        host_proc_root: Path = Path("/proc"),
        time_scale: float = 0,
        node_name: str | None = None,
        host_indices: Sequence[int] | None = None,
    ) -> None:
        self.profile = profile
        self._node_name = node_name  # names the GPUs' UUIDs (None: NVML answers none)
        # The host's index of each GPU the container was given (simulated_visible.py):
        # its UUID's; None: the profile's GPUs are the host's.
        self._host_indices = tuple(host_indices) if host_indices is not None else None
        self._time_scale = time_scale  # > 0: take the profile's durations x this (seconds)
        self._tmp = Path(tempfile.mkdtemp(prefix="gpuaccept-sim-", dir=_fast_tmp()))
        try:
            try:
                host_boot_id: str | None = read_boot_id(host_proc_root)
            except SysfsError:
                host_boot_id = None
            materialize(profile, self._tmp, host_boot_id)
        except BaseException:  # a half-built tree must not stay behind in /dev/shm
            self.close()
            raise
        self._loaded = False
        self._ever_loaded = False  # a load has run (the NVLink counters have counted it)
        self._fabric_first_asked_s: dict[int, float] = {}
        self._ib_first_read_s: float | None = None  # the ports' sweep counts from here
        self._clock_s = 0.0  # virtual time: sleep() advances it, instantly
        self._load_started_s = 0.0
        self._load_samples: dict[int, int] = {}
        self._xid_log: XidLog | None = None
        self._xids_sent: set[int] = set()  # GPUs whose profile Xids were delivered

    @property
    def proc_root(self) -> Path:
        return self._tmp / "proc"

    def sysfs_root(self) -> Path:
        return self._tmp / "sys"

    def cpu_governors(self) -> dict[int, str]:
        try:
            return read_cpu_governors(self.sysfs_root())
        except NoCpufreq as exc:
            raise NoSuchInterface(f"no cpufreq driver: {exc}") from exc

    def boot_id(self) -> str | None:
        try:
            return read_boot_id(self.proc_root)
        except SysfsError:
            return None

    def gpus(self) -> list[GpuInfo]:
        if self._nvml_mismatch():
            return []
        return [
            GpuInfo(
                index=i,
                name=self.profile.gpus.model,
                bus_id=bus_id(i),
                uuid=simulated_uuid(self._node_name, self._host_index(i))
                if self._node_name
                else None,
                problem=LOST if self.profile.gpus.gpu(i).lost == "before" else None,
            )
            for i in range(self.profile.gpus.count)
        ]

    def _host_index(self, gpu: int) -> int:
        return self._host_indices[gpu] if self._host_indices is not None else gpu

    def _check_lost(self, gpu: int, step: str) -> None:
        """What NVML does for a GPU that fell off the bus: every query fails (a hung
        GPU still answers NVML)."""
        lost = self.profile.gpus.gpu(gpu).lost
        if lost == "before" or (lost == "under_load" and self._loaded):
            raise GpuFailedError(gpu, step, LOST)

    def gpu_problem(self) -> str | None:
        if self._nvml_mismatch():
            return NVML_MISMATCH
        if self.profile.gpus.count:
            return None
        if self._host_indices == ():  # the profile has GPUs; the container was given none
            return "no GPU given to the container (NVIDIA_VISIBLE_DEVICES)"
        return "the profile has no GPU"

    def pcie_link(self, gpu: int) -> PcieLinkState:
        """The GPU's sysfs link; its max generation in this system is NVML's, the lower of
        the GPU's own (sysfs ``max_link_speed``) and the platform's."""
        link = read_pcie_link(self.sysfs_root(), bus_id(gpu))
        cap = self.profile.gpus.gpu(gpu).pcie_system_max_generation
        system = min(link.max_generation, cap) if cap is not None else link.max_generation
        return PcieLinkState(
            link.generation,
            link.width,
            system,
            link.max_width,
            device_max_generation=link.max_generation,
        )

    def copy_bandwidth(self, gpu: int, nbytes: int) -> CopyMeasurement:
        spec = self.profile.gpus.gpu(gpu)
        if spec.lost == "hangs":  # the real backend's copy wait hits its deadline
            raise GpuHungError(gpu, "copy warm-up", SIM_DEADLINE_S)
        if spec.lost is not None:  # a copy loads the GPU
            raise GpuFailedError(gpu, "copy", LOST)
        numa = read_pci_numa(self.sysfs_root(), bus_id(gpu))
        pinned = bool(copy_cpus(numa, self.affinity()))
        # Unpinned, the scheduler may run the copy on any allowed CPU: model the far socket.
        remote = not pinned and numa.node is not None
        h2d = spec.h2d_remote_gbps if remote and spec.h2d_remote_gbps is not None else spec.h2d_gbps
        d2h = spec.d2h_remote_gbps if remote and spec.d2h_remote_gbps is not None else spec.d2h_gbps
        self._loaded_once([gpu])
        write_link(self.sysfs_root(), gpu, spec.load)
        try:
            under_load = self.pcie_link(gpu)
        finally:
            if not self._loaded:
                write_link(self.sysfs_root(), gpu, spec.idle)
        return CopyMeasurement(h2d, d2h, under_load, numa_node=numa.node, pinned_local=pinned)

    def affinity(self) -> frozenset[int]:
        """The probe's allowed CPUs (a real pod's ``os.sched_getaffinity(0)``)."""
        pod = self.profile.node.pod_cpus
        every = range(self.profile.cpus.count)
        return frozenset(parse_cpu_list(pod) if pod is not None else every)

    @contextmanager
    def gpu_load(self, precision: MatmulPrecision = "bf16") -> Iterator[LoadTimer]:
        if precision == "fp8":  # bf16 runs on every GPU (the throttle load)
            check_figures(self.profile, precision, "fp8 matmul")
        timer = SimulatedTimer(
            self.profile,
            precision,
            LOST,
            loaded=[i for i, g in enumerate(self.gpus()) if g.problem is None],
        )
        self._loaded = True
        self._load_started_s = self._clock_s
        self._load_samples = {}
        self._loaded_once(list(range(self.profile.gpus.count)))
        for index in range(self.profile.gpus.count):
            write_link(self.sysfs_root(), index, self.profile.gpus.gpu(index).load)
        try:
            yield timer
        finally:
            self._loaded = False
            for index in range(self.profile.gpus.count):
                write_link(self.sysfs_root(), index, self.profile.gpus.gpu(index).idle)
        for index in range(self.profile.gpus.count):  # its load thread never stops
            if self.profile.gpus.gpu(index).lost == "hangs":
                raise GpuHungError(index, "load", SIM_DEADLINE_S)

    def clock_event_reasons(self, gpu: int) -> int:
        self._check_lost(gpu, "clock event reasons")
        reasons = self.profile.gpus.gpu(gpu).clock_event_reasons
        if not self._loaded:
            return clocks.encode(list(reasons.idle))
        active = set(reasons.load)
        since_load = self._clock_s - self._load_started_s
        active |= {name for name, seconds in reasons.load_brief.items() if since_load < seconds}
        k = self._load_samples.get(gpu, 0)
        self._load_samples[gpu] = k + 1
        active |= {
            name  # the k-th sample is active when the running count of f*k steps up
            for name, f in reasons.load_fraction.items()
            if math.floor((k + 1) * f) > math.floor(k * f)
        }
        return clocks.encode(sorted(active))

    def sm_clock(self, gpu: int) -> tuple[int, int]:
        self._check_lost(gpu, "SM clock")
        spec = self.profile.gpus.gpu(gpu)
        if not self._loaded:
            return (SIM_IDLE_SM_MHZ, spec.sm_clock_max_mhz)
        return (spec.sm_clock_load_mhz or spec.sm_clock_max_mhz, spec.sm_clock_max_mhz)

    def _nvml_mismatch(self) -> bool:
        """The user-space driver and the kernel module differ: NVML's init fails with
        LIB_RM_VERSION_MISMATCH (what the probe sees in the toolkit's CDI mode)."""
        d = self.profile.driver
        return (d.nvml_library or d.version) != (d.kernel_module or d.version)

    def versions(self) -> VersionInfo:
        d = self.profile.driver
        if self.profile.gpus.count == 0 and not self._nvml_mismatch():
            return VersionInfo(notes=("the profile has no GPU",))
        kernel_module = read_kernel_module_version(self.proc_root, self.sysfs_root())
        runtime, nccl = d.cuda_runtime_version, d.nccl_version
        image = VersionInfo(
            cuda_runtime=runtime,
            cuda_runtime_library=f"libcudart.so.{runtime.split('.')[0]}" if runtime else None,
            nccl=nccl,
            nccl_library="libnccl.so.2" if nccl else None,
        )
        if self._nvml_mismatch():
            return dataclasses.replace(
                image,
                kernel_module=kernel_module,
                nvml_mismatch=True,
                notes=(NVML_MISMATCH,),
            )
        return dataclasses.replace(
            image,
            kernel_module=kernel_module,
            nvml_driver=d.nvml_library or d.version,
            cuda_driver=d.cuda_driver_version,
        )

    def allreduce(self, sizes: list[int], iterations: int, warmup: int) -> AllreduceMeasurement:
        n = self.profile.gpus.count
        if n < 2:
            raise Unavailable("all-reduce needs at least 2 GPUs")
        for index in range(n):
            lost = self.profile.gpus.gpu(index).lost
            if lost == "hangs":  # the real backend does not start NCCL over a hung GPU
                raise GpuFailedError(index, "all-reduce", "not attempted: hung earlier")
            if lost is not None:  # NCCL cannot init on it
                raise GpuFailedError(index, "all-reduce", LOST)
        self._loaded_once(list(range(n)))
        sweep = []
        for size in sizes:  # the latency-bandwidth curve of the profile
            busbw = self.profile.allreduce.busbw_at(size)
            algbw = busbw * n / (2 * (n - 1))
            seconds = size / (algbw * 1e9) if algbw > 0 else float("inf")
            sweep.append((size, seconds, algbw, busbw))
        return AllreduceMeasurement(
            backend="simulated", ranks=n, sweep=tuple(sweep), source="profile"
        )

    def sleep(self, seconds: float) -> None:
        self._clock_s += seconds

    def phase_seconds(self, phase: str, measured_s: float | None, budget_s: float) -> float | None:
        """The profile's ``durations`` for ``phase``, else ``budget_s``. With a time scale
        above 0 the probe also takes that long (scaled): it sleeps what the phase's real
        work (``measured_s``) left of it."""
        seconds = self.profile.durations.get(phase, budget_s)
        if self._time_scale > 0:
            time.sleep(max(0.0, seconds * self._time_scale - (measured_s or 0.0)))
        return round(seconds, 3)

    def close(self) -> None:
        shutil.rmtree(self._tmp, ignore_errors=True)

    # --- NVLink, fabric, configuration ------------------------------------------
    def nvlink(self, gpu: int) -> NvlinkLinks:
        self._check_lost(gpu, "NVLink")
        spec = self.profile.gpus.gpu(gpu)
        if "nvlinkCount" in spec.unsupported:
            raise Unavailable(f"GPU {gpu}: NVML gives no NVLink count (NotSupported)")
        count = spec.nvlink.links
        active = tuple(link for link in range(count) if link not in spec.nvlink.inactive)
        off = set(spec.nvlink.counters_not_supported)
        parts = {
            "replay": ("replay",),
            "recovery": ("recovery",),
            "crc": ("crc_flit", "crc_data"),
            "ecc": ("ecc_data",),
        }
        readable = [name for name, of in parts.items() if not set(of) <= off]
        errors = None
        if "nvlinkCounters" not in spec.unsupported and readable:
            # the counters are cumulative: what was there at the start, plus what the
            # probe's own load added once it has run (the baseline reads before it)
            during: dict[str, dict[int, int]] = (
                {str(k): v for k, v in spec.nvlink.errors.items()} if self._ever_loaded else {}
            )
            before: dict[str, dict[int, int]] = {
                str(k): v for k, v in spec.nvlink.errors_before.items()
            }
            errors = {
                name: tuple(
                    before.get(name, {}).get(link, 0) + during.get(name, {}).get(link, 0)
                    if link in active
                    else 0
                    for link in range(count)
                )
                for name in readable
            }
        not_supported = (
            tuple(sorted(off))
            if "nvlinkCounters" not in spec.unsupported
            else ("crc_data", "crc_flit", "ecc_data", "recovery", "replay")
        )
        return NvlinkLinks(count=count, active=active, errors=errors, not_supported=not_supported)

    def gpu_fabric(self, gpu: int) -> FabricInfo:
        """As NVML: the SXM (NVSwitch) classes complete their registration; the call
        answers NotSupported on the other models, unless the profile says otherwise."""
        self._check_lost(gpu, "fabric state")
        spec = self.profile.gpus.gpu(gpu).fabric
        if spec is None:
            if gpu_model_class(self.profile.gpus.model) not in NVSWITCH_CLASSES:
                return FabricInfo("unsupported", 0, (), 0)
            # An HGX board without NVSwitches (4-GPU, linked directly) is on no fabric.
            on_fabric = self.profile.gpus.nvswitch_count > 0
            return FabricInfo(state="completed" if on_fabric else "not_supported")
        if spec.state == "unsupported":
            return FabricInfo(state="unsupported", struct_version=0)
        if spec.state == "in_progress" and spec.completes_after_s is not None:
            asked = self._fabric_first_asked_s.setdefault(gpu, self._clock_s)
            if self._clock_s - asked >= spec.completes_after_s:
                return FabricInfo("completed", 0, (), spec.struct_version)
        conditions = tuple(spec.conditions)
        if spec.struct_version < 3:  # no health summary before v3, no mask before v2
            conditions = tuple(c for c in conditions if c not in ("unhealthy", "limited_capacity"))
            conditions = conditions if spec.struct_version == 2 else ()
        return FabricInfo(spec.state, spec.status, conditions, spec.struct_version)

    def persistenced_socket(self) -> bool:
        return self.profile.node.persistenced_socket

    def gpu_settings(self, gpu: int) -> GpuSettings:
        self._check_lost(gpu, "configuration")
        spec = self.profile.gpus.gpu(gpu)
        off = set(spec.unsupported)
        default_mw = round(spec.default_power_limit_w * 1000)
        enforced = (
            spec.power_limit_w if spec.power_limit_w is not None else spec.default_power_limit_w
        )
        pending = spec.mig_pending if spec.mig_pending is not None else spec.mig_enabled
        return GpuSettings(
            power_limit_mw=None if "powerLimit" in off else round(enforced * 1000),
            default_power_limit_mw=None if "powerLimit" in off else default_mw,
            # Without the daemon's socket NVML reads Off whatever the host's mode.
            persistence=None
            if "persistence" in off
            else spec.persistence and self.profile.node.persistenced_socket,
            mig_current=None if "mig" in off else spec.mig_enabled,
            mig_pending=None if "mig" in off else pending,
            compute_mode=None if "computeMode" in off else spec.compute_mode,
        )

    def gpu_numa(self, gpu: int) -> PciNuma:
        self._check_lost(gpu, "NUMA placement")
        return topology_backend.gpu_numa(self.sysfs_root(), gpu, bus_id(gpu))

    def host_topology(self) -> HostTopology:
        return topology_backend.host_topology(self.sysfs_root())

    def conf_compute(self) -> ConfComputeMode | None:
        return self.profile.driver.conf_compute

    def infiniband(self) -> InfinibandView:
        if self.profile.infiniband is not None:
            if self._ib_first_read_s is None:
                self._ib_first_read_s = self._clock_s
            since = self._clock_s - self._ib_first_read_s
            refresh_ib_states(
                self.profile.infiniband, self.sysfs_root(), self.profile.gpus.count, since
            )
        return topology_backend.infiniband(self.sysfs_root(), [g.bus_id for g in self.gpus()])

    # --- state earlier faults left; Xid events ----------------------------------
    def _loaded_once(self, gpus: list[int]) -> None:
        """A GPU's profile Xids reach the open listener the first time it is loaded
        (a lost-before GPU is never loaded)."""
        self._ever_loaded = True
        log = self._xid_log
        if log is None:
            return
        for gpu in gpus:
            spec = self.profile.gpus.gpu(gpu)
            if gpu in self._xids_sent or spec.lost == "before":
                continue
            self._xids_sent.add(gpu)
            for xid in spec.xids:
                log.record(gpu, xid)
            if FELL_OFF_BUS_XIDS & set(spec.xids):
                self._fall_off(gpu)

    def _fall_off(self, gpu: int) -> None:
        """The consequence of an Xid 79: the GPU is gone for every later step, as on a
        real node (every NVML query answers GPU_IS_LOST, CUDA errors on it)."""
        gpus = self.profile.gpus
        override = gpus.overrides.get(gpu) or GpuOverride()
        overrides = {**gpus.overrides, gpu: override.model_copy(update={"lost": "before"})}
        self.profile = self.profile.model_copy(
            update={"gpus": gpus.model_copy(update={"overrides": overrides})}
        )

    @contextmanager
    def xid_listener(self) -> Iterator[XidLog]:
        log = XidLog(clock=lambda: self._clock_s)
        gpus = self.gpus()
        no_events = {
            g.index
            for g in gpus
            if g.problem is None and "xidEvents" in self.profile.gpus.gpu(g.index).unsupported
        }
        log.watched = tuple(g.index for g in gpus if g.problem is None and g.index not in no_events)
        log.unwatched = {g.index: "NVML cannot open it" for g in gpus if g.problem}
        log.unwatched |= {gpu: "no critical-Xid events (NVML)" for gpu in sorted(no_events)}
        self._xid_log = log
        try:
            yield log
        finally:
            self._xid_log = None
            log.stop()

    def gpu_recovery_action(self, gpu: int) -> int:
        self._check_lost(gpu, "recovery action")
        spec = self.profile.gpus.gpu(gpu)
        driver = self.profile.driver.version  # one driver for every GPU
        if recovery_action_field_id(driver) is not None:
            return RECOVERY_ACTIONS.index(spec.recovery_action)
        if reset_status_field_ids(driver) is None:  # as NVML: neither field before R560
            raise Unavailable(
                f"driver {driver}: no recovery action or reset status field before "
                f"R{FIRST_RESET_STATUS_BRANCH}"
            )
        # R560-R565: the two reset-status flags say none, a GPU reset or drain and reset
        if spec.recovery_action not in RESET_STATUS_ACTIONS:
            raise Unavailable(
                f"GPU {gpu}: the reset-status fields of driver {driver} cannot say "
                f"{spec.recovery_action}"
            )
        return RECOVERY_ACTIONS.index(spec.recovery_action)

    def memory_health(self, gpu: int) -> GpuMemoryHealth:
        self._check_lost(gpu, "memory health")
        memory = self.profile.gpus.gpu(gpu).memory
        rows = memory.remapped_rows
        retires = memory.retired_pages is not None
        not_read = {}
        if not memory.ecc_supported:  # as NVML on a GPU without ECC: mode and counters
            not_read = dict.fromkeys(
                ("eccMode", "volatileUncorrected", "aggregateUncorrected"), NOT_SUPPORTED
            )
        if rows is None and not retires:
            not_read["remappedRows"] = "NotSupported, and no page retirement either"
        counters = memory.ecc and memory.ecc_supported
        pending = memory.ecc if memory.ecc_pending is None else memory.ecc_pending
        return GpuMemoryHealth(
            ecc_mode=(memory.ecc, pending) if memory.ecc_supported else None,
            volatile_uncorrected=memory.volatile_uncorrected if counters else None,
            aggregate_uncorrected=memory.aggregate_uncorrected if counters else None,
            remapped_rows=(
                RemappedRows(rows.correctable, rows.uncorrectable, rows.pending, rows.failed)
                if rows is not None
                else None
            ),
            retired_pages=memory.retired_pages if rows is None else None,
            retire_pending=memory.retire_pending if rows is None and retires else None,
            not_read=not_read,
        )

    def ecc_corrected(self, gpu: int) -> int:
        """Corrected ECC errors since the driver loaded (the in-service watch)."""
        self._check_lost(gpu, "corrected ECC errors")
        memory = self.profile.gpus.gpu(gpu).memory
        if not memory.ecc_supported:
            raise Unavailable(f"GPU {gpu}: no ECC: NVML answers NotSupported")
        if not memory.ecc:
            raise Unavailable(f"GPU {gpu}: ECC is off: no ECC counters")
        return memory.volatile_corrected

    def pci_gpu_count(self) -> int:
        return count_nvidia_gpus(self.sysfs_root())

    def pci_nvswitch_count(self) -> int:
        return count_nvswitches(self.sysfs_root())

    # --- per-GPU memory bandwidth (gpuaccept.probe.hardware.simulated_throughput) ---
    def memory_bandwidth(self, nbytes: int, iterations: int, warmup: int) -> PerGpuFigures:
        if self._nvml_mismatch() or self.profile.gpus.count == 0:
            raise Unavailable(self.gpu_problem() or "no GPU")
        check_figures(self.profile, "memory", "memory bandwidth")
        self._loaded_once([i for i, g in enumerate(self.gpus()) if g.problem is None])
        return triad(self.profile, LOST)

    # --- GPU-to-GPU peer copies (peer_bandwidth) ------------------------------------------
    def _peer_pair(self, src: int, dst: int) -> tuple[str, bool, float]:
        """(NVML's word, peer access, unidirectional GB/s) of the ordered pair, as the
        profile's ``p2p`` section says, with the defaults of a healthy node of its model."""
        spec = self.profile.p2p
        on_nvswitch = gpu_model_class(self.profile.gpus.model) in NVSWITCH_CLASSES
        word: str = spec.nvml or ("nvlink" if on_nvswitch else "ok")
        access, gbps = spec.peer_access, spec.gbps
        for key, override in spec.pairs.items():
            if (src, dst) in parse_pairs(key, self.profile.gpus.count):
                word = override.nvml or word
                access = override.peer_access if override.peer_access is not None else access
                gbps = override.gbps if override.gbps is not None else gbps
        granted = access if access is not None else word in ("nvlink", "ok")
        if gbps is None:
            pcie = min(self.profile.gpus.gpu(src).h2d_gbps, self.profile.gpus.gpu(dst).h2d_gbps)
            if not granted:
                gbps = pcie / 2  # staged through host memory: two PCIe hops
            elif word == "nvlink":
                gbps = spec.nvlink_gbps
            else:
                gbps = pcie
        return word, granted, gbps

    def _peer_copy_gpus(self, gpus: tuple[int, ...], step: str) -> None:
        for gpu in gpus:
            lost = self.profile.gpus.gpu(gpu).lost
            if lost == "hangs":  # the real backend's wait on the copy hits its deadline
                raise GpuHungError(gpu, step, SIM_DEADLINE_S)
            if lost is not None:  # a copy loads the GPU
                raise GpuFailedError(gpu, step, LOST)
        self._loaded_once(list(gpus))

    def peer_access(self, src: int, dst: int) -> PeerAccess:
        self._check_lost(src, "P2P status")
        self._check_lost(dst, "P2P status")
        word, granted, _gbps = self._peer_pair(src, dst)
        return PeerAccess(nvml=word, cuda=granted)

    def peer_copy(self, src: int, dst: int, nbytes: int, iterations: int, warmup: int) -> float:
        self._peer_copy_gpus((src, dst), f"peer copy {src}>{dst}")
        return self._peer_pair(src, dst)[2]

    def peer_copy_bidirectional(
        self, first: int, second: int, nbytes: int, iterations: int, warmup: int
    ) -> float:
        self._peer_copy_gpus((first, second), f"peer copy {first}<>{second}")
        one_way = self._peer_pair(first, second)[2] + self._peer_pair(second, first)[2]
        return one_way / 2 * self.profile.p2p.bidirectional_factor
